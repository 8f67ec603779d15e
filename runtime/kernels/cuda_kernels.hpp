// gradsync/kernels/cuda_kernels.hpp — CUDA kernels of compression and mixed precision:
// the same operations as cpu_kernels.hpp, on device memory, launched on a given stream.
//
// Purpose: the GPU path of the compressors and the loss scaler (device-resident buckets).
// Approach: every kernel is a grid-stride loop over the scalar functions of
// kernels/elementwise.hpp, so it produces the bits the CPU reference produces (built with
// -fmad=false: no contraction changes a rounding). Reductions (norms, sign scales) add
// exact double squares in a fixed order (per-block partials, then one block), so they are
// deterministic. Top-k sorts (magnitude key, index) pairs with CUB's stable radix sort
// and takes the first k: the true k largest, ties in index order, like the CPU.
// Use: all pointers are device pointers; calls are asynchronous on `stream`; errors of the
// launch are thrown (GS_CUDA), errors of execution surface at the next synchronisation.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/elementwise.hpp"

namespace gradsync::kernels::cuda {

// out[i] = half(in[i] * scale)  (t = F16 or BF16)
void cast_to_half(DType t, const float* in, std::uint16_t* out, std::size_t n, float scale, cudaStream_t stream);
// out[i] = float(in[i]) * scale
void cast_from_half(DType t, const std::uint16_t* in, float* out, std::size_t n, float scale, cudaStream_t stream);

// QSGD, as the CPU functions of the same names.
void qsgd_norms(const float* x, std::size_t n, std::size_t block, float* norms, cudaStream_t stream);
void qsgd_quantize(const float* x, std::size_t n, std::size_t block, const float* norms, std::uint32_t levels,
                   RngKey key, std::uint8_t* codes, cudaStream_t stream);
void qsgd_dequantize(const std::uint8_t* codes, const float* norms, std::size_t n, std::size_t block,
                     std::uint32_t levels, float* out, bool accumulate, cudaStream_t stream);

// Sign compression of x[0, n): *scale = ||x|| / sqrt(n) (written on the device), packed
// bits, optional residual x - decoded (may alias x). `scratch` holds the partial sums.
void sign_compress(const float* x, std::size_t n, std::uint8_t* bits, float* residual, float* scale,
                   DeviceBuffer& scratch, cudaStream_t stream);
// out[i] (+)= +-(*scale) by bit i.
void sign_decompress(const std::uint8_t* bits, const float* scale, std::size_t n, float* out, bool accumulate,
                     cudaStream_t stream);

// Sign compression with deferred error feedback, as the CPU's sign_compress_ef: on entry
// `last` and *scale hold the previous input and its scale; r = x + sign_residual(last,
// *scale); last = r; bits of r; *scale = ||r|| / sqrt(n). x only read.
void sign_compress_ef(const float* x, float* last, float* scale, std::size_t n, std::uint8_t* bits,
                      DeviceBuffer& scratch, cudaStream_t stream);

// PowerSGD's orthogonalisation: modified Gram-Schmidt on the columns of a column-major
// rows x cols matrix (one block; double sums; a zero column stays zero).
void orthogonalize(float* p, std::int64_t rows, int cols, cudaStream_t stream);

// The true k largest |x| (k <= n < 2^31), idx in increasing order, vals = x[idx].
void topk_select(const float* x, std::size_t n, std::size_t k, std::int32_t* idx, float* vals, DeviceBuffer& scratch,
                 cudaStream_t stream);
// out[idx[j]] += vals[j] * scale (indices of one contribution are distinct: no atomics).
void scatter_add(const std::int32_t* idx, const float* vals, std::size_t k, float scale, float* out,
                 cudaStream_t stream);

void add_inplace(float* x, const float* mem, std::size_t n, cudaStream_t stream);
void ef_residual(const float* input, const float* decoded, float* residual, std::size_t n, cudaStream_t stream);
void scale_inplace(float* x, std::size_t n, float s, cudaStream_t stream);
// x[i] /= d (a division: torch's div_).
void divide_inplace(float* x, std::size_t n, float d, cudaStream_t stream);
// avg = sum[i] / d; mem[i] = ef_residual(x[i], avg) when mem is not null; x[i] = avg.
void average_ef(float* x, float* mem, const float* sum, std::size_t n, float d, cudaStream_t stream);
// GradScaler's unscale: x[i] *= inv_scale; sets *found_nonfinite = 1 (device int, which
// the caller zeroes first) when any input is inf or nan.
void unscale_check_finite(float* x, std::size_t n, float inv_scale, int* found_nonfinite, cudaStream_t stream);

}  // namespace gradsync::kernels::cuda
