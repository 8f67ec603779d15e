// gradsync/kernels/elementwise.hpp — the element-wise math of every compression kernel,
// written once for host and device (GS_HD).
//
// Purpose: the CPU kernels (cpu_*.cpp, vectorised per ISA) and the CUDA kernels (*.cu)
// must produce the same bits. Both are built from the scalar functions here: the CUDA
// kernels call them directly, the CPU vector loops re-express them lane-wise with the
// same IEEE operations in the same order (a multiply, a floor, a compare, a blend), and
// the tests check every vector path bit for bit against these functions. So a CPU test of
// this header covers what a GPU runs.
//
// Contents, in the order the compressors use them:
//   * scaled casts f32 -> f16/bf16 (one fp32 multiply, then round-to-nearest-even once);
//   * a counter-based random number generator (QSGD's stochastic rounding): the i-th
//     number of a stream is a pure function of (key, i), so any thread or vector lane can
//     draw it and the CPU and the GPU draw the same numbers;
//   * QSGD codes: one byte per element, sign in bit 7, level 0..127 in bits 0..6;
//   * sign (1-bit) codes: bit 1 = "x >= 0" (zero and -0 count as positive, NaN as
//     negative), decoded to +scale / -scale;
//   * the error-feedback residual (and sign compression's, from the compressed input and
//     its scale) and the finiteness test of the loss scaler;
//   * the magnitude key of top-k (|x|'s bits, ordered like |x| for non-NaN values).
#pragma once

#include <cstdint>

#include "core/dtype.hpp"
#include "core/hd.hpp"

#if !defined(__CUDACC__)
#include <cmath>
#endif

namespace gradsync::kernels {

// ---- casts ---------------------------------------------------------------------------------

// Communication casts with a fused pre-scale (the 1/world_size of the fp16/bf16
// compressors): the product is rounded to fp32 first, then to the half type.
GS_HD std::uint16_t scaled_f16(float x, float scale) { return f32_to_f16(x * scale); }
GS_HD std::uint16_t scaled_bf16(float x, float scale) { return f32_to_bf16(x * scale); }
// Widening is exact; the optional post-scale is one fp32 multiply.
GS_HD float f16_scaled(std::uint16_t h, float scale) { return f16_to_f32(h) * scale; }
GS_HD float bf16_scaled(std::uint16_t b, float scale) { return bf16_to_f32(b) * scale; }

// ---- counter-based random numbers -----------------------------------------------------------

// MurmurHash3's 32-bit finaliser: a bijection with full avalanche (key derivation).
GS_HD std::uint32_t mix32(std::uint32_t h) {
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

// "lowbias32" (C. Wellons, hash-prospector): a bijection on 32 bits with lower avalanche
// bias than mix32 at the same cost (two multiplies): the per-element hash.
GS_HD std::uint32_t hash32(std::uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

// A stream of random numbers; derive one per (seed, rank, step, bucket) with rng_key().
struct RngKey {
  std::uint32_t k0 = 0;
  std::uint32_t k1 = 0;
};

// The 32-bit stream word of counters [hi * 2^32, (hi + 1) * 2^32): the key with the high
// half of the counter mixed in (constant over a vector of counters, computed once).
GS_HD std::uint32_t rng_stream(RngKey key, std::uint32_t hi) { return key.k0 ^ mix32(hi ^ key.k1); }

// Random bits number i of the stream: hash32(low half of i XOR the stream word). Within a
// 2^32 block distinct counters give distinct outputs (a bijection), so the numbers are
// exactly uniform over a full block; one hash per element keeps QSGD's encoder memory-bound.
GS_HD std::uint32_t rng_bits(RngKey key, std::uint64_t i) {
  return hash32(static_cast<std::uint32_t>(i) ^ rng_stream(key, static_cast<std::uint32_t>(i >> 32)));
}

// Uniform in [0, 1) with 24 random bits (exact in fp32).
GS_HD float bits_to_unit(std::uint32_t bits) { return static_cast<float>(bits >> 8) * 5.9604644775390625e-08f; }

// SplitMix64 step (host-side key derivation).
GS_HD std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Key of the stream (seed, a, b, c), e.g. (seed, rank, step, bucket).
GS_HD RngKey rng_key(std::uint64_t seed, std::uint64_t a, std::uint64_t b, std::uint64_t c) {
  std::uint64_t h = splitmix64(seed);
  h = splitmix64(h ^ a);
  h = splitmix64(h ^ b);
  h = splitmix64(h ^ c);
  RngKey k;
  k.k0 = static_cast<std::uint32_t>(h);
  k.k1 = static_cast<std::uint32_t>(h >> 32);
  return k;
}

// ---- QSGD --------------------------------------------------------------------------------

constexpr std::uint32_t kQsgdMaxLevels = 127;  // 7 bits of level + 1 sign bit per byte

// Multiplier that maps |x| to [0, S]: S / norm. 0 for an all-zero bucket, and for a bucket
// so tiny (norm < S / FLT_MAX, about 4e-37) that S / norm overflows: it encodes as zeros
// (a NaN norm also gives 0 here, and decodes to NaN through qsgd_unit).
GS_HD float qsgd_scale(float norm, std::uint32_t levels) {
  const float s = static_cast<float>(levels) / norm;
  return (norm > 0.f && s <= 3.40282347e+38f) ? s : 0.f;
}
// Value of one level step: norm / S.
GS_HD float qsgd_unit(float norm, std::uint32_t levels) { return norm / static_cast<float>(levels); }

// Stochastic quantisation of one element: r = |x| * S / norm, l = floor(r), level = l + 1
// with probability r - l (u uniform in [0,1)), else l; so E[level] = r and the decoded
// value norm * sign(x) * level / S is unbiased. Clamped to S against fp32 rounding of r.
GS_HD std::uint8_t qsgd_encode(float x, float scale, float u, std::uint32_t levels) {
  const float r = fabsf(x) * scale;
  const float l = floorf(r);
  float level = l + ((u < r - l) ? 1.f : 0.f);
  level = fminf(level, static_cast<float>(levels));  // NaN -> S (the NaN norm decodes to NaN)
  const std::uint32_t code = static_cast<std::uint32_t>(level) | (x < 0.f ? 0x80u : 0u);
  return static_cast<std::uint8_t>(code);
}

GS_HD float qsgd_decode(std::uint8_t code, float unit) {
  const float v = static_cast<float>(code & 0x7fu) * unit;
  return (code & 0x80u) ? -v : v;
}

// ---- sign (1-bit) ----------------------------------------------------------------------

GS_HD bool sign_bit(float x) { return x >= 0.f; }
GS_HD float sign_decode(bool bit, float scale) { return bit ? scale : -scale; }

// ---- error feedback, finiteness, magnitude -------------------------------------------------

// The memory an error-feedback compressor keeps: what the decoded message missed.
GS_HD float ef_residual(float input, float decoded) { return input - decoded; }
// The residual of sign compression: x - decoded(sign_bit(x), scale). The one-pass sign
// encoder keeps x (the last compressed input) and its scale, and resolves this at the next
// step: the same operation the eager residual does, so the same bits.
GS_HD float sign_residual(float x, float scale) { return ef_residual(x, sign_decode(sign_bit(x), scale)); }

GS_HD bool is_finite_f32(float x) { return (f32_bits(x) & 0x7f800000u) != 0x7f800000u; }

// |x| as an unsigned key: ordered like |x| (NaN above +inf).
GS_HD std::uint32_t magnitude_key(float x) { return f32_bits(x) & 0x7fffffffu; }

}  // namespace gradsync::kernels
