// CUDA kernels of casts, QSGD, sign compression, error feedback and the loss scaler's
// unscale/inf check. Each is a grid-stride loop over one scalar function of
// kernels/elementwise.hpp (see cuda_kernels.hpp for the contract).
#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "kernels/cuda_kernels.hpp"

namespace gradsync::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr std::size_t kMaxBlocks = 8192;  // grid-stride beyond this (enough to fill an H100/H200)
constexpr int kSumBlocks = 512;           // partial sums of the sign scale (fixed: deterministic)

unsigned blocks_for(std::size_t n) {
  return static_cast<unsigned>(std::min(kMaxBlocks, (n + kThreads - 1) / kThreads));
}

__device__ __forceinline__ std::size_t thread_index() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::size_t grid_stride() { return static_cast<std::size_t>(gridDim.x) * blockDim.x; }

// Sum of a double over the block (blockDim.x a multiple of 32, <= 1024); valid in thread 0.
__device__ double block_sum(double v) {
  __shared__ double warp_sums[32];
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  const int nwarps = blockDim.x >> 5;
  v = (threadIdx.x < nwarps) ? warp_sums[threadIdx.x] : 0.0;
  if (warp == 0)
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  return v;
}

// ---- casts ----------------------------------------------------------------------------------

__global__ void to_f16_kernel(const float* in, std::uint16_t* out, std::size_t n, float s) {
  for (std::size_t i = thread_index(); i < n; i += grid_stride()) out[i] = scaled_f16(in[i], s);
}
__global__ void to_bf16_kernel(const float* in, std::uint16_t* out, std::size_t n, float s) {
  for (std::size_t i = thread_index(); i < n; i += grid_stride()) out[i] = scaled_bf16(in[i], s);
}
__global__ void from_f16_kernel(const std::uint16_t* in, float* out, std::size_t n, float s) {
  for (std::size_t i = thread_index(); i < n; i += grid_stride()) out[i] = f16_scaled(in[i], s);
}
__global__ void from_bf16_kernel(const std::uint16_t* in, float* out, std::size_t n, float s) {
  for (std::size_t i = thread_index(); i < n; i += grid_stride()) out[i] = bf16_scaled(in[i], s);
}

// ---- QSGD -------------------------------------------------------------------------------------

// One CUDA block per QSGD block.
__global__ void qsgd_norms_kernel(const float* x, std::size_t n, std::size_t block, float* norms) {
  const std::size_t begin = static_cast<std::size_t>(blockIdx.x) * block;
  const std::size_t end = begin + block < n ? begin + block : n;
  double s = 0;
  for (std::size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double v = x[i];
    s += v * v;
  }
  s = block_sum(s);
  if (threadIdx.x == 0) norms[blockIdx.x] = static_cast<float>(sqrt(s));
}

__global__ void qsgd_quantize_kernel(const float* x, std::size_t n, std::size_t block, const float* norms,
                                     std::uint32_t levels, RngKey key, std::uint8_t* codes) {
  for (std::size_t i = thread_index(); i < n; i += grid_stride()) {
    const float scale = qsgd_scale(norms[i / block], levels);
    codes[i] = qsgd_encode(x[i], scale, bits_to_unit(rng_bits(key, i)), levels);
  }
}

__global__ void qsgd_dequantize_kernel(const std::uint8_t* codes, const float* norms, std::size_t n, std::size_t block,
                                       std::uint32_t levels, float* out, bool accumulate) {
  for (std::size_t i = thread_index(); i < n; i += grid_stride()) {
    const float v = qsgd_decode(codes[i], qsgd_unit(norms[i / block], levels));
    out[i] = accumulate ? out[i] + v : v;
  }
}

// ---- sign ---------------------------------------------------------------------------------------

__global__ void sumsq_partials_kernel(const float* x, std::size_t n, double* partials) {
  double s = 0;
  for (std::size_t i = thread_index(); i < n; i += grid_stride()) {
    const double v = x[i];
    s += v * v;
  }
  s = block_sum(s);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void sign_scale_kernel(const double* partials, int count, std::size_t n, float* scale) {
  double s = 0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) s += partials[i];
  s = block_sum(s);
  if (threadIdx.x == 0) *scale = static_cast<float>(sqrt(s / static_cast<double>(n)));
}

// One thread per code byte (8 elements); residual may alias x (each thread reads its 8 first).
__global__ void sign_pack_kernel(const float* x, std::size_t n, std::uint8_t* bits, float* residual,
                                 const float* scale_ptr) {
  const float scale = *scale_ptr;
  const std::size_t nbytes = (n + 7) / 8;
  for (std::size_t b = thread_index(); b < nbytes; b += grid_stride()) {
    unsigned byte = 0;
    for (int j = 0; j < 8; ++j) {
      const std::size_t i = b * 8 + j;
      if (i >= n) break;
      const float v = x[i];
      const bool bit = sign_bit(v);
      byte |= static_cast<unsigned>(bit) << j;
      if (residual) residual[i] = kernels::ef_residual(v, sign_decode(bit, scale));
    }
    bits[b] = static_cast<std::uint8_t>(byte);
  }
}

