// CPU kernels of QSGD (Alistarh et al., 2017): per-block L2 norms, stochastic quantisation
// to `levels` levels with one code byte per element, and (accumulating) dequantisation.
//
// Approach: the random number of element i is rng_bits(key, i) (elementwise.hpp), a pure
// function of the element index, so a vector lane computes it from (i + lane) with one
// two-multiply hash and no sequential generator state; the CPU paths and the GPU draw the
// same numbers. The quantisation is the scalar qsgd_encode re-expressed
// lane-wise: |x| * scale, floor, compare with u, add 1, min with S, truncate, sign bit.
// Codes are narrowed with vpmovdb (AVX-512) or a byte shuffle (AVX2).
// Key optimisations of the AVX-512 path (the one this project's machines run): floor and
// min(level, S) in integers (cvttps2dq + unsigned min, exact for r = |x| * scale in
// [0, 2^31) and for NaN, see codes16_avx512), four code vectors packed to one 64-byte store
// (vpackusdw, vpackuswb, vpermd), and a prefetch of the next group of qsgd_encode while
// this one is quantised, so the norms pass does not wait for memory with the ALUs idle;
// the fraction r - trunc(r) in one vreduceps, and the block norms summed in fp32 lanes
// (below: one FMA per 16 elements instead of four double-precision uops).
//
// Measured 2026-12-01 on the 2-core development VM (Intel AVX-512, L3 480 MiB; memcpy
// 12.98 GB/s at 16 MiB, 6.87 GB/s at 64 MiB), qsgd_encode (levels 16, bucket 512), medians
// of 3, with
// `gradsync-kernels-bench --benchmark_filter='(memcpy|qsgd_encode|onebit_encode|topk_encode)/MiB:(16|64)'
// --benchmark_min_time=1 --benchmark_repetitions=3 --benchmark_report_aggregates_only=true`:
//   16 MiB: 7.19 GB/s (0.57x memcpy) -> 10.10 GB/s (0.78x; compute-bound: the hash, ~17
//           cycles per 16 elements with the double-accumulated norms)
//   64 MiB: 4.55 GB/s (0.66x memcpy) ->  7.54 GB/s (1.10x; reads 4 bytes, writes 1 per element)
// Measured 2026-12-06 on a VM of the same kind with faster memory (Intel AVX-512, L2 4 MiB,
// L3 300 MiB; memcpy 15.55 G/s at 16 MiB and 15.77 at 64 MiB, Google Benchmark's 2^30
// bytes), the same command, two runs: with double-accumulated norms and cvt + sub for the
// fraction 10.96 / 11.10 G/s (0.72x / 0.71x memcpy at 16 / 64 MiB, compute-bound); with
// fp32-lane norms and vreduceps 13.04-13.11 / 13.00-13.08 G/s (0.84x / 0.83x).
// The AVX2 path (AMD EPYC Zen 3, no AVX-512) ran the float floor, one 8-byte store per 8
// codes and no prefetch, and was compute-bound at 0.49-0.53x memcpy at 64 MiB. Since
// 2026-12-06 it runs the AVX-512 path's shape: the integer floor and unsigned min
// (codes8_avx2), four code vectors packed to one 32-byte store, the next group prefetched.
// Same command, 3 alternating runs of both builds, medians of 3 repetitions, ratios to the
// memcpy of the same run (2026-12-06 15:18 UTC; the VM's memcpy moved between 5.9 and 7.6
// G/s at 64 MiB): 2.77-3.93 -> 6.64-6.91 G/s at 64 MiB (0.43-0.56x -> 0.89-1.12x),
// 3.58-4.62 -> 6.42-6.81 at 16 MiB. Without the prefetch the new path measured 3.8-4.5 G/s
// at 64 MiB (two runs). Summing the norms' lanes into doubles in registers instead of
// through NormSums measured the same (6.0-6.4 against 5.9-6.6 G/s at 64 MiB, 3 alternating
// runs) and was left out.

#include <cmath>
#include <cstring>

#include "core/error.hpp"
#include "kernels/cpu_target.hpp"

