// gradsync/core/dtype.hpp — element types, reduction ops, and IEEE half / bfloat16
// conversions with round-to-nearest-even.
//
// Half types are storage formats: arithmetic happens in fp32 and each result is rounded
// once. The scalar converters here are exact references (inf, nan, subnormals); the
// vectorised loops in reduce.cpp / the kernels must agree with them bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/hd.hpp"

namespace gradsync {

enum class DType : std::uint8_t { F32, F16, BF16 };
enum class RedOp : std::uint8_t { Sum, Avg };

std::size_t dtype_size(DType t);
const char* dtype_name(DType t);  // nccl-tests names: "float", "half", "bfloat16"
DType parse_dtype(const std::string& s);  // float|fp32|half|fp16|bfloat16|bf16; UsageError otherwise
const char* redop_name(RedOp op);        // "sum", "avg"
RedOp parse_redop(const std::string& s);

// ---- scalar conversions ------------------------------------------------------------------

GS_HD std::uint32_t f32_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
GS_HD float bits_f32(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// float -> IEEE binary16, round to nearest even; overflow -> inf; nan stays nan (quiet).
GS_HD std::uint16_t f32_to_f16(float f) {
  const std::uint32_t x = f32_bits(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // inf or nan
    return static_cast<std::uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u | ((absx >> 13) & 0x3ffu) : 0u));
  }
  if (absx >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (absx < 0x38800000u) {  // result is subnormal or zero (|f| < 2^-14)
    if (absx < 0x33000000u) return static_cast<std::uint16_t>(sign);  // < 2^-25: rounds to 0
    const std::uint32_t e = absx >> 23;
    const std::uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - e;  // 14 + (127 - e) - 1 ... bits dropped below 2^-24
    // value = mant * 2^(e-150); half subnormal unit is 2^-24 → q = mant >> (126 - e)
    std::uint32_t q = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<std::uint16_t>(sign | q);
  }
  // normal: rebias exponent 127 -> 15 and round the 13 dropped mantissa bits
  std::uint32_t h = ((absx - 0x38000000u) >> 13);
  const std::uint32_t rem = absx & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into exponent: fine
  return static_cast<std::uint16_t>(sign | h);
}

GS_HD float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = (static_cast<std::uint32_t>(h) & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu)  // inf, or nan (quieted, as F16C's vcvtph2ps does)
    return bits_f32(sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0u));
  if (exp == 0) {
    if (mant == 0) return bits_f32(sign);
    // subnormal: value = mant * 2^-24, exact in fp32
    const float v = static_cast<float>(mant) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

// float -> bfloat16, round to nearest even; nan stays nan.
GS_HD std::uint16_t f32_to_bf16(float f) {
  const std::uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  const std::uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>((x + rounding) >> 16);
}

GS_HD float bf16_to_f32(std::uint16_t b) { return bits_f32(static_cast<std::uint32_t>(b) << 16); }

// Load element i of a buffer of type t as float / store float rounding once.
inline float load_as_f32(const void* p, std::size_t i, DType t) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::F16: return f16_to_f32(static_cast<const std::uint16_t*>(p)[i]);
    case DType::BF16: return bf16_to_f32(static_cast<const std::uint16_t*>(p)[i]);
  }
  return 0.f;
}
inline void store_from_f32(void* p, std::size_t i, DType t, float v) {
  switch (t) {
    case DType::F32: static_cast<float*>(p)[i] = v; break;
    case DType::F16: static_cast<std::uint16_t*>(p)[i] = f32_to_f16(v); break;
    case DType::BF16: static_cast<std::uint16_t*>(p)[i] = f32_to_bf16(v); break;
  }
}

// Bulk conversions (vectorised where the CPU allows; see dtype.cpp).
void convert_f32_to(DType t, const float* in, void* out, std::size_t n);
void convert_to_f32(DType t, const void* in, float* out, std::size_t n);

}  // namespace gradsync
