#include "core/dtype.hpp"

#include <immintrin.h>

#include "core/error.hpp"

namespace gradsync {

std::size_t dtype_size(DType t) { return t == DType::F32 ? 4 : 2; }

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "float";
    case DType::F16: return "half";
    case DType::BF16: return "bfloat16";
  }
  return "?";
}

DType parse_dtype(const std::string& s) {
  if (s == "float" || s == "fp32" || s == "f32" || s == "float32") return DType::F32;
  if (s == "half" || s == "fp16" || s == "f16" || s == "float16") return DType::F16;
  if (s == "bfloat16" || s == "bf16") return DType::BF16;
  throw UsageError("unknown data type '" + s + "' (expected float, half or bfloat16)");
}

const char* redop_name(RedOp op) { return op == RedOp::Sum ? "sum" : "avg"; }

RedOp parse_redop(const std::string& s) {
  if (s == "sum") return RedOp::Sum;
  if (s == "avg") return RedOp::Avg;
  throw UsageError("unknown reduction op '" + s + "' (expected sum or avg)");
}

namespace {

bool cpu_has_f16c() {
  static const bool has = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2");
  return has;
}

__attribute__((target("avx2,f16c"))) void f32_to_f16_f16c(const float* in, std::uint16_t* out,
                                                           std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(in + i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (; i < n; ++i) out[i] = f32_to_f16(in[i]);
}

__attribute__((target("avx2,f16c"))) void f16_to_f32_f16c(const std::uint16_t* in, float* out,
                                                           std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) out[i] = f16_to_f32(in[i]);
}

// Branch-free form of f32_to_bf16 so the compiler vectorises the loop.
void f32_to_bf16_loop(const float* in, std::uint16_t* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t x = f32_bits(in[i]);
    const std::uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    const std::uint32_t nan = (x >> 16) | 0x40u;
    out[i] = static_cast<std::uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
  }
}

}  // namespace

void convert_f32_to(DType t, const float* in, void* out, std::size_t n) {
  switch (t) {
    case DType::F32: std::memcpy(out, in, n * 4); break;
    case DType::F16:
      if (cpu_has_f16c()) {
        f32_to_f16_f16c(in, static_cast<std::uint16_t*>(out), n);
      } else {
        auto* o = static_cast<std::uint16_t*>(out);
        for (std::size_t i = 0; i < n; ++i) o[i] = f32_to_f16(in[i]);
      }
      break;
    case DType::BF16: f32_to_bf16_loop(in, static_cast<std::uint16_t*>(out), n); break;
  }
}

void convert_to_f32(DType t, const void* in, float* out, std::size_t n) {
  switch (t) {
    case DType::F32: std::memcpy(out, in, n * 4); break;
    case DType::F16:
      if (cpu_has_f16c()) {
        f16_to_f32_f16c(static_cast<const std::uint16_t*>(in), out, n);
      } else {
        const auto* p = static_cast<const std::uint16_t*>(in);
        for (std::size_t i = 0; i < n; ++i) out[i] = f16_to_f32(p[i]);
      }
      break;
    case DType::BF16: {
      const auto* p = static_cast<const std::uint16_t*>(in);
      for (std::size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(p[i]);
      break;
    }
  }
}

}  // namespace gradsync
