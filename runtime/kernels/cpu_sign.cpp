// CPU kernels of sign (1-bit) compression as in 1-bit Adam (Tang et al., 2021): one bit
// per element, 8 packed per byte (element i is bit i%8 of byte i/8), and one fp32 scale
// ||x||_2 / sqrt(n) per compressed chunk; optionally the error-feedback residual
// x - decoded in the same pass.
//
// Purpose: sign_compress (signs, scale, optional residual), sign_compress_ef (the onebit
// compressor's encoder with error feedback, compress/onebit.hpp) and sign_decompress.
//
// Approach of sign_compress_ef: one pass, the memory kept deferred. The eager form
//   x += e; scale = ||x|| / sqrt(n); bits = x >= 0; e = x - (bit ? scale : -scale)
// needs the scale (a norm of the whole chunk) before the residual, so two passes and five
// streams (read x, read e, write x; read x, write e). Instead the memory keeps r = x, the
// input compressed last, and its scale s': the residual e = sign_residual(r, s') =
// r - (r >= 0 ? s' : -s') is the same fp32 operation the eager form does, only one step
// later, so per element  e = sign_residual(last, s'); r = g + e; last = r; bit of r; sum +=
// r*r  and scale = sqrt(sum / n) at the end: read g, read last, write last (+ n/8 code
// bytes), and g is left as it was (reduce() overwrites the bucket with the average anyway).
// The first step has last = 0, s' = 0 (residual 0). Codes, scales and the resolved memory
// are the bits of the eager form: the sum of squares keeps sum_squares' order per ISA
// (cpu_misc.cpp), and tests/kernels (SignCompressEfMatchesTheEagerCompositionOverSteps) and
// tests/compress (OnebitDeferredMemoryMatchesTheEagerFormOverSteps) check it over steps, on
// every ISA, with zeros, cancellations, NaN and inf. Where two NaNs meet, which one survives
// (payload, sign) is the compiler's operand order in both forms and is not compared.
// Vectors: a compare (x >= 0, ordered, so NaN is "negative" as in sign_bit()) gives the
// packed bits directly: an AVX-512 compare yields a 16-bit mask = 2 code bytes, an AVX2
// compare + movemask 8 bits = 1 byte. Decoding blends +scale / -scale under the same masks.
//
// Measured 2026-12-02 on the 2-core development VM (Intel AVX-512; memcpy 11.08 GB/s at
// 16 MiB, 4.62 GB/s at 64 MiB that day, against 6.87 at 64 MiB on 2026-12-01), medians of
// 3, the eager two-pass build (7a2dfb9) and this one alternately in one quiet window
// (/work/quiet.sh, disturbed_seconds=0), with
// `gradsync-kernels-bench --benchmark_filter='(memcpy|qsgd_encode|onebit_encode|topk_encode)/MiB:(16|64)'
// --benchmark_min_time=1 --benchmark_repetitions=3 --benchmark_report_aggregates_only=true`:
//   16 MiB: 4.59 GB/s (0.44x memcpy) two passes -> 10.96 GB/s (0.99x) one pass
//   64 MiB: 1.84 GB/s (0.41x memcpy)            ->  4.09 GB/s (0.89x) one pass
// (the other round: 0.42x -> 0.90x at 16 MiB, 0.41x -> 0.86x at 64 MiB).
// Bound: the three streams. stream_add (y += x: read 2 arrays, write 1, the encoder's
// streams without its arithmetic; --benchmark_filter='(memcpy|stream_add|onebit_encode)/MiB:(16|64)')
// ran at 1.07-1.11x memcpy at 64 MiB (12.1-12.6 ms; memcpy's store costs about a read plus
// a write here, read-for-ownership), onebit_encode at 0.77-0.83x of stream_add (15.1-15.8
// ms): the rest is the per-element work on top of the streams (residual, compare, the
// double widening of the sum of squares) that two cores do not fully hide.
#include <cmath>
#include <cstring>