namespace gradsync::kernels {
namespace {

// ---- scalar ------------------------------------------------------------------------------------

void quantize_span_scalar(const float* x, std::size_t begin, std::size_t end, float scale, std::uint32_t levels,
                          RngKey key, std::uint8_t* codes) {
  for (std::size_t i = begin; i < end; ++i) codes[i] = qsgd_encode(x[i], scale, bits_to_unit(rng_bits(key, i)), levels);
}

void dequantize_span_scalar(const std::uint8_t* codes, std::size_t begin, std::size_t end, float unit, float* out,
                            bool accumulate) {
  if (accumulate) {
    for (std::size_t i = begin; i < end; ++i) out[i] += qsgd_decode(codes[i], unit);
  } else {
    for (std::size_t i = begin; i < end; ++i) out[i] = qsgd_decode(codes[i], unit);
  }
}

// ---- AVX2 ----------------------------------------------------------------------------------------

// hash32 (elementwise.hpp) on 8 lanes.
GS_TARGET_AVX2 inline __m256i hash32_avx2(__m256i h) {
  h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
  h = _mm256_mullo_epi32(h, _mm256_set1_epi32(static_cast<int>(0x7feb352du)));
  h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 15));
  h = _mm256_mullo_epi32(h, _mm256_set1_epi32(static_cast<int>(0x846ca68bu)));
  return _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
}

// Codes of 8 elements [i, i + 8) of one block, as 32-bit lanes (one code byte in each):
// codes16_avx512's integer rule on 8 lanes. AVX2 has no vreduceps, so the fraction is
// r - float(trunc(r)): exact for r < 2^31; where cvtt overflows (r >= 2^31, inf, NaN) l is
// 0x80000000 and the unsigned min makes the level S whatever `up` is.
GS_TARGET_AVX2 inline __m256i codes8_avx2(const float* x, std::size_t i, __m256i stream, __m256 vscale,
                                          __m256i vlevels) {
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i lo = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(i))), iota);
  const __m256i h = hash32_avx2(_mm256_xor_si256(lo, stream));
  const __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(h, 8)), _mm256_set1_ps(5.9604644775390625e-08f));

  const __m256 v = _mm256_loadu_ps(x + i);
  const __m256 r = _mm256_mul_ps(_mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff))), vscale);
  const __m256i l = _mm256_cvttps_epi32(r);
  const __m256i up = _mm256_castps_si256(_mm256_cmp_ps(u, _mm256_sub_ps(r, _mm256_cvtepi32_ps(l)), _CMP_LT_OQ));
  const __m256i level = _mm256_min_epu32(_mm256_sub_epi32(l, up), vlevels);  // up is 0 or -1
  const __m256i neg = _mm256_castps_si256(_mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ));
  return _mm256_or_si256(level, _mm256_and_si256(neg, _mm256_set1_epi32(0x80)));
}

// `ahead`: as quantize_avx512's.
GS_TARGET_AVX2 void quantize_avx2(const float* x, std::size_t first, std::size_t last, std::size_t block,
                                  const float* norms, std::uint32_t levels, RngKey key, std::uint8_t* codes,
                                  std::size_t ahead) {
  const __m256i vlevels = _mm256_set1_epi32(static_cast<int>(levels));
  // vpackusdw / vpackuswb work within 128-bit lanes: this puts the 4-byte groups back in order
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  // Byte 0 of each 32-bit lane to the low 4 bytes of each 128-bit half (the 8-element tail).
  const __m256i narrow = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,  //
                                          0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  for (std::size_t begin = first; begin < last; begin += block) {
    const std::size_t end = std::min(last, begin + block);
    const float scale = qsgd_scale(norms[begin / block], levels);
    const __m256 vscale = _mm256_set1_ps(scale);
    std::size_t i = begin;
    __m256i stream = _mm256_set1_epi32(static_cast<int>(rng_stream(key, static_cast<std::uint32_t>(i >> 32))));
    // 32 elements at a time: four code vectors packed to 32 bytes with saturating packs
    // (codes are 0..255, exact in both packs)
    for (; i + 32 <= end && (i >> 32) == ((i + 31) >> 32); i += 32) {
      _mm_prefetch(reinterpret_cast<const char*>(x + i + ahead), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(x + i + ahead + 16), _MM_HINT_T0);
      const __m256i c0 = codes8_avx2(x, i, stream, vscale, vlevels);
      const __m256i c1 = codes8_avx2(x, i + 8, stream, vscale, vlevels);
      const __m256i c2 = codes8_avx2(x, i + 16, stream, vscale, vlevels);
      const __m256i c3 = codes8_avx2(x, i + 24, stream, vscale, vlevels);
      const __m256i w = _mm256_packus_epi16(_mm256_packus_epi32(c0, c1), _mm256_packus_epi32(c2, c3));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + i), _mm256_permutevar8x32_epi32(w, order));
    }
    for (; i + 8 <= end; i += 8) {
      if ((i >> 32) != ((i + 7) >> 32)) {  // the 8 counters straddle a 2^32 block: scalar
        quantize_span_scalar(x, i, i + 8, scale, levels, key, codes);
        stream = _mm256_set1_epi32(static_cast<int>(rng_stream(key, static_cast<std::uint32_t>((i + 8) >> 32))));
        continue;
      }
      const __m256i bytes = _mm256_shuffle_epi8(codes8_avx2(x, i, stream, vscale, vlevels), narrow);
      const __m128i packed = _mm_unpacklo_epi32(_mm256_castsi256_si128(bytes), _mm256_extracti128_si256(bytes, 1));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + i), packed);
    }
    quantize_span_scalar(x, i, end, scale, levels, key, codes);
  }
}