__global__ void sign_unpack_kernel(const std::uint8_t* bits, const float* scale_ptr, std::size_t n, float* out,
                                   bool accumulate) {
  const float scale = *scale_ptr;
  for (std::size_t i = thread_index(); i < n; i += grid_stride()) {
    const float v = sign_decode((bits[i >> 3] >> (i & 7)) & 1u, scale);
    out[i] = accumulate ? out[i] + v : v;
  }
}

// ---- error feedback, scaling, finiteness ------------------------------------------------------------

__global__ void add_kernel(float* x, const float* mem, std::size_t n) {
  for (std::size_t i = thread_index(); i < n; i += grid_stride()) x[i] += mem[i];
}
__global__ void residual_kernel(const float* in, const float* dec, float* res, std::size_t n) {
  for (std::size_t i = thread_index(); i < n; i += grid_stride()) res[i] = kernels::ef_residual(in[i], dec[i]);
}
__global__ void scale_kernel(float* x, std::size_t n, float s) {
  for (std::size_t i = thread_index(); i < n; i += grid_stride()) x[i] *= s;
}
__global__ void unscale_kernel(float* x, std::size_t n, float inv, int* found) {
  bool bad = false;
  for (std::size_t i = thread_index(); i < n; i += grid_stride()) {
    const float v = x[i];
    bad = bad || !is_finite_f32(v);
    x[i] = v * inv;
  }
  if (bad) *found = 1;  // every writer writes the same value
}

// The deferred 1-bit memory resolved: last = x + sign_residual(last, *last_scale) (the
// first half of the CPU's one-pass sign_compress_ef; sign_compress then packs `last`).
__global__ void sign_resolve_kernel(const float* x, float* last, const float* last_scale, std::size_t n) {
  const float s = *last_scale;
  for (std::size_t i = thread_index(); i < n; i += grid_stride()) last[i] = x[i] + sign_residual(last[i], s);
}
__global__ void divide_kernel(float* x, std::size_t n, float d) {
  for (std::size_t i = thread_index(); i < n; i += grid_stride()) x[i] /= d;
}
__global__ void average_ef_kernel(float* x, float* mem, const float* sum, std::size_t n, float d) {
  for (std::size_t i = thread_index(); i < n; i += grid_stride()) {
    const float avg = sum[i] / d;
    if (mem != nullptr) mem[i] = kernels::ef_residual(x[i], avg);
    x[i] = avg;
  }
}

// sum_r a[r] b[r] over n in double, the same value in every thread of the block (one
// block; every thread calls it).
__device__ double block_dot(const float* a, const float* b, std::size_t n) {
  __shared__ double total;
  double s = 0;
  for (std::size_t r = threadIdx.x; r < n; r += blockDim.x) s += static_cast<double>(a[r]) * b[r];
  s = block_sum(s);
  if (threadIdx.x == 0) total = s;
  __syncthreads();
  const double out = total;
  __syncthreads();  // `total` and block_sum's scratch are free for the next call
  return out;
}

// Modified Gram-Schmidt on the columns of one column-major rows x cols matrix, one block:
// norms and dot products as double sums (block_dot), a zero column stays zero.
__global__ void orthogonalize_kernel(float* p, std::int64_t rows, int cols) {
  const auto n = static_cast<std::size_t>(rows);
  for (int i = 0; i < cols; ++i) {
    float* ci = p + static_cast<std::size_t>(i) * n;
    const float norm = static_cast<float>(sqrt(block_dot(ci, ci, n)));
    for (std::size_t r = threadIdx.x; r < n; r += blockDim.x) ci[r] = norm > 0.f ? ci[r] / norm : 0.f;
    __syncthreads();
    for (int j = i + 1; j < cols; ++j) {
      float* cj = p + static_cast<std::size_t>(j) * n;
      const float dot = static_cast<float>(block_dot(ci, cj, n));
      for (std::size_t r = threadIdx.x; r < n; r += blockDim.x) cj[r] -= dot * ci[r];
      __syncthreads();
    }
  }
}

void check_half(DType t) {
  GS_CHECK(t == DType::F16 || t == DType::BF16, "cast kernels take half or bfloat16, not ", dtype_name(t));
}

}  // namespace

void cast_to_half(DType t, const float* in, std::uint16_t* out, std::size_t n, float scale, cudaStream_t stream) {
  check_half(t);
  if (n == 0) return;
  if (t == DType::F16)
    to_f16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(in, out, n, scale);
  else
    to_bf16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(in, out, n, scale);
  GS_CUDA(cudaGetLastError());
}

void cast_from_half(DType t, const std::uint16_t* in, float* out, std::size_t n, float scale, cudaStream_t stream) {
  check_half(t);
  if (n == 0) return;
  if (t == DType::F16)
    from_f16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(in, out, n, scale);
  else
    from_bf16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(in, out, n, scale);
  GS_CUDA(cudaGetLastError());
}

