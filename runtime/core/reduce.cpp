#include "core/reduce.hpp"

#include <immintrin.h>

#include <cstdint>

namespace gradsync {
namespace {

bool cpu_has_f16c() {
  static const bool has = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2");
  return has;
}

__attribute__((target("avx2,f16c"))) void add_f16_f16c(std::uint16_t* out, const std::uint16_t* a,
                                                       const std::uint16_t* b, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)));
    __m256 y = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_add_ps(x, y), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (; i < n; ++i) out[i] = f32_to_f16(f16_to_f32(a[i]) + f16_to_f32(b[i]));
}

void add_f16_scalar(std::uint16_t* out, const std::uint16_t* a, const std::uint16_t* b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = f32_to_f16(f16_to_f32(a[i]) + f16_to_f32(b[i]));
}

void add_bf16(std::uint16_t* out, const std::uint16_t* a, const std::uint16_t* b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const float s = bf16_to_f32(a[i]) + bf16_to_f32(b[i]);
    const std::uint32_t x = f32_bits(s);
    const std::uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    out[i] = static_cast<std::uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? ((x >> 16) | 0x40u) : rounded);
  }
}

void add_f32(float* out, const float* a, const float* b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

}  // namespace

void reduce_out(void* out, const void* a, const void* b, std::size_t count, DType t) {
  switch (t) {
    case DType::F32:
      add_f32(static_cast<float*>(out), static_cast<const float*>(a), static_cast<const float*>(b), count);
      break;
    case DType::F16:
      if (cpu_has_f16c())
        add_f16_f16c(static_cast<std::uint16_t*>(out), static_cast<const std::uint16_t*>(a),
                     static_cast<const std::uint16_t*>(b), count);
      else
        add_f16_scalar(static_cast<std::uint16_t*>(out), static_cast<const std::uint16_t*>(a),
                       static_cast<const std::uint16_t*>(b), count);
      break;
    case DType::BF16:
      add_bf16(static_cast<std::uint16_t*>(out), static_cast<const std::uint16_t*>(a),
               static_cast<const std::uint16_t*>(b), count);
      break;
  }
}

void reduce_into(void* acc, const void* in, std::size_t count, DType t) { reduce_out(acc, acc, in, count, t); }

void scale_inplace(void* buf, std::size_t count, DType t, float factor) {
  if (t == DType::F32) {
    float* p = static_cast<float*>(buf);
    for (std::size_t i = 0; i < count; ++i) p[i] *= factor;
    return;
  }
  for (std::size_t i = 0; i < count; ++i) store_from_f32(buf, i, t, load_as_f32(buf, i, t) * factor);
}

}  // namespace gradsync
