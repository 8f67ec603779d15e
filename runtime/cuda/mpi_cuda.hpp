// gradsync/cuda/mpi_cuda.hpp — can MPI take device pointers?
//
// Open MPI built with CUDA support ("CUDA-aware") accepts device pointers in every call;
// Debian's Open MPI is not built that way, so gradsync moves GPU buffers over MPI through
// pinned host memory (cuda/host_staging.hpp). The answer is recorded in the bench header;
// staging is used either way, because our own algorithms reduce on the host.
#pragma once

#include <string>

namespace gradsync {

// Compile time (MPIX_CUDA_AWARE_SUPPORT from <mpi-ext.h>, when the header exists) and run
// time (MPIX_Query_cuda_support()) both say yes. False for MPIs without the extension.
bool mpi_cuda_aware();

// "yes", "no (built without CUDA support)", "no (CUDA support disabled at run time)",
// "unknown (no MPIX_Query_cuda_support)".
std::string mpi_cuda_aware_text();

}  // namespace gradsync