#include "kernels/cpu_target.hpp"

namespace gradsync::kernels {
namespace {

// Elements [begin, n) with begin a multiple of 8; zeroes the bytes it writes first.
void compress_tail(const float* x, std::size_t begin, std::size_t n, float scale, std::uint8_t* bits, float* residual) {
  std::memset(bits + begin / 8, 0, sign_bytes(n) - begin / 8);
  for (std::size_t i = begin; i < n; ++i) {
    const float v = x[i];
    const bool bit = sign_bit(v);
    bits[i >> 3] = static_cast<std::uint8_t>(bits[i >> 3] | (static_cast<unsigned>(bit) << (i & 7)));
    if (residual) residual[i] = ef_residual(v, sign_decode(bit, scale));
  }
}

void decompress_span(const std::uint8_t* bits, float scale, std::size_t begin, std::size_t n, float* out,
                     bool accumulate) {
  for (std::size_t i = begin; i < n; ++i) {
    const float v = sign_decode((bits[i >> 3] >> (i & 7)) & 1u, scale);
    out[i] = accumulate ? out[i] + v : v;
  }
}

GS_TARGET_AVX2 std::size_t compress_avx2(const float* x, std::size_t n, float scale, std::uint8_t* bits,
                                         float* residual) {
  const __m256 zero = _mm256_setzero_ps();
  const __m256 pos = _mm256_set1_ps(scale);
  const __m256 neg = _mm256_set1_ps(-scale);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 ge = _mm256_cmp_ps(v, zero, _CMP_GE_OQ);
    bits[i >> 3] = static_cast<std::uint8_t>(_mm256_movemask_ps(ge));
    if (residual) _mm256_storeu_ps(residual + i, _mm256_sub_ps(v, _mm256_blendv_ps(neg, pos, ge)));
  }
  return i;
}

GS_TARGET_AVX2 std::size_t decompress_avx2(const std::uint8_t* bits, float scale, std::size_t n, float* out,
                                           bool accumulate) {
  const __m256 pos = _mm256_set1_ps(scale);
  const __m256 neg = _mm256_set1_ps(-scale);
  const __m256i lanebit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i b = _mm256_and_si256(_mm256_set1_epi32(bits[i >> 3]), lanebit);
    const __m256 set = _mm256_castsi256_ps(_mm256_cmpeq_epi32(b, lanebit));
    __m256 v = _mm256_blendv_ps(neg, pos, set);
    if (accumulate) v = _mm256_add_ps(_mm256_loadu_ps(out + i), v);
    _mm256_storeu_ps(out + i, v);
  }
  return i;
}

GS_TARGET_AVX512 std::size_t compress_avx512(const float* x, std::size_t n, float scale, std::uint8_t* bits,
                                             float* residual) {
  const __m512 zero = _mm512_setzero_ps();
  const __m512 pos = _mm512_set1_ps(scale);
  const __m512 neg = _mm512_set1_ps(-scale);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __mmask16 ge = _mm512_cmp_ps_mask(v, zero, _CMP_GE_OQ);
    const std::uint16_t m = static_cast<std::uint16_t>(ge);
    std::memcpy(bits + (i >> 3), &m, 2);  // little-endian: element i+j is bit j%8 of byte j/8
    if (residual) _mm512_storeu_ps(residual + i, _mm512_sub_ps(v, _mm512_mask_blend_ps(ge, neg, pos)));
  }
  return i;
}

GS_TARGET_AVX512 std::size_t decompress_avx512(const std::uint8_t* bits, float scale, std::size_t n, float* out,
                                               bool accumulate) {
  const __m512 pos = _mm512_set1_ps(scale);
  const __m512 neg = _mm512_set1_ps(-scale);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    std::uint16_t m;
    std::memcpy(&m, bits + (i >> 3), 2);
    __m512 v = _mm512_mask_blend_ps(static_cast<__mmask16>(m), neg, pos);
    if (accumulate) v = _mm512_add_ps(_mm512_loadu_ps(out + i), v);
    _mm512_storeu_ps(out + i, v);
  }
  return i;
}

}  // namespace

