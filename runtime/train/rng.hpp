// gradsync/train/rng.hpp — small, fast, *specified* random numbers for the training runtime.
//
// Everything random in a run (data, labels, initial weights, the sampler's permutations,
// emulated gradients) is derived from the user's --seed through these functions, so a run
// is reproducible bit for bit on any platform and standard library (std::shuffle and
// std::normal_distribution are implementation-defined; these are not).
//
//   mix64(a, b, ...)   a key from several integers (splitmix64 finaliser chained)
//   SplitMix64         sequential stream (permutations, per-tensor factors)
//   hash32(key, i)     counter-based: the i-th value of a stream, no state, vectorisable
//                      (emulated gradients and per-element noise)
#pragma once

#include <cmath>
#include <cstdint>

#include "core/hd.hpp"
#include "kernels/elementwise.hpp"  // kernels::mix32

namespace gradsync::train {

// splitmix64's finaliser: a bijective 64-bit mixer with good avalanche. GS_HD (like
// hash32 and hash_uniform_pm1): the GPU trainer's kernels draw the same numbers.
GS_HD std::uint64_t fmix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// A key from several integers: order matters, mix64(a, b) != mix64(b, a).
inline std::uint64_t mix64(std::uint64_t a) { return fmix64(a + 0x9e3779b97f4a7c15ULL); }
template <typename... Rest>
std::uint64_t mix64(std::uint64_t a, std::uint64_t b, Rest... rest) {
  return mix64(fmix64(a + 0x9e3779b97f4a7c15ULL) ^ b, static_cast<std::uint64_t>(rest)...);
}

// Sequential generator (Steele, Lea, Flood 2014). Not thread-safe; one per user.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    state_ += 0x9e3779b97f4a7c15ULL;
    return fmix64(state_);
  }
  // Uniform in [0, n) without modulo bias worth mentioning (Lemire's multiply-shift; the
  // bias is < n / 2^64).
  std::uint64_t below(std::uint64_t n) {
    return static_cast<std::uint64_t>((static_cast<unsigned __int128>(next()) * n) >> 64);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Standard normal (Box-Muller; one value per call, the pair's second is dropped for
  // simplicity — this is not on a hot path).
  double normal() {
    double u1 = uniform();
    while (u1 <= 0.0) u1 = uniform();
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  std::uint64_t state_;
};

// Counter-based 32-bit hash (murmur3's fmix32 of key ^ i*golden): stateless, so loops over
// i vectorise and any element can be produced independently.
GS_HD std::uint32_t hash32(std::uint32_t key, std::uint32_t i) { return kernels::mix32((i * 0x9e3779b1u) ^ key); }

// hash32 mapped to a float uniform in [-1, 1).
GS_HD float hash_uniform_pm1(std::uint32_t key, std::uint32_t i) {
  return static_cast<float>(static_cast<std::int32_t>(hash32(key, i))) * 0x1.0p-31f;
}

}  // namespace gradsync::train