GS_TARGET_AVX2 void dequantize_span_avx2(const std::uint8_t* codes, std::size_t begin, std::size_t end, float unit,
                                         float* out, bool accumulate) {
  const __m256 vunit = _mm256_set1_ps(unit);
  const __m256i levelmask = _mm256_set1_epi32(0x7f);
  const __m256i signcode = _mm256_set1_epi32(0x80);
  const __m256i signbit = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  std::size_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i)));
    __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(c, levelmask)), vunit);
    const __m256i neg = _mm256_cmpeq_epi32(_mm256_and_si256(c, signcode), signcode);
    v = _mm256_xor_ps(v, _mm256_castsi256_ps(_mm256_and_si256(neg, signbit)));
    if (accumulate) v = _mm256_add_ps(_mm256_loadu_ps(out + i), v);
    _mm256_storeu_ps(out + i, v);
  }
  dequantize_span_scalar(codes, i, end, unit, out, accumulate);
}

// ---- AVX-512 --------------------------------------------------------------------------------------

// hash32 (elementwise.hpp) on 16 lanes.
GS_TARGET_AVX512 inline __m512i hash32_avx512(__m512i h) {
  h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
  h = _mm512_mullo_epi32(h, _mm512_set1_epi32(static_cast<int>(0x7feb352du)));
  h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 15));
  h = _mm512_mullo_epi32(h, _mm512_set1_epi32(static_cast<int>(0x846ca68bu)));
  return _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
}

// Codes of 16 elements [i, i + 16) of one block, as 32-bit lanes (one code byte in each).
// The scalar qsgd_encode lane-wise, in integers where that is exact: for r = |x| * scale
// (>= 0, or NaN), floor(r) = cvtt(r) as long as r < 2^31 (r <= levels up to rounding);
// r - floor(r) is exact either way; the level l + [u < r - l] is then an integer add, and
// min(level, S) an unsigned min: NaN truncates to 0x80000000, above every S, so it becomes
// S, as fminf(NaN, S) does. The sign bit is (x < 0), ordered, so -0 and NaN are positive.
GS_TARGET_AVX512 inline __m512i codes16_avx512(const float* x, std::size_t i, __m512i stream, __m512 vscale,
                                               __m512i vlevels) {
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i lo = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(i))), iota);
  const __m512i h = hash32_avx512(_mm512_xor_si512(lo, stream));
  const __m512 u = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(h, 8)), _mm512_set1_ps(5.9604644775390625e-08f));

  const __m512 v = _mm512_loadu_ps(x + i);
  const __m512 r = _mm512_mul_ps(_mm512_abs_ps(v), vscale);
  const __m512i l = _mm512_cvttps_epi32(r);
  // r - trunc(r) in one vreduceps (exact); where cvtt overflows (r >= 2^31, inf, NaN) l is
  // 0x80000000 and the level becomes S below whatever `up` is.
  const __mmask16 up = _mm512_cmp_ps_mask(u, _mm512_reduce_ps(r, _MM_FROUND_TO_ZERO), _CMP_LT_OQ);
  const __m512i level = _mm512_min_epu32(_mm512_mask_sub_epi32(l, up, l, _mm512_set1_epi32(-1)), vlevels);
  const __mmask16 neg = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ);
  return _mm512_mask_or_epi32(level, neg, level, _mm512_set1_epi32(0x80));
}