namespace {

// ---- the one-pass error-feedback encoder -------------------------------------------------
// Per element: r = x + sign_residual(last, last_scale); last = r; bit of r; and r*r into a
// double sum. Each vector path sums in sum_squares' order for its ISA (cpu_misc.cpp: four
// accumulators over blocks of 32 / 16 / 4 elements, combined as there, then the sequential
// tail, inlined into each ISA's function as sum_squares' tail is), so the scale has the
// bits of the eager path's, NaN payloads included. Each returns the sum of squares.

// Elements [begin, n): ORs their bits into bytes already zeroed; the tail's sum.
GS_ALWAYS_INLINE double ef_tail(const float* x, float* last, float last_scale, std::size_t begin, std::size_t n,
                                std::uint8_t* bits) {
  double s = 0;
  for (std::size_t i = begin; i < n; ++i) {
    const float r = x[i] + sign_residual(last[i], last_scale);
    last[i] = r;
    bits[i >> 3] = static_cast<std::uint8_t>(bits[i >> 3] | (static_cast<unsigned>(sign_bit(r)) << (i & 7)));
    s += static_cast<double>(r) * static_cast<double>(r);
  }
  return s;
}

double ef_scalar(const float* x, float* last, float last_scale, std::size_t n, std::uint8_t* bits) {
  std::memset(bits, 0, sign_bytes(n));
  double s[4] = {0, 0, 0, 0};
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (std::size_t j = 0; j < 4; ++j) {
      const float r = x[i + j] + sign_residual(last[i + j], last_scale);
      last[i + j] = r;
      const std::size_t k = i + j;
      bits[k >> 3] = static_cast<std::uint8_t>(bits[k >> 3] | (static_cast<unsigned>(sign_bit(r)) << (k & 7)));
      s[j] += static_cast<double>(r) * static_cast<double>(r);
    }
  return (s[0] + s[1]) + (s[2] + s[3]) + ef_tail(x, last, last_scale, i, n, bits);
}

// r = x + (last - (last >= 0 ? scale : -scale)): the operations of sign_residual, lane-wise.
GS_TARGET_AVX2 inline __m256 ef_input_avx2(const float* x, const float* last, __m256 pos, __m256 neg) {
  const __m256 m = _mm256_loadu_ps(last);
  const __m256 ge = _mm256_cmp_ps(m, _mm256_setzero_ps(), _CMP_GE_OQ);
  return _mm256_add_ps(_mm256_loadu_ps(x), _mm256_sub_ps(m, _mm256_blendv_ps(neg, pos, ge)));
}

GS_TARGET_AVX2 double ef_avx2(const float* x, float* last, float last_scale, std::size_t n, std::uint8_t* bits) {
  const __m256 zero = _mm256_setzero_ps();
  const __m256 pos = _mm256_set1_ps(last_scale);
  const __m256 neg = _mm256_set1_ps(-last_scale);
  detail::SumSqAvx2 acc;
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 v0 = ef_input_avx2(x + i, last + i, pos, neg);
    const __m256 v1 = ef_input_avx2(x + i + 8, last + i + 8, pos, neg);
    _mm256_storeu_ps(last + i, v0);
    _mm256_storeu_ps(last + i + 8, v1);
    bits[i >> 3] = static_cast<std::uint8_t>(_mm256_movemask_ps(_mm256_cmp_ps(v0, zero, _CMP_GE_OQ)));
    bits[(i >> 3) + 1] = static_cast<std::uint8_t>(_mm256_movemask_ps(_mm256_cmp_ps(v1, zero, _CMP_GE_OQ)));
    acc.add(v0, v1);
  }
  const double s = acc.total();  // before the call: the accumulators need not survive it
  std::memset(bits + i / 8, 0, sign_bytes(n) - i / 8);
  return s + ef_tail(x, last, last_scale, i, n, bits);
}

