// CPU kernels of error feedback, scaling, the double-accumulated sum of squares (norms of
// QSGD and sign compression) and the inf/nan checks of the loss scaler.
//
// The simple element-wise loops are written once (GS_ALWAYS_INLINE bodies) and compiled
// three times: plain x86-64, AVX2 and AVX-512 wrappers, where the compiler vectorises them.
// The sum of squares widens to double explicitly (cvtps2pd + FMA): each square of an fp32
// value is exact in double, so the fp32 norm hardly depends on the order of summation and
// the CPU paths and the GPU agree on it. The one-pass sign encoder (cpu_sign.cpp) repeats
// the summation order of sum_squares per ISA (four accumulators over blocks of 32 / 16 / 4
// elements, then the tail), so its scale has the same bits.

#include <algorithm>
#include <cstring>

#include "kernels/cpu_target.hpp"

namespace gradsync::kernels {
namespace {

// ---- bodies (vectorised by the compiler inside each target wrapper) ----------------------

GS_ALWAYS_INLINE void add_body(float* x, const float* mem, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) x[i] += mem[i];
}
GS_ALWAYS_INLINE void residual_body(const float* in, const float* dec, float* res, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) res[i] = kernels::ef_residual(in[i], dec[i]);
}
GS_ALWAYS_INLINE void scale_body(float* x, std::size_t n, float s) {
  for (std::size_t i = 0; i < n; ++i) x[i] *= s;
}
// Checked in blocks so a bad buffer stops early while the inner loop stays branch-free.
constexpr std::size_t kFiniteBlock = 4096;
GS_ALWAYS_INLINE bool finite_body(const float* x, std::size_t n) {
  for (std::size_t b = 0; b < n; b += kFiniteBlock) {
    const std::size_t e = std::min(n, b + kFiniteBlock);
    std::uint32_t bad = 0;
    for (std::size_t i = b; i < e; ++i) bad |= (f32_bits(x[i]) & 0x7f800000u) == 0x7f800000u;
    if (bad) return false;
  }
  return true;
}
GS_ALWAYS_INLINE bool unscale_body(float* x, std::size_t n, float inv) {
  std::uint32_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const float v = x[i];
    bad |= (f32_bits(v) & 0x7f800000u) == 0x7f800000u;
    x[i] = v * inv;
  }
  return bad == 0;
}
GS_ALWAYS_INLINE double sumsq_tail(const float* x, std::size_t n) {
  double s = 0;
  for (std::size_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return s;
}

// ---- one wrapper per ISA --------------------------------------------------------------------

GS_DEFINE_VARIANTS(void, add, (float* x, const float* m, std::size_t n), (x, m, n), add_body)
GS_DEFINE_VARIANTS(void, residual, (const float* in, const float* d, float* r, std::size_t n), (in, d, r, n),
                   residual_body)
GS_DEFINE_VARIANTS(void, scale, (float* x, std::size_t n, float s), (x, n, s), scale_body)
GS_DEFINE_VARIANTS(bool, finite, (const float* x, std::size_t n), (x, n), finite_body)
GS_DEFINE_VARIANTS(bool, unscale, (float* x, std::size_t n, float inv), (x, n, inv), unscale_body)


double sumsq_scalar(const float* x, std::size_t n) {
  // Four partial sums, like the vector paths, so the scalar path is not latency-bound.
  double s[4] = {0, 0, 0, 0};
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int j = 0; j < 4; ++j) s[j] += static_cast<double>(x[i + j]) * static_cast<double>(x[i + j]);
  return (s[0] + s[1]) + (s[2] + s[3]) + sumsq_tail(x + i, n - i);
}

GS_TARGET_AVX2 double sumsq_avx2(const float* x, std::size_t n) {
  detail::SumSqAvx2 acc;
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) acc.add(_mm256_loadu_ps(x + i), _mm256_loadu_ps(x + i + 8));
  return acc.total() + sumsq_tail(x + i, n - i);
}

GS_TARGET_AVX512 double sumsq_avx512(const float* x, std::size_t n) {
  detail::SumSqAvx512 acc;
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) acc.add(_mm512_loadu_ps(x + i), _mm512_loadu_ps(x + i + 16));
  return acc.total() + sumsq_tail(x + i, n - i);
}

}  // namespace

double sum_squares(const float* x, std::size_t n, Isa isa) { GS_DISPATCH(sumsq, x, n); }
void add_inplace(float* x, const float* mem, std::size_t n, Isa isa) { GS_DISPATCH(add, x, mem, n); }
void ef_residual(const float* input, const float* decoded, float* residual, std::size_t n, Isa isa) {
  GS_DISPATCH(residual, input, decoded, residual, n);
}
void scale_inplace(float* x, std::size_t n, float s, Isa isa) { GS_DISPATCH(scale, x, n, s); }
bool all_finite(const float* x, std::size_t n, Isa isa) { GS_DISPATCH(finite, x, n); }
bool unscale_check_finite(float* x, std::size_t n, float inv_scale, Isa isa) { GS_DISPATCH(unscale, x, n, inv_scale); }

}  // namespace gradsync::kernels
