// CPU casts f32 <-> f16/bf16 with a fused scale (the fp16/bf16 compressors, mixed precision).
//
// Approach: f16 uses the hardware converter (F16C vcvtps2ph at 8 lanes, AVX-512F at 16),
// which rounds to nearest even, keeps subnormals and quiets NaNs exactly like f32_to_f16.
// bf16 is integer round-to-nearest-even on the fp32 bits (add 0x7fff + lsb, shift), with the
// NaN lane blended to (x >> 16) | 0x40 as f32_to_bf16 does. Where AVX512-BF16 exists,
// vcvtneps2bf16 does the rounding in one instruction; it flushes subnormal inputs to zero,
// so a vector holding a subnormal (rare: |x| < 2^-126) takes the integer path instead,
// keeping the result bit-identical to the scalar reference and to the GPU.
// All loops are one pass, load -> multiply -> convert -> store: memory-bound on large buffers.

#include "core/error.hpp"
#include "kernels/cpu_target.hpp"

namespace gradsync::kernels {
namespace {

// ---- scalar ----------------------------------------------------------------------------------

void to_f16_scalar(const float* in, std::uint16_t* out, std::size_t n, float s) {
  for (std::size_t i = 0; i < n; ++i) out[i] = scaled_f16(in[i], s);
}
void to_bf16_scalar(const float* in, std::uint16_t* out, std::size_t n, float s) {
  for (std::size_t i = 0; i < n; ++i) out[i] = scaled_bf16(in[i], s);
}
void from_f16_scalar(const std::uint16_t* in, float* out, std::size_t n, float s) {
  for (std::size_t i = 0; i < n; ++i) out[i] = f16_scaled(in[i], s);
}
void from_bf16_scalar(const std::uint16_t* in, float* out, std::size_t n, float s) {
  for (std::size_t i = 0; i < n; ++i) out[i] = bf16_scaled(in[i], s);
}

// ---- AVX2 / F16C --------------------------------------------------------------------------------

GS_TARGET_AVX2 void to_f16_avx2(const float* in, std::uint16_t* out, std::size_t n, float s) {
  const __m256 vs = _mm256_set1_ps(s);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a = _mm256_mul_ps(_mm256_loadu_ps(in + i), vs);
    const __m256 b = _mm256_mul_ps(_mm256_loadu_ps(in + i + 8), vs);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i + 8),
                     _mm256_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (; i < n; ++i) out[i] = scaled_f16(in[i], s);
}

// bf16 bits of 8 floats, each in the low 16 bits of a 32-bit lane.
GS_TARGET_AVX2 inline __m256i bf16_round_avx2(__m256 v) {
  const __m256i x = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  const __m256i absx = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
  const __m256i nan = _mm256_cmpgt_epi32(absx, _mm256_set1_epi32(0x7f800000));  // both operands >= 0
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}

GS_TARGET_AVX2 void to_bf16_avx2(const float* in, std::uint16_t* out, std::size_t n, float s) {
  const __m256 vs = _mm256_set1_ps(s);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = bf16_round_avx2(_mm256_mul_ps(_mm256_loadu_ps(in + i), vs));
    const __m256i b = bf16_round_avx2(_mm256_mul_ps(_mm256_loadu_ps(in + i + 8), vs));
    // packus works per 128-bit lane: [a0-3 b0-3 a4-7 b4-7] -> reorder the 64-bit quarters.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), packed);
  }
  for (; i < n; ++i) out[i] = scaled_bf16(in[i], s);
}

GS_TARGET_AVX2 void from_f16_avx2(const std::uint16_t* in, float* out, std::size_t n, float s) {
  const __m256 vs = _mm256_set1_ps(s);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(v, vs));
  }
  for (; i < n; ++i) out[i] = f16_scaled(in[i], s);
}

GS_TARGET_AVX2 void from_bf16_avx2(const std::uint16_t* in, float* out, std::size_t n, float s) {
  const __m256 vs = _mm256_set1_ps(s);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(w, 16)), vs));
  }
  for (; i < n; ++i) out[i] = bf16_scaled(in[i], s);
}

// ---- AVX-512 ----------------------------------------------------------------------------------------