void qsgd_norms(const float* x, std::size_t n, std::size_t block, float* norms, cudaStream_t stream) {
  GS_CHECK(block > 0, "QSGD block size must be positive");
  if (n == 0) return;
  const std::size_t nb = (n + block - 1) / block;
  GS_CHECK(nb < (1ull << 31), "too many QSGD blocks for one grid: ", nb);
  qsgd_norms_kernel<<<static_cast<unsigned>(nb), kThreads, 0, stream>>>(x, n, block, norms);
  GS_CUDA(cudaGetLastError());
}

void qsgd_quantize(const float* x, std::size_t n, std::size_t block, const float* norms, std::uint32_t levels,
                   RngKey key, std::uint8_t* codes, cudaStream_t stream) {
  GS_CHECK(block > 0 && levels >= 1 && levels <= kQsgdMaxLevels, "bad QSGD arguments: block ", block, ", levels ",
           levels);
  if (n == 0) return;
  qsgd_quantize_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, block, norms, levels, key, codes);
  GS_CUDA(cudaGetLastError());
}

void qsgd_dequantize(const std::uint8_t* codes, const float* norms, std::size_t n, std::size_t block,
                     std::uint32_t levels, float* out, bool accumulate, cudaStream_t stream) {
  GS_CHECK(block > 0 && levels >= 1 && levels <= kQsgdMaxLevels, "bad QSGD arguments: block ", block, ", levels ",
           levels);
  if (n == 0) return;
  qsgd_dequantize_kernel<<<blocks_for(n), kThreads, 0, stream>>>(codes, norms, n, block, levels, out, accumulate);
  GS_CUDA(cudaGetLastError());
}

void sign_compress(const float* x, std::size_t n, std::uint8_t* bits, float* residual, float* scale,
                   DeviceBuffer& scratch, cudaStream_t stream) {
  if (n == 0) {
    GS_CUDA(cudaMemsetAsync(scale, 0, sizeof(float), stream));
    return;
  }
  scratch.reserve(kSumBlocks * sizeof(double));
  const int nblocks = static_cast<int>(std::min<std::size_t>(kSumBlocks, (n + kThreads - 1) / kThreads));
  sumsq_partials_kernel<<<nblocks, kThreads, 0, stream>>>(x, n, scratch.as<double>());
  GS_CUDA(cudaGetLastError());
  sign_scale_kernel<<<1, kThreads, 0, stream>>>(scratch.as<double>(), nblocks, n, scale);
  GS_CUDA(cudaGetLastError());
  sign_pack_kernel<<<blocks_for((n + 7) / 8), kThreads, 0, stream>>>(x, n, bits, residual, scale);
  GS_CUDA(cudaGetLastError());
}

void sign_decompress(const std::uint8_t* bits, const float* scale, std::size_t n, float* out, bool accumulate,
                     cudaStream_t stream) {
  if (n == 0) return;
  sign_unpack_kernel<<<blocks_for(n), kThreads, 0, stream>>>(bits, scale, n, out, accumulate);
  GS_CUDA(cudaGetLastError());
}

void sign_compress_ef(const float* x, float* last, float* scale, std::size_t n, std::uint8_t* bits,
                      DeviceBuffer& scratch, cudaStream_t stream) {
  if (n > 0) {
    sign_resolve_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, last, scale, n);
    GS_CUDA(cudaGetLastError());
  }
  sign_compress(last, n, bits, nullptr, scale, scratch, stream);  // stream order: the old scale is read first
}

void orthogonalize(float* p, std::int64_t rows, int cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  orthogonalize_kernel<<<1, 1024, 0, stream>>>(p, rows, cols);
  GS_CUDA(cudaGetLastError());
}

void divide_inplace(float* x, std::size_t n, float d, cudaStream_t stream) {
  if (n == 0) return;
  divide_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, d);
  GS_CUDA(cudaGetLastError());
}

void average_ef(float* x, float* mem, const float* sum, std::size_t n, float d, cudaStream_t stream) {
  if (n == 0) return;
  average_ef_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, mem, sum, n, d);
  GS_CUDA(cudaGetLastError());
}

void add_inplace(float* x, const float* mem, std::size_t n, cudaStream_t stream) {
  if (n == 0) return;
  add_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, mem, n);
  GS_CUDA(cudaGetLastError());
}

void ef_residual(const float* input, const float* decoded, float* residual, std::size_t n, cudaStream_t stream) {
  if (n == 0) return;
  residual_kernel<<<blocks_for(n), kThreads, 0, stream>>>(input, decoded, residual, n);
  GS_CUDA(cudaGetLastError());
}

void scale_inplace(float* x, std::size_t n, float s, cudaStream_t stream) {
  if (n == 0) return;
  scale_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, s);
  GS_CUDA(cudaGetLastError());
}

void unscale_check_finite(float* x, std::size_t n, float inv_scale, int* found_nonfinite, cudaStream_t stream) {
  if (n == 0) return;
  unscale_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, inv_scale, found_nonfinite);
  GS_CUDA(cudaGetLastError());
}

}  // namespace gradsync::kernels::cuda