// `ahead`: elements past the group being quantised to prefetch (the next group, whose
// norms pass would otherwise wait for memory while this loop computes).
GS_TARGET_AVX512 void quantize_avx512(const float* x, std::size_t first, std::size_t last, std::size_t block,
                                      const float* norms, std::uint32_t levels, RngKey key, std::uint8_t* codes,
                                      std::size_t ahead) {
  const __m512i vlevels = _mm512_set1_epi32(static_cast<int>(levels));
  // vpackusdw / vpackuswb work within 128-bit lanes: this puts the 16-byte groups back in order
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  for (std::size_t begin = first; begin < last; begin += block) {
    const std::size_t end = std::min(last, begin + block);
    const float scale = qsgd_scale(norms[begin / block], levels);
    const __m512 vscale = _mm512_set1_ps(scale);
    std::size_t i = begin;
    __m512i stream = _mm512_set1_epi32(static_cast<int>(rng_stream(key, static_cast<std::uint32_t>(i >> 32))));
    // 64 elements at a time: four code vectors packed to 64 bytes with saturating packs
    // (codes are 0..255, exact in both packs)
    for (; i + 64 <= end && (i >> 32) == ((i + 63) >> 32); i += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(x + i + ahead), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(x + i + ahead + 16), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(x + i + ahead + 32), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(x + i + ahead + 48), _MM_HINT_T0);
      const __m512i c0 = codes16_avx512(x, i, stream, vscale, vlevels);
      const __m512i c1 = codes16_avx512(x, i + 16, stream, vscale, vlevels);
      const __m512i c2 = codes16_avx512(x, i + 32, stream, vscale, vlevels);
      const __m512i c3 = codes16_avx512(x, i + 48, stream, vscale, vlevels);
      const __m512i w = _mm512_packus_epi16(_mm512_packus_epi32(c0, c1), _mm512_packus_epi32(c2, c3));
      _mm512_storeu_si512(codes + i, _mm512_permutexvar_epi32(order, w));
    }
    for (; i + 16 <= end; i += 16) {
      if ((i >> 32) != ((i + 15) >> 32)) {  // the 16 counters straddle a 2^32 block: scalar
        quantize_span_scalar(x, i, i + 16, scale, levels, key, codes);
        stream = _mm512_set1_epi32(static_cast<int>(rng_stream(key, static_cast<std::uint32_t>((i + 16) >> 32))));
        continue;
      }
      const __m512i code = codes16_avx512(x, i, stream, vscale, vlevels);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), _mm512_cvtepi32_epi8(code));
    }
    quantize_span_scalar(x, i, end, scale, levels, key, codes);
  }
}

GS_TARGET_AVX512 void dequantize_span_avx512(const std::uint8_t* codes, std::size_t begin, std::size_t end, float unit,
                                             float* out, bool accumulate) {
  const __m512 vunit = _mm512_set1_ps(unit);
  const __m512i levelmask = _mm512_set1_epi32(0x7f);
  const __m512i signcode = _mm512_set1_epi32(0x80);
  const __m512 signbit = _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(0x80000000u)));
  std::size_t i = begin;
  for (; i + 16 <= end; i += 16) {
    const __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i)));
    __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(c, levelmask)), vunit);
    v = _mm512_mask_xor_ps(v, _mm512_test_epi32_mask(c, signcode), v, signbit);
    if (accumulate) v = _mm512_add_ps(_mm512_loadu_ps(out + i), v);
    _mm512_storeu_ps(out + i, v);
  }
  dequantize_span_scalar(codes, i, end, unit, out, accumulate);
}

// ---- block norms -------------------------------------------------------------------------------
//
// The squares are summed in 64 fp32 lanes (lane l takes elements l, l + 64, ... of each
// 1024-element chunk; a chunk's last < 64 elements go to lanes 0..15, 16 at a time), the
// lanes then into 16 doubles and those in a fixed tree. Every path (scalar, AVX2, AVX-512)
// runs this order with fused multiply-adds and one shared chunk end (NormSums), so all
// give the same norms bit for bit. A lane sums at most 20 squares per chunk, so a sum is
// off by at most ~21 fp32 roundings (1.3e-6) and a norm by half that, for any block length
// (the test holds it to 1e-6 against long double). Before 2026-12-06 the squares went into doubles: two conversions
// and two double FMAs per 16 elements where this takes one FMA. In the fused encoder this
// pass re-reads L1/L2 beside a compute-bound quantisation, so its uops are its cost
// (qsgd_encode at 64 MiB 5.8 -> 4.7 ms, with the vreduceps above).
constexpr std::size_t kNormChunk = 1024;

