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

namespace gradsync::kernels::detail {

// The ISA a call really runs: the one asked for, or the best the CPU has if that is lower.
inline Isa resolve(Isa requested) {
  const Isa best = cpu_isa();
  return static_cast<std::uint8_t>(requested) <= static_cast<std::uint8_t>(best) ? requested : best;
}

bool cpu_has_avx512bf16();

}  // namespace gradsync::kernels::detail
