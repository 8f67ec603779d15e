// gradsync/train/gpu_kernels.cu — see gpu_kernels.hpp.
//
// Approach: grid-stride loops, 256 threads per block, at most 8192 blocks (as
// kernels/cuda_elementwise.cu). The hashes are train/rng.hpp's own (GS_HD), so the GPU draws
// the numbers the CPU does; the half rounding is core/dtype.hpp's
// f32_to_f16 / f32_to_bf16 (GS_HD), so a gradient rounds on the GPU as on the CPU.
#include "train/gpu_kernels.hpp"

#include <algorithm>

#include "core/dtype.hpp"
#include "kernels/cuda_check.hpp"
#include "train/rng.hpp"

namespace gradsync::train::gpu {
namespace {

constexpr int kThreads = 256;
constexpr std::size_t kMaxBlocks = 8192;

unsigned blocks_for(std::size_t n) {
  return static_cast<unsigned>(std::max<std::size_t>(1, std::min(kMaxBlocks, (n + kThreads - 1) / kThreads)));
}

__device__ __forceinline__ std::size_t thread_index() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::size_t grid_stride() { return static_cast<std::size_t>(gridDim.x) * blockDim.x; }

__device__ __forceinline__ float round_half(float v, int kind) {
  if (kind == 1) return f16_to_f32(f32_to_f16(v));
  if (kind == 2) return bf16_to_f32(f32_to_bf16(v));
  return v;
}

__global__ void emulated_gradient_kernel(float* out, std::int64_t rows, std::int64_t cols, float s,
                                         std::uint32_t sig_key, std::uint64_t noise_key, bool accumulate, int kind) {
  const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
  const auto ucols = static_cast<std::size_t>(cols);
  for (std::size_t i = thread_index(); i < n; i += grid_stride()) {
    const std::size_t r = i / ucols, c = i % ucols;
    const float a = hash_uniform_pm1(sig_key, static_cast<std::uint32_t>(r));
    const float b = hash_uniform_pm1(sig_key ^ 0x5bd1e995u, static_cast<std::uint32_t>(c));
    const auto row_key = static_cast<std::uint32_t>(fmix64(noise_key + r));
    const float g = (s * a) * b + (0.5f * s) * hash_uniform_pm1(row_key, static_cast<std::uint32_t>(c));
    out[i] = round_half(accumulate ? out[i] + g : g, kind);
  }
}

__global__ void fill_kernel(float* p, std::size_t n, std::uint32_t key, float amplitude) {
  for (std::size_t j = thread_index(); j < n; j += grid_stride())
    p[j] = amplitude * hash_uniform_pm1(key, static_cast<std::uint32_t>(j));
}

__global__ void sgd_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ v, std::size_t n,
                           float lr, float mu) {
  for (std::size_t i = thread_index(); i < n; i += grid_stride()) {
    const float vi = mu * v[i] + g[i];
    v[i] = vi;
    p[i] -= lr * vi;
  }
}

__global__ void adam_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                            float* __restrict__ v, std::size_t n, float lr, float b1, float b2, float c1, float c2,
                            float eps) {
  for (std::size_t i = thread_index(); i < n; i += grid_stride()) {
    const float gi = g[i];
    const float mi = b1 * m[i] + (1.0f - b1) * gi;
    const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] -= lr * (mi * c1) / (sqrtf(vi * c2) + eps);
  }
}

__global__ void bias_act_kernel(float* z, const float* bias, std::int64_t rows, std::int64_t cols, bool relu,
                                int kind) {
  const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
  for (std::size_t i = thread_index(); i < n; i += grid_stride()) {
    float v = z[i] + bias[i % static_cast<std::size_t>(cols)];
    if (relu) v = v > 0.f ? v : 0.f;
    z[i] = round_half(v, kind);
  }
}

// One thread per row (k is the number of classes: small).
__global__ void softmax_xent_kernel(const float* logits, const std::int32_t* labels, std::int64_t rows, std::int64_t k,
                                    float* probs, float* loss) {
  for (std::size_t r = thread_index(); r < static_cast<std::size_t>(rows); r += grid_stride()) {
    const float* z = logits + r * static_cast<std::size_t>(k);
    float* p = probs + r * static_cast<std::size_t>(k);
    float m = z[0];
    for (std::int64_t c = 1; c < k; ++c) m = fmaxf(m, z[c]);
    float sum = 0.f;
    for (std::int64_t c = 0; c < k; ++c) {
      p[c] = expf(z[c] - m);
      sum += p[c];
    }
    const float inv = 1.f / sum;
    for (std::int64_t c = 0; c < k; ++c) p[c] *= inv;
    const std::int32_t y = labels[r];
    loss[r] = (y >= 0 && y < k) ? -(z[y] - m - logf(sum)) : nanf("");
  }
}