// The end of a chunk, the same code for every path: the 64 fp32 lanes into the 16 double
// partial sums d (d[k] += s[k] + s[k + 8] for s[k] = lane k + lane k + 16 of each 32-lane
// half), and at the block's end those in a fixed tree. Once per 1024 elements, so scalar.
struct NormSums {
  double d[16] = {};
  void add_lanes(const float* a) {
    for (int h = 0; h < 2; ++h) {
      float s[16];
      for (int k = 0; k < 16; ++k) s[k] = a[32 * h + k] + a[32 * h + k + 16];
      for (int k = 0; k < 8; ++k) d[8 * h + k] += static_cast<double>(s[k]) + static_cast<double>(s[k + 8]);
    }
  }
  float norm() const {
    double t[8], q[4];
    for (int k = 0; k < 8; ++k) t[k] = d[k] + d[k + 8];
    for (int k = 0; k < 4; ++k) q[k] = t[k] + t[k + 4];
    return static_cast<float>(std::sqrt((q[0] + q[2]) + (q[1] + q[3])));
  }
};

float norm_scalar(const float* p, std::size_t len) {
  NormSums sums;
  for (std::size_t i = 0; i < len;) {
    const std::size_t stop = std::min(len, i + kNormChunk);
    float a[64] = {};
    for (; i + 64 <= stop; i += 64)
      for (int l = 0; l < 64; ++l) a[l] = std::fma(p[i + l], p[i + l], a[l]);
    for (; i < stop; i += 16)
      for (std::size_t l = 0; l < 16 && i + l < stop; ++l) a[l] = std::fma(p[i + l], p[i + l], a[l]);
    sums.add_lanes(a);
  }
  return sums.norm();
}

GS_TARGET_AVX2 float norm_avx2(const float* p, std::size_t len) {
  NormSums sums;
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (std::size_t i = 0; i < len;) {
    const std::size_t stop = std::min(len, i + kNormChunk);
    __m256 a[8];
    for (auto& v : a) v = _mm256_setzero_ps();
    for (; i + 64 <= stop; i += 64)
      for (int j = 0; j < 8; ++j) {
        const __m256 v = _mm256_loadu_ps(p + i + 8 * j);
        a[j] = _mm256_fmadd_ps(v, v, a[j]);
      }
    for (; i < stop; i += 16)
      for (int j = 0; j < 2; ++j) {
        const long left = static_cast<long>(stop) - static_cast<long>(i) - 8 * j;
        const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::min(left, 8L))), iota);
        const __m256 v = _mm256_maskload_ps(p + i + 8 * j, mask);
        a[j] = _mm256_fmadd_ps(v, v, a[j]);
      }
    alignas(32) float lanes[64];
    for (int j = 0; j < 8; ++j) _mm256_store_ps(lanes + 8 * j, a[j]);
    sums.add_lanes(lanes);
  }
  return sums.norm();
}

GS_TARGET_AVX512 float norm_avx512(const float* p, std::size_t len) {
  NormSums sums;
  for (std::size_t i = 0; i < len;) {
    const std::size_t stop = std::min(len, i + kNormChunk);
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    for (; i + 64 <= stop; i += 64) {
      const __m512 v0 = _mm512_loadu_ps(p + i), v1 = _mm512_loadu_ps(p + i + 16);
      const __m512 v2 = _mm512_loadu_ps(p + i + 32), v3 = _mm512_loadu_ps(p + i + 48);
      a0 = _mm512_fmadd_ps(v0, v0, a0);
      a1 = _mm512_fmadd_ps(v1, v1, a1);
      a2 = _mm512_fmadd_ps(v2, v2, a2);
      a3 = _mm512_fmadd_ps(v3, v3, a3);
    }
    for (; i < stop; i += 16) {
      const std::size_t m = std::min<std::size_t>(16, stop - i);
      const __m512 v = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << m) - 1u), p + i);
      a0 = _mm512_fmadd_ps(v, v, a0);
    }
    alignas(64) float lanes[64];
    _mm512_store_ps(lanes, a0);
    _mm512_store_ps(lanes + 16, a1);
    _mm512_store_ps(lanes + 32, a2);
    _mm512_store_ps(lanes + 48, a3);
    sums.add_lanes(lanes);
  }
  return sums.norm();
}