GS_TARGET_AVX512 void to_f16_avx512(const float* in, std::uint16_t* out, std::size_t n, float s) {
  const __m512 vs = _mm512_set1_ps(s);
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 a = _mm512_mul_ps(_mm512_loadu_ps(in + i), vs);
    const __m512 b = _mm512_mul_ps(_mm512_loadu_ps(in + i + 16), vs);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        _mm512_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i + 16),
                        _mm512_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (; i < n; ++i) out[i] = scaled_f16(in[i], s);
}

GS_TARGET_AVX512 inline __m256i bf16_round_avx512(__m512 v) {
  const __m512i x = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(x, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __m512i absx = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(absx, _mm512_set1_epi32(0x7f800000));
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
}

GS_TARGET_AVX512 void to_bf16_avx512(const float* in, std::uint16_t* out, std::size_t n, float s) {
  const __m512 vs = _mm512_set1_ps(s);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(in + i), vs);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), bf16_round_avx512(v));
  }
  for (; i < n; ++i) out[i] = scaled_bf16(in[i], s);
}

GS_TARGET_AVX512BF16 void to_bf16_avx512bf16(const float* in, std::uint16_t* out, std::size_t n, float s) {
  const __m512 vs = _mm512_set1_ps(s);
  const __m512i exp_mask = _mm512_set1_epi32(0x7f800000);
  const __m512i mant_mask = _mm512_set1_epi32(0x007fffff);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(in + i), vs);
    const __m512i x = _mm512_castps_si512(v);
    const __mmask16 subnormal = _mm512_testn_epi32_mask(x, exp_mask) & _mm512_test_epi32_mask(x, mant_mask);
    __m256i h;
    if (subnormal == 0) {
      const __m256bh b = _mm512_cvtneps_pbh(v);
      static_assert(sizeof(b) == sizeof(h));
      __builtin_memcpy(&h, &b, sizeof(h));
    } else {
      h = bf16_round_avx512(v);
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = scaled_bf16(in[i], s);
}

GS_TARGET_AVX512 void from_f16_avx512(const std::uint16_t* in, float* out, std::size_t n, float s) {
  const __m512 vs = _mm512_set1_ps(s);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(v, vs));
  }
  for (; i < n; ++i) out[i] = f16_scaled(in[i], s);
}

GS_TARGET_AVX512 void from_bf16_avx512(const std::uint16_t* in, float* out, std::size_t n, float s) {
  const __m512 vs = _mm512_set1_ps(s);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(w, 16)), vs));
  }
  for (; i < n; ++i) out[i] = bf16_scaled(in[i], s);
}

void check_half(DType t) {
  GS_CHECK(t == DType::F16 || t == DType::BF16, "cast kernels take half or bfloat16, not ", dtype_name(t));
}

}  // namespace

void cast_to_half(DType t, const float* in, std::uint16_t* out, std::size_t n, float scale, Isa isa) {
  check_half(t);
  switch (detail::resolve(isa)) {
    case Isa::Avx512:
      if (t == DType::F16) return to_f16_avx512(in, out, n, scale);
      if (detail::cpu_has_avx512bf16()) return to_bf16_avx512bf16(in, out, n, scale);
      return to_bf16_avx512(in, out, n, scale);
    case Isa::Avx2:
      return t == DType::F16 ? to_f16_avx2(in, out, n, scale) : to_bf16_avx2(in, out, n, scale);
    case Isa::Scalar:
      break;
  }
  return t == DType::F16 ? to_f16_scalar(in, out, n, scale) : to_bf16_scalar(in, out, n, scale);
}

void cast_from_half(DType t, const std::uint16_t* in, float* out, std::size_t n, float scale, Isa isa) {
  check_half(t);
  switch (detail::resolve(isa)) {
    case Isa::Avx512:
      return t == DType::F16 ? from_f16_avx512(in, out, n, scale) : from_bf16_avx512(in, out, n, scale);
    case Isa::Avx2:
      return t == DType::F16 ? from_f16_avx2(in, out, n, scale) : from_bf16_avx2(in, out, n, scale);
    case Isa::Scalar:
      break;
  }
  return t == DType::F16 ? from_f16_scalar(in, out, n, scale) : from_bf16_scalar(in, out, n, scale);
}

}  // namespace gradsync::kernels
