// gradsync/kernels/cpu_kernels.hpp — vectorised CPU kernels of compression and mixed
// precision.
//
// Purpose: the hot loops of the compressors (runtime/compress/) and the loss scaler —
// casts with a fused pre-scale, QSGD quantisation, sign packing, top-k selection,
// error-feedback updates, the inf/nan check.
// Approach: each kernel has a scalar path built from kernels/elementwise.hpp and vector
// paths for AVX2 (+F16C, FMA) and AVX-512 (F/BW/VL/DQ, plus AVX512-BF16 for the bf16
// cast), compiled with __attribute__((target(...))) in the same translation unit and chosen
// at run time from __builtin_cpu_supports. Every vector path gives the same bits as the
// scalar one (tests/kernels/ checks each ISA the machine has against it).
// Use: pass nothing for `isa` to get the best path; tests pass each Isa <= cpu_isa() in turn
// (asking for an ISA the CPU lacks falls back to the best one it has).
// Single-threaded: the caller owns parallelism (the reducer runs one bucket at a time).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/dtype.hpp"
#include "kernels/elementwise.hpp"

namespace gradsync::kernels {

enum class Isa : std::uint8_t { Scalar = 0, Avx2 = 1, Avx512 = 2 };

Isa cpu_isa();                  // best path this CPU runs
const char* isa_name(Isa isa);  // "scalar", "avx2", "avx512"
// The CPU features the kernels look at, e.g. "avx2 f16c fma avx512f avx512bw avx512vl
// avx512dq avx512bf16" (for benchmark and result metadata).
std::string cpu_features();

// ---- casts -----------------------------------------------------------------------------------
// out[i] = half(in[i] * scale), round to nearest even; t is DType::F16 or DType::BF16.
void cast_to_half(DType t, const float* in, std::uint16_t* out, std::size_t n, float scale, Isa isa = cpu_isa());
// out[i] = float(in[i]) * scale.
void cast_from_half(DType t, const std::uint16_t* in, float* out, std::size_t n, float scale, Isa isa = cpu_isa());

// ---- reductions ------------------------------------------------------------------------------
// Sum of squares accumulated in double (each square is exact in double, so the result
// hardly depends on the summation order; norms rounded to fp32 agree across paths).
double sum_squares(const float* x, std::size_t n, Isa isa = cpu_isa());

// ---- QSGD --------------------------------------------------------------------------------------
// Blocks of `block` elements (the last one may be shorter): nblocks = ceil(n / block).
inline std::size_t qsgd_num_blocks(std::size_t n, std::size_t block) { return (n + block - 1) / block; }
// norms[b] = ||x[b*block, ...)||_2 as fp32.
void qsgd_norms(const float* x, std::size_t n, std::size_t block, float* norms, Isa isa = cpu_isa());
// codes[i] = qsgd_encode(x[i], qsgd_scale(norms[i / block]), u_i, levels) with
// u_i = bits_to_unit(rng_bits(key, i)).
void qsgd_quantize(const float* x, std::size_t n, std::size_t block, const float* norms, std::uint32_t levels,
                   RngKey key, std::uint8_t* codes, Isa isa = cpu_isa());
// Both in one pass over memory (norms, then codes, a few blocks at a time): the encoder.
void qsgd_encode(const float* x, std::size_t n, std::size_t block, std::uint32_t levels, RngKey key, float* norms,
                 std::uint8_t* codes, Isa isa = cpu_isa());
// out[i] (+)= qsgd_decode(codes[i], qsgd_unit(norms[i / block])).
void qsgd_dequantize(const std::uint8_t* codes, const float* norms, std::size_t n, std::size_t block,
                     std::uint32_t levels, float* out, bool accumulate, Isa isa = cpu_isa());

// ---- sign (1-bit) ------------------------------------------------------------------------------
inline std::size_t sign_bytes(std::size_t n) { return (n + 7) / 8; }
// 1-bit Adam's compression of x[0, n): scale = ||x||_2 / sqrt(n) (0 for n = 0), bit j of
// bits[i/8] with j = i%8 is sign_bit(x[i]); unused bits of the last byte are 0. If
// `residual` is given it receives x - decoded (error feedback; may alias x). Returns scale.
float sign_compress(const float* x, std::size_t n, std::uint8_t* bits, float* residual, Isa isa = cpu_isa());
// Sign compression with error feedback in one pass, the memory kept *deferred*: `last`
// holds the input r' the previous step compressed and `last_scale` its scale (0 and 0
// before the first step; last = e with last_scale = 0 stands for a plain residual e). Per
// element: e = sign_residual(r', last_scale) (= r' - decoded), r = x + e, last = r, bits of
// r; returns the scale of r. x is only read (x and last must not overlap). The same bits
// (codes, scale, and residual sign_residual(last, scale)) as the eager form
//   add_inplace(x, e, n); scale = sign_compress(x, n, bits, e)    (x = r, e = r - decoded)
// while streaming 3 arrays (read x, read and write last) instead of 5; where two NaNs meet,
// which one survives is the compiler's operand order in both forms.
float sign_compress_ef(const float* x, float* last, float last_scale, std::size_t n, std::uint8_t* bits,
                       Isa isa = cpu_isa());
// residual[i] = sign_residual(last[i], scale): the eager error-feedback memory of the
// deferred one (inspection and tests; not on the hot path). residual may alias last.
void sign_residual(const float* last, float scale, std::size_t n, float* residual);
// out[i] (+)= sign_decode(bit i, scale).
void sign_decompress(const std::uint8_t* bits, float scale, std::size_t n, float* out, bool accumulate,
                     Isa isa = cpu_isa());

// ---- top-k -----------------------------------------------------------------------------------------
// The true k largest |x[i]| (k <= n): ties at the threshold are taken in index order, so
// exactly k are chosen. idx receives them in increasing index order, vals the values x[idx].
// Histogram of the magnitude bits (one pass), then nth_element on the one histogram bin
// holding the threshold, then one gathering pass.
void topk_select(const float* x, std::size_t n, std::size_t k, std::int32_t* idx, float* vals);
// The top-k encoder with error feedback, bit for bit the composition
//   add_inplace(x, memory); topk_select(x, ...); memory = x; scatter_add(idx, vals, k, -1, memory)
// (x ends as x + memory, memory as x with the selected entries zeroed, idx/vals as
// topk_select), in one pass over memory that collects candidates above a sampled bound; the
// exact topk_select runs when the candidates cannot decide (cpu_topk.cpp). Returns the path.
enum class TopkPath : std::uint8_t { Sampled, Exact };
TopkPath topk_encode_ef(float* x, float* memory, std::size_t n, std::size_t k, std::int32_t* idx, float* vals,
                        Isa isa = cpu_isa());
// out[idx[j]] += vals[j] * scale  (scatter-add of one contribution).
void scatter_add(const std::int32_t* idx, const float* vals, std::size_t k, float scale, float* out);

// ---- error feedback, scaling, finiteness ---------------------------------------------------------
// x[i] += mem[i]
void add_inplace(float* x, const float* mem, std::size_t n, Isa isa = cpu_isa());
// residual[i] = ef_residual(input[i], decoded[i])  (residual may alias either input)
void ef_residual(const float* input, const float* decoded, float* residual, std::size_t n, Isa isa = cpu_isa());
// x[i] *= s
void scale_inplace(float* x, std::size_t n, float s, Isa isa = cpu_isa());
// True when no element is inf or nan.
bool all_finite(const float* x, std::size_t n, Isa isa = cpu_isa());
// GradScaler's unscale: x[i] *= inv_scale; returns true when every *input* was finite.
bool unscale_check_finite(float* x, std::size_t n, float inv_scale, Isa isa = cpu_isa());

// ---- PowerSGD (kernels/cpu_powersgd.cpp) ------------------------------------------------------
// One compressed matrix A (rows x cols, row-major) with P (rows x rank) and Q (cols x rank)
// column-major. Each walks A once; the summation orders are fixed (cpu_powersgd.cpp) so
// every path gives the same bits.
// A += mem (skipped when mem is null), then P = A Q.
void powersgd_project(float* a, const float* mem, std::int64_t rows, std::int64_t cols, const float* q, int rank,
                      float* p, Isa isa = cpu_isa());
// Q = A^T P.
void powersgd_back_project(const float* a, std::int64_t rows, std::int64_t cols, const float* p, int rank, float* q,
                           Isa isa = cpu_isa());
// D = P Q^T; mem = ef_residual(A, D) (skipped when mem is null); A = D.
void powersgd_expand(float* a, float* mem, std::int64_t rows, std::int64_t cols, const float* p, const float* q,
                     int rank, Isa isa = cpu_isa());

namespace detail {
// topk_encode_ef with a given candidate bound (a magnitude key) instead of the sampled one:
// any bound gives the same result (too high or too low falls back to the exact path).
// For tests; 0xffffffff collects nothing.
TopkPath topk_encode_ef_bound(float* x, float* memory, std::size_t n, std::size_t k, std::int32_t* idx, float* vals,
                              std::uint32_t bound, Isa isa = cpu_isa());
}  // namespace detail

}  // namespace gradsync::kernels
