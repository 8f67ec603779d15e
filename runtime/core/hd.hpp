// gradsync/core/hd.hpp — GS_HD marks functions usable on host and device (CUDA), so the
// element-wise math is written once and CPU tests cover what GPU kernels run.
#pragma once
#if defined(__CUDACC__)
#define GS_HD __host__ __device__ __forceinline__
#else
#define GS_HD inline
#endif