GS_TARGET_AVX512 inline __m512 ef_input_avx512(const float* x, const float* last, __m512 pos, __m512 neg) {
  const __m512 m = _mm512_loadu_ps(last);
  const __mmask16 ge = _mm512_cmp_ps_mask(m, _mm512_setzero_ps(), _CMP_GE_OQ);
  return _mm512_add_ps(_mm512_loadu_ps(x), _mm512_sub_ps(m, _mm512_mask_blend_ps(ge, neg, pos)));
}

GS_TARGET_AVX512 double ef_avx512(const float* x, float* last, float last_scale, std::size_t n,
                                  std::uint8_t* bits) {
  const __m512 zero = _mm512_setzero_ps();
  const __m512 pos = _mm512_set1_ps(last_scale);
  const __m512 neg = _mm512_set1_ps(-last_scale);
  detail::SumSqAvx512 acc;
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 v0 = ef_input_avx512(x + i, last + i, pos, neg);
    const __m512 v1 = ef_input_avx512(x + i + 16, last + i + 16, pos, neg);
    _mm512_storeu_ps(last + i, v0);
    _mm512_storeu_ps(last + i + 16, v1);
    // little-endian: element i+j is bit j%8 of byte (i+j)/8
    const std::uint32_t m = static_cast<std::uint32_t>(_mm512_cmp_ps_mask(v0, zero, _CMP_GE_OQ)) |
                            (static_cast<std::uint32_t>(_mm512_cmp_ps_mask(v1, zero, _CMP_GE_OQ)) << 16);
    std::memcpy(bits + (i >> 3), &m, 4);
    acc.add(v0, v1);
  }
  const double s = acc.total();  // before the call: the accumulators need not survive it
  std::memset(bits + i / 8, 0, sign_bytes(n) - i / 8);
  return s + ef_tail(x, last, last_scale, i, n, bits);
}

float scale_of(double sum_squares, std::size_t n) {
  return static_cast<float>(std::sqrt(sum_squares / static_cast<double>(n)));
}

}  // namespace

float sign_compress(const float* x, std::size_t n, std::uint8_t* bits, float* residual, Isa isa) {
  if (n == 0) return 0.f;
  const float scale = scale_of(sum_squares(x, n, isa), n);
  std::size_t done = 0;
  switch (detail::resolve(isa)) {
    case Isa::Avx512:
      done = compress_avx512(x, n, scale, bits, residual);
      break;
    case Isa::Avx2:
      done = compress_avx2(x, n, scale, bits, residual);
      break;
    case Isa::Scalar:
      break;
  }
  compress_tail(x, done, n, scale, bits, residual);
  return scale;
}

namespace {
double ef(const float* x, float* last, float last_scale, std::size_t n, std::uint8_t* bits, Isa isa) {
  GS_DISPATCH(ef, x, last, last_scale, n, bits);
}
}  // namespace

float sign_compress_ef(const float* x, float* last, float last_scale, std::size_t n, std::uint8_t* bits, Isa isa) {
  return n == 0 ? 0.f : scale_of(ef(x, last, last_scale, n, bits, isa), n);
}

void sign_residual(const float* last, float scale, std::size_t n, float* residual) {
  for (std::size_t i = 0; i < n; ++i) residual[i] = sign_residual(last[i], scale);
}

void sign_decompress(const std::uint8_t* bits, float scale, std::size_t n, float* out, bool accumulate, Isa isa) {
  std::size_t done = 0;
  switch (detail::resolve(isa)) {
    case Isa::Avx512:
      done = decompress_avx512(bits, scale, n, out, accumulate);
      break;
    case Isa::Avx2:
      done = decompress_avx2(bits, scale, n, out, accumulate);
      break;
    case Isa::Scalar:
      break;
  }
  decompress_span(bits, scale, done, n, out, accumulate);
}

}  // namespace gradsync::kernels
