// gradsync/train/gpu_kernels.hpp — the CUDA kernels of gradsync-train --device cuda
// (gpu_kernels.cu): emulated gradient generation, parameter initialisation, optimizers.
//
// Purpose: device-side work of the GPU training path (device/cuda.hpp), each a grid-stride
// loop launched asynchronously on a given stream (launch errors throw via GS_CUDA; execution
// errors surface at the next synchronisation). All pointers are device pointers.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.hpp"

namespace gradsync::train::gpu {

// One tensor's emulated gradient (the form of emulated.hpp, from counter-based hashes only,
// so any element is produced independently; values are not the CPU generator's bits):
//   g[r][c] = s * (a[r] * b[c] + 0.5 * n[r][c]),  rows x cols = numel,
//   a[r] = U(-1,1)(sig_key, r), b[c] = U(-1,1)(sig_key ^ 0x5bd1e995, c),
//   n[r][c] = U(-1,1)(low 32 bits of fmix64(noise_key + r), c)     (the CPU's noise)
// accumulate: out += g, else out = g. round_to F16/BF16: the result is rounded to that type
// (round to nearest even) and stored widened; F32: no rounding.
struct GradGen {
  std::int64_t rows = 1, cols = 1;
  float scale = 1.f;             // s: per-tensor scale x loss scale / micro-steps
  std::uint32_t sig_key = 0;     // shared by all ranks (seed, micro-step, tensor)
  std::uint64_t noise_key = 0;   // per rank (seed, micro-step, rank, tensor)
  bool accumulate = false;
  DType round_to = DType::F32;
};
void emulated_gradient(const GradGen& g, float* out, cudaStream_t stream);

// p[j] = amplitude * U(-1,1)(key, j) for j < n: the CPU's init_params (emulated.cpp), bit for bit.
void fill_hash_uniform(float* p, std::size_t n, std::uint32_t key, float amplitude, cudaStream_t stream);

// SGD with momentum (optimizer.cpp): v = mu v + g; p -= lr v.
void sgd_step(float* p, const float* g, float* v, std::size_t n, float lr, float mu, cudaStream_t stream);
// Adam (optimizer.cpp): c1, c2 are the bias corrections 1/(1-beta^t).
void adam_step(float* p, const float* g, float* m, float* v, std::size_t n, float lr, float b1, float b2, float c1,
               float c2, float eps, cudaStream_t stream);

// ---- real compute (gpu_mlp.hpp): the small kernels around cuBLAS's GEMMs ----------------------
// Row-major [rows x cols] fp32 matrices; round_to F16/BF16 rounds every result to that type
// (stored widened), as the CPU's mixed precision does (precision.hpp).

// z[r][c] = round(act(z[r][c] + bias[c])), act = ReLU when relu, else identity.
void bias_act(float* z, const float* bias, std::int64_t rows, std::int64_t cols, bool relu, DType round_to,
              cudaStream_t stream);
// Softmax over each row of logits [rows x k] (fp32, max-subtracted) into probs, and the
// cross-entropy -log p[label] of each row into loss[rows].
void softmax_xent(const float* logits, const std::int32_t* labels, std::int64_t rows, std::int64_t k, float* probs,
                  float* loss, cudaStream_t stream);
// dz[r][c] = round((probs[r][c] - [c == label_r]) * scale)  (scale: loss scale / (rows x micro-steps)).
void softmax_xent_backward(const float* probs, const std::int32_t* labels, std::int64_t rows, std::int64_t k,
                           float scale, float* dz, DType round_to, cudaStream_t stream);
// d[i] = a[i] > 0 ? round(d[i]) : 0   (a: the ReLU's output).
void relu_backward(float* d, const float* a, std::size_t n, DType round_to, cudaStream_t stream);
// db[c] (=|+=) sum over rows of dz[r][c] (fixed order per column: deterministic).
void bias_grad(const float* dz, std::int64_t rows, std::int64_t cols, float* db, bool accumulate,
               cudaStream_t stream);

}  // namespace gradsync::train::gpu