__global__ void softmax_xent_backward_kernel(const float* probs, const std::int32_t* labels, std::int64_t rows,
                                             std::int64_t k, float scale, float* dz, int kind) {
  const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(k);
  for (std::size_t i = thread_index(); i < n; i += grid_stride()) {
    const std::size_t r = i / static_cast<std::size_t>(k), c = i % static_cast<std::size_t>(k);
    const float onehot = static_cast<std::int64_t>(c) == labels[r] ? 1.f : 0.f;
    dz[i] = round_half((probs[i] - onehot) * scale, kind);
  }
}

__global__ void relu_backward_kernel(float* d, const float* a, std::size_t n, int kind) {
  for (std::size_t i = thread_index(); i < n; i += grid_stride()) d[i] = a[i] > 0.f ? round_half(d[i], kind) : 0.f;
}

__global__ void bias_grad_kernel(const float* dz, std::int64_t rows, std::int64_t cols, float* db, bool accumulate) {
  for (std::size_t c = thread_index(); c < static_cast<std::size_t>(cols); c += grid_stride()) {
    float s = 0.f;
    for (std::int64_t r = 0; r < rows; ++r) s += dz[static_cast<std::size_t>(r) * static_cast<std::size_t>(cols) + c];
    db[c] = accumulate ? db[c] + s : s;
  }
}

int kind_of(DType t) { return t == DType::F16 ? 1 : t == DType::BF16 ? 2 : 0; }

}  // namespace

void bias_act(float* z, const float* bias, std::int64_t rows, std::int64_t cols, bool relu, DType round_to,
              cudaStream_t stream) {
  const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
  if (n == 0) return;
  bias_act_kernel<<<blocks_for(n), kThreads, 0, stream>>>(z, bias, rows, cols, relu, kind_of(round_to));
  GS_CUDA(cudaGetLastError());
}

void softmax_xent(const float* logits, const std::int32_t* labels, std::int64_t rows, std::int64_t k, float* probs,
                  float* loss, cudaStream_t stream) {
  if (rows <= 0) return;
  softmax_xent_kernel<<<blocks_for(static_cast<std::size_t>(rows)), kThreads, 0, stream>>>(logits, labels, rows, k,
                                                                                          probs, loss);
  GS_CUDA(cudaGetLastError());
}

void softmax_xent_backward(const float* probs, const std::int32_t* labels, std::int64_t rows, std::int64_t k,
                           float scale, float* dz, DType round_to, cudaStream_t stream) {
  const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(k);
  if (n == 0) return;
  softmax_xent_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(probs, labels, rows, k, scale, dz,
                                                                       kind_of(round_to));
  GS_CUDA(cudaGetLastError());
}

void relu_backward(float* d, const float* a, std::size_t n, DType round_to, cudaStream_t stream) {
  if (n == 0) return;
  relu_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(d, a, n, kind_of(round_to));
  GS_CUDA(cudaGetLastError());
}

void bias_grad(const float* dz, std::int64_t rows, std::int64_t cols, float* db, bool accumulate,
               cudaStream_t stream) {
  if (cols <= 0) return;
  bias_grad_kernel<<<blocks_for(static_cast<std::size_t>(cols)), kThreads, 0, stream>>>(dz, rows, cols, db,
                                                                                       accumulate);
  GS_CUDA(cudaGetLastError());
}

void emulated_gradient(const GradGen& g, float* out, cudaStream_t stream) {
  const std::size_t n = static_cast<std::size_t>(g.rows) * static_cast<std::size_t>(g.cols);
  if (n == 0) return;
  const int kind = g.round_to == DType::F16 ? 1 : g.round_to == DType::BF16 ? 2 : 0;
  emulated_gradient_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, g.rows, g.cols, g.scale, g.sig_key,
                                                                     g.noise_key, g.accumulate, kind);
  GS_CUDA(cudaGetLastError());
}

void fill_hash_uniform(float* p, std::size_t n, std::uint32_t key, float amplitude, cudaStream_t stream) {
  if (n == 0) return;
  fill_kernel<<<blocks_for(n), kThreads, 0, stream>>>(p, n, key, amplitude);
  GS_CUDA(cudaGetLastError());
}

void sgd_step(float* p, const float* g, float* v, std::size_t n, float lr, float mu, cudaStream_t stream) {
  if (n == 0) return;
  sgd_kernel<<<blocks_for(n), kThreads, 0, stream>>>(p, g, v, n, lr, mu);
  GS_CUDA(cudaGetLastError());
}

void adam_step(float* p, const float* g, float* m, float* v, std::size_t n, float lr, float b1, float b2, float c1,
               float c2, float eps, cudaStream_t stream) {
  if (n == 0) return;
  adam_kernel<<<blocks_for(n), kThreads, 0, stream>>>(p, g, m, v, n, lr, b1, b2, c1, c2, eps);
  GS_CUDA(cudaGetLastError());
}

}  // namespace gradsync::train::gpu
