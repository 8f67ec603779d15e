// CPU kernels of sign (1-bit) compression as in 1-bit Adam (Tang et al., 2021): one bit
// per element, 8 packed per byte (element i is bit i%8 of byte i/8), and one fp32 scale
// ||x||_2 / sqrt(n) per compressed chunk; optionally the error-feedback residual
// x - decoded in the same pass.
//
// sign_compress_ef adds the error-feedback memory in pass 1 (add_sum_squares: x += error
// and the sum of squares of the result in one pass) and writes the new memory in pass 2:
// read x, read error, write x, then read x, write error (+ the bits), where the composition
// add_inplace + sign_compress streams x five times and error twice.
// Approach: pass 1 is the double-accumulated sum of squares (cpu_misc.cpp); pass 2 turns a
// vector compare (x >= 0, ordered, so NaN is "negative" as in sign_bit()) into the packed
// bits directly: an AVX-512 compare yields a 16-bit mask = 2 code bytes, an AVX2 compare +
// movemask 8 bits = 1 byte. Decoding blends +scale / -scale under the same masks.
//
// Measured 2026-12-01 on the 2-core development VM (Intel AVX-512, L3 480 MiB; memcpy
// 12.98 GB/s at 16 MiB, 6.87 GB/s at 64 MiB), onebit_encode (x += error; signs + scale;
// error = x - decoded), medians of 3, with
// `gradsync-kernels-bench --benchmark_filter='(memcpy|qsgd_encode|onebit_encode|topk_encode)/MiB:(16|64)'
// --benchmark_min_time=1 --benchmark_repetitions=3 --benchmark_report_aggregates_only=true`:
//   16 MiB: 4.66 GB/s (0.37x memcpy) add_inplace + sign_compress -> 6.04 GB/s (0.47x) fused
//   64 MiB: 2.38 GB/s (0.35x memcpy)                              -> 2.68 GB/s (0.39x) fused
// At 64 MiB it is bound by memory streams: pass 2 alone (read x, write error) is a memcpy
// (~9 ms), pass 1 (read x and error, write x) an in-place add (~7 ms), while memcpy takes
// 9.1 ms. Any encoder that leaves x = g + e must read 2 arrays and write 2 (0.5x at best in
// one pass); the scale, a norm of the whole chunk, is needed before the residual, so two.

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

// Pass 2 of both entry points: bits and the residual under a known scale.
void compress_with_scale(const float* x, std::size_t n, float scale, std::uint8_t* bits, float* residual, Isa isa) {
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
}

float scale_of(double sum_squares, std::size_t n) {
  return static_cast<float>(std::sqrt(sum_squares / static_cast<double>(n)));
}

}  // namespace

float sign_compress(const float* x, std::size_t n, std::uint8_t* bits, float* residual, Isa isa) {
  if (n == 0) return 0.f;
  const float scale = scale_of(sum_squares(x, n, isa), n);
  compress_with_scale(x, n, scale, bits, residual, isa);
  return scale;
}

float sign_compress_ef(float* x, float* error, std::size_t n, std::uint8_t* bits, Isa isa) {
  if (n == 0) return 0.f;
  const float scale = scale_of(add_sum_squares(x, error, n, isa), n);  // pass 1: x += error
  compress_with_scale(x, n, scale, bits, error, isa);                   // pass 2: error = x - decoded
  return scale;
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