void check_args(std::size_t block, std::uint32_t levels) {
  GS_CHECK(block > 0, "QSGD block size must be positive");
  GS_CHECK(levels >= 1 && levels <= kQsgdMaxLevels, "QSGD levels must be in 1..", kQsgdMaxLevels, ", got ", levels);
}

}  // namespace

void qsgd_norms(const float* x, std::size_t n, std::size_t block, float* norms, Isa isa) {
  GS_CHECK(block > 0, "QSGD block size must be positive");
  const Isa use = detail::resolve(isa);
  const std::size_t nb = qsgd_num_blocks(n, block);
  for (std::size_t b = 0; b < nb; ++b) {
    const float* p = x + b * block;
    const std::size_t len = std::min(block, n - b * block);
    switch (use) {
      case Isa::Avx512:
        norms[b] = norm_avx512(p, len);
        break;
      case Isa::Avx2:
        norms[b] = norm_avx2(p, len);
        break;
      case Isa::Scalar:
        norms[b] = norm_scalar(p, len);
        break;
    }
  }
}

namespace {

// Elements [first, last) of x, first a multiple of block (norms and counters are global).
void quantize_range(const float* x, std::size_t first, std::size_t last, std::size_t block, const float* norms,
                    std::uint32_t levels, RngKey key, std::uint8_t* codes, Isa isa, std::size_t ahead = 0) {
  switch (detail::resolve(isa)) {
    case Isa::Avx512:
      return quantize_avx512(x, first, last, block, norms, levels, key, codes, ahead);
    case Isa::Avx2:
      return quantize_avx2(x, first, last, block, norms, levels, key, codes, ahead);
    case Isa::Scalar:
      break;
  }
  for (std::size_t begin = first; begin < last; begin += block)
    quantize_span_scalar(x, begin, std::min(last, begin + block), qsgd_scale(norms[begin / block], levels), levels, key,
                         codes);
}

}  // namespace

void qsgd_quantize(const float* x, std::size_t n, std::size_t block, const float* norms, std::uint32_t levels,
                   RngKey key, std::uint8_t* codes, Isa isa) {
  check_args(block, levels);
  quantize_range(x, 0, n, block, norms, levels, key, codes, isa);
}

void qsgd_encode(const float* x, std::size_t n, std::size_t block, std::uint32_t levels, RngKey key, float* norms,
                 std::uint8_t* codes, Isa isa) {
  check_args(block, levels);
  // Groups of whole blocks of about 8 Ki elements (32 KiB of fp32): the quantising pass
  // re-reads a group from L1/L2 right after its norms were taken, so the input streams
  // from memory once.
  const std::size_t group = std::max<std::size_t>(1, 8192 / block) * block;
  for (std::size_t g = 0; g < n; g += group) {
    const std::size_t len = std::min(group, n - g);
    qsgd_norms(x + g, len, block, norms + g / block, isa);
    quantize_range(x, g, g + len, block, norms, levels, key, codes, isa, len);
  }
}

void qsgd_dequantize(const std::uint8_t* codes, const float* norms, std::size_t n, std::size_t block,
                     std::uint32_t levels, float* out, bool accumulate, Isa isa) {
  check_args(block, levels);
  const Isa use = detail::resolve(isa);
  const std::size_t nb = qsgd_num_blocks(n, block);
  for (std::size_t b = 0; b < nb; ++b) {
    const std::size_t begin = b * block;
    const std::size_t end = std::min(n, begin + block);
    const float unit = qsgd_unit(norms[b], levels);
    switch (use) {
      case Isa::Avx512:
        dequantize_span_avx512(codes, begin, end, unit, out, accumulate);
        break;
      case Isa::Avx2:
        dequantize_span_avx2(codes, begin, end, unit, out, accumulate);
        break;
      case Isa::Scalar:
        dequantize_span_scalar(codes, begin, end, unit, out, accumulate);
        break;
    }
  }
}

}  // namespace gradsync::kernels
