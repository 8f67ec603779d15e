// gradsync/kernels/cpu_target.hpp — internal to the CPU kernels: the target attributes of
// the vector paths and the ISA resolution every kernel entry point does first.
//
// A function marked GS_TARGET_AVX512 is compiled for AVX-512 whatever the build flags are;
// it may only run once cpu_isa() said so. GS_ALWAYS_INLINE bodies written with the scalar
// elementwise functions are inlined into each target wrapper and vectorised there.
#pragma once

#include <algorithm>

#include "kernels/cpu_kernels.hpp"

#define GS_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define GS_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,prefer-vector-width=512")))
#define GS_TARGET_AVX512BF16                                                \
  __attribute__((                                                           \
      target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c," \
             "prefer-vector-width=512")))
#define GS_ALWAYS_INLINE inline __attribute__((always_inline))

// GCC 12's AVX-512 headers build masked intrinsics on a self-initialised "undefined"
// operand and then warn about it wherever they are inlined (GCC PR 105593, fixed in 13).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>  // after the pragmas: the warnings point into this header

// One function per ISA from one GS_ALWAYS_INLINE body: name_scalar, name_avx2 and
// name_avx512 (params and args in parentheses), each compiled for its target.
#define GS_DEFINE_VARIANTS(ret, name, params, args, body)     \
  ret name##_scalar params { return body args; }              \
  GS_TARGET_AVX2 ret name##_avx2 params { return body args; } \
  GS_TARGET_AVX512 ret name##_avx512 params { return body args; }

// The body of an entry point taking `Isa isa`: returns name_<resolved ISA>(args...).
#define GS_DISPATCH(name, ...)           \
  switch (detail::resolve(isa)) {        \
    case Isa::Avx512:                    \
      return name##_avx512(__VA_ARGS__); \
    case Isa::Avx2:                      \
      return name##_avx2(__VA_ARGS__);   \
    case Isa::Scalar:                    \
      break;                             \
  }                                      \
  return name##_scalar(__VA_ARGS__)

namespace gradsync::kernels::detail {

// The ISA a call really runs: the one asked for, or the best the CPU has if that is lower.
inline Isa resolve(Isa requested) {
  const Isa best = cpu_isa();
  return static_cast<std::uint8_t>(requested) <= static_cast<std::uint8_t>(best) ? requested : best;
}

bool cpu_has_avx512bf16();

// Double-precision sums of squares of fp32 vectors, four accumulators per ISA, in one fixed
// order: sum_squares (cpu_misc.cpp) and the one-pass sign encoder (cpu_sign.cpp) both add
// with these, so the encoder's scale is sum_squares' bit for bit. add() takes 16 (AVX2) or
// 32 (AVX-512) floats as two registers; total() reduces the accumulators.
struct SumSqAvx2 {
  __m256d a0, a1, a2, a3;  // named, not an array: kept in registers
  GS_TARGET_AVX2 GS_ALWAYS_INLINE SumSqAvx2()
      : a0(_mm256_setzero_pd()), a1(_mm256_setzero_pd()), a2(_mm256_setzero_pd()), a3(_mm256_setzero_pd()) {}
  GS_TARGET_AVX2 GS_ALWAYS_INLINE void add(__m256 v0, __m256 v1) {
    const __m256d d0 = _mm256_cvtps_pd(_mm256_castps256_ps128(v0));
    const __m256d d1 = _mm256_cvtps_pd(_mm256_extractf128_ps(v0, 1));
    const __m256d d2 = _mm256_cvtps_pd(_mm256_castps256_ps128(v1));
    const __m256d d3 = _mm256_cvtps_pd(_mm256_extractf128_ps(v1, 1));
    a0 = _mm256_fmadd_pd(d0, d0, a0);
    a1 = _mm256_fmadd_pd(d1, d1, a1);
    a2 = _mm256_fmadd_pd(d2, d2, a2);
    a3 = _mm256_fmadd_pd(d3, d3, a3);
  }
  GS_TARGET_AVX2 GS_ALWAYS_INLINE double total() const {
    alignas(32) double lanes[4];
    _mm256_store_pd(lanes, _mm256_add_pd(_mm256_add_pd(a0, a1), _mm256_add_pd(a2, a3)));
    return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  }
};

struct SumSqAvx512 {
  __m512d a0, a1, a2, a3;
  GS_TARGET_AVX512 GS_ALWAYS_INLINE SumSqAvx512()
      : a0(_mm512_setzero_pd()), a1(_mm512_setzero_pd()), a2(_mm512_setzero_pd()), a3(_mm512_setzero_pd()) {}
  GS_TARGET_AVX512 GS_ALWAYS_INLINE void add(__m512 v0, __m512 v1) {
    const __m512d d0 = _mm512_cvtps_pd(_mm512_castps512_ps256(v0));
    const __m512d d1 = _mm512_cvtps_pd(_mm512_extractf32x8_ps(v0, 1));
    const __m512d d2 = _mm512_cvtps_pd(_mm512_castps512_ps256(v1));
    const __m512d d3 = _mm512_cvtps_pd(_mm512_extractf32x8_ps(v1, 1));
    a0 = _mm512_fmadd_pd(d0, d0, a0);
    a1 = _mm512_fmadd_pd(d1, d1, a1);
    a2 = _mm512_fmadd_pd(d2, d2, a2);
    a3 = _mm512_fmadd_pd(d3, d3, a3);
  }
  GS_TARGET_AVX512 GS_ALWAYS_INLINE double total() const {
    return _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(a0, a1), _mm512_add_pd(a2, a3)));
  }
};

}  // namespace gradsync::kernels::detail
