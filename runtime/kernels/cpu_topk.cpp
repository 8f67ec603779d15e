// CPU top-k by magnitude (the topk compressor): the true k largest |x[i]|, exactly k of
// them, ties at the threshold taken in index order, returned in increasing index order.
//
// Purpose: topk_select (selection alone) and topk_encode_ef (the compressor's encoder with
// error feedback: x += memory; select; memory = x - sparse(x)).
//
// Approach of topk_select (a radix-select on the magnitude bits, which order like |x| for
// non-NaN values):
//   1. histogram of the top 12 bits of magnitude_key(x) (4096 bins, L1-resident);
//   2. walking the bins from the top finds the bin B holding the k-th largest key and the
//      number `above` of keys in higher bins;
//   3. the keys of bin B are gathered and std::nth_element finds the (k - above)-th largest
//      among them: the threshold t;
//   4. one pass emits every i with key > t, and the first (k - #{key > t}) with key == t.
// Three passes over the input, O(n) whatever the distribution; step 3 works on one bin only.
//
// Approach of topk_encode_ef (sampled bound, exact result; the sampling idea of Deep
// Gradient Compression, Lin et al. 2018, made exact):
//   1. a lower bound b on the k-th largest key, from a random sample of s positions of
//      c = x + memory: the r-th largest sampled key with r = e + 5 sqrt(e) + 2 above the
//      expected e = s k / n, so that P(fewer than k keys >= b) is about 3e-7 for any
//      distribution of values (ties only make the candidate set larger);
//   2. ONE pass over memory: c = x + memory is written to x and to memory, and every i
//      with key(c) >= b is appended (index, value) to a candidate list, in index order
//      (AVX-512: compare + vpcompressd; AVX2: compare + movemask, then the set bits);
//   3. if there are at least k candidates (and not more than the list holds), every key
//      outside the list is < b, so the top k are the top k of the list: nth_element on the
//      candidate keys gives the threshold t, and one walk over the list emits key > t and
//      the first (k - #{key > t}) with key == t, in index order, as in topk_select;
//   4. otherwise (a sample that misled, or a distribution with huge ties such as all equal)
//      x and memory already hold c: topk_select on x, the exact path above;
//   5. memory[idx[j]] += vals[j] * -1 (scatter_add, as the unfused encoder does: +0 for
//      finite values, NaN for inf/NaN, bit for bit the same).
// Memory streams: read x, read memory, write x, write memory (plus ~1.3 k candidates),
// against add + 3 radix passes + copy (~8 streams) for the composition of the kernels.
// Key optimisations: the candidate test is one integer compare on the magnitude bits; the
// candidate list is written with unconditional full-vector stores (no branch per vector);
// no allocation touches O(n) memory.
// Use case: TopkCompressor::encode_on on host buckets (compress/topk.cpp through
// BucketKernels::topk_encode_ef). Exactness does not depend on the sample: the sample only
// decides how fast.
//
// Measured 2026-12-01 on the 2-core development VM (Intel AVX-512, L3 480 MiB; memcpy
// 12.98 GB/s at 16 MiB, 6.87 GB/s at 64 MiB), medians of 3, top 1%, with
// `gradsync-kernels-bench --benchmark_filter='(memcpy|qsgd_encode|onebit_encode|topk_encode)/MiB:(16|64)'
// --benchmark_min_time=1 --benchmark_repetitions=3 --benchmark_report_aggregates_only=true`:
//   topk_encode 16 MiB: 1.43 GB/s (0.11x memcpy) as the composition -> 6.16 GB/s (0.47x)
//   topk_encode 64 MiB: 0.81 GB/s (0.12x memcpy) as the composition -> 3.81 GB/s (0.55x)
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "kernels/cpu_target.hpp"

namespace gradsync::kernels {

namespace {
constexpr int kHistBits = 12;
constexpr int kShift = 31 - kHistBits;  // keys are < 2^31

// ---- topk_encode_ef: tuning of the sampled bound (none of it affects the result) ---------
constexpr std::size_t kSampledMinN = 4096;     // below: the exact path (sampling would not pay)
constexpr double kSampleHits = 256;            // sampled keys expected above the threshold
constexpr std::size_t kSampleMin = 1024;       // sample size bounds
constexpr std::size_t kSampleMax = 65536;
constexpr double kSampleSigmas = 5;            // margin of the bound, in binomial sigmas
constexpr std::size_t kCandidateBlock = 4096;  // the list's fill is checked once per block
constexpr std::uint32_t kNoBound = 0xffffffffu;  // above every key: collect nothing

// ---- the fused pass: c = x + m to x and m; collect key(c) >= bound -----------------------
// Elements [begin, end): returns the new candidate count. The list holds at least
// count + (end - begin) entries.
GS_ALWAYS_INLINE std::size_t fused_span_scalar(float* x, float* m, std::size_t begin, std::size_t end,
                                               std::uint32_t bound, std::int32_t* cidx, float* cval,
                                               std::size_t count) {
  for (std::size_t i = begin; i < end; ++i) {
    const float c = x[i] + m[i];
    x[i] = c;
    m[i] = c;
    // unconditional store, conditional advance (branch-free)
    cidx[count] = static_cast<std::int32_t>(i);
    cval[count] = c;
    count += magnitude_key(c) >= bound;
  }
  return count;
}

std::size_t fused_scalar(float* x, float* m, std::size_t begin, std::size_t end, std::uint32_t bound,
                         std::int32_t* cidx, float* cval, std::size_t count) {
  return fused_span_scalar(x, m, begin, end, bound, cidx, cval, count);
}

GS_TARGET_AVX2 std::size_t fused_avx2(float* x, float* m, std::size_t begin, std::size_t end, std::uint32_t bound,
                                      std::int32_t* cidx, float* cval, std::size_t count) {
  // keys < 2^31 and bound <= 2^32-1: compare as signed after flipping the top bit of both
  const __m256i flip = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  const __m256i absmask = _mm256_set1_epi32(0x7fffffff);
  const __m256i below = _mm256_set1_epi32(static_cast<int>((bound - 1u) ^ 0x80000000u));  // key > bound-1
  std::size_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const __m256 c = _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(m + i));
    _mm256_storeu_ps(x + i, c);
    _mm256_storeu_ps(m + i, c);
    const __m256i key = _mm256_xor_si256(_mm256_and_si256(_mm256_castps_si256(c), absmask), flip);
    unsigned hit = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(key, below))));
    if (bound == 0) hit = 0xffu;  // bound - 1 wrapped: every key qualifies
    while (hit) {
      const int j = std::countr_zero(hit);
      hit &= hit - 1;
      cidx[count] = static_cast<std::int32_t>(i + static_cast<std::size_t>(j));
      cval[count] = x[i + static_cast<std::size_t>(j)];
      ++count;
    }
  }
  return fused_span_scalar(x, m, i, end, bound, cidx, cval, count);
}

GS_TARGET_AVX512 std::size_t fused_avx512(float* x, float* m, std::size_t begin, std::size_t end,
                                          std::uint32_t bound, std::int32_t* cidx, float* cval, std::size_t count) {
  const __m512i absmask = _mm512_set1_epi32(0x7fffffff);
  const __m512i vbound = _mm512_set1_epi32(static_cast<int>(bound));
  const __m512i step = _mm512_set1_epi32(16);
  __m512i index = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(begin)),
                                   _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  std::size_t i = begin;
  for (; i + 16 <= end; i += 16) {
    const __m512 c = _mm512_add_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(m + i));
    _mm512_storeu_ps(x + i, c);
    _mm512_storeu_ps(m + i, c);
    const __mmask16 hit = _mm512_cmpge_epu32_mask(_mm512_and_si512(_mm512_castps_si512(c), absmask), vbound);
    // compress in registers, then full-width stores (the list has room for them)
    _mm512_storeu_si512(cidx + count, _mm512_maskz_compress_epi32(hit, index));
    _mm512_storeu_ps(cval + count, _mm512_maskz_compress_ps(hit, c));
    count += static_cast<std::size_t>(std::popcount(static_cast<unsigned>(hit)));
    index = _mm512_add_epi32(index, step);
  }
  return fused_span_scalar(x, m, i, end, bound, cidx, cval, count);
}

std::size_t fused_pass(float* x, float* m, std::size_t begin, std::size_t end, std::uint32_t bound,
                       std::int32_t* cidx, float* cval, std::size_t count, Isa isa) {
  switch (isa) {
    case Isa::Avx512:
      return fused_avx512(x, m, begin, end, bound, cidx, cval, count);
    case Isa::Avx2:
      return fused_avx2(x, m, begin, end, bound, cidx, cval, count);
    case Isa::Scalar:
      break;
  }
  return fused_scalar(x, m, begin, end, bound, cidx, cval, count);
}

// The cut of a top-k among candidate keys: the k-th largest key t and how many keys equal
// to t the top k take, ties in index order. `keys` holds every key >= t except the `above`
// keys known to be larger (topk_select: the threshold's histogram bin; topk_encode_ef: all
// candidates, above = 0); `need` = k - above (>= 1, <= keys.size()).
struct Cut {
  std::uint32_t t = 0;
  std::size_t ties = 0;
  // Walked over the keys in index order: whether this one is among the top k.
  bool take(std::uint32_t key) {
    if (key > t) return true;
    if (key != t || ties == 0) return false;
    --ties;
    return true;
  }
};

Cut cut_at(std::vector<std::uint32_t> keys, std::size_t need, std::size_t above, std::size_t k) {
  std::nth_element(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(need - 1), keys.end(),
                   std::greater<std::uint32_t>());
  Cut c;
  c.t = keys[need - 1];
  std::size_t greater = above;
  for (const std::uint32_t key : keys) greater += key > c.t;
  c.ties = k - greater;
  return c;
}

// The sampled lower bound of step 1 (kNoBound when sampling cannot pay: small n, large k).
std::uint32_t sampled_bound(const float* x, const float* m, std::size_t n, std::size_t k) {
  if (n < kSampledMinN || k > n / 8) return kNoBound;
  const double q = static_cast<double>(k) / static_cast<double>(n);
  const auto s = std::clamp<std::size_t>(static_cast<std::size_t>(std::ceil(kSampleHits / q)), kSampleMin,
                                         std::min(kSampleMax, n / 4));
  const double e = static_cast<double>(s) * q;
  const auto r = static_cast<std::size_t>(std::ceil(e + kSampleSigmas * std::sqrt(e) + 2));
  if (r >= s) return kNoBound;
  std::vector<std::uint32_t> keys(s);
  const RngKey key{0x9e3779b9u, 0x7f4a7c15u};  // fixed: the sample decides speed, not results
  for (std::size_t j = 0; j < s; ++j) {
    const std::size_t pos = static_cast<std::size_t>((std::uint64_t{rng_bits(key, j)} * n) >> 32);
    keys[j] = magnitude_key(x[pos] + m[pos]);
  }
  std::nth_element(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(r - 1), keys.end(),
                   std::greater<std::uint32_t>());
  return keys[r - 1];
}

}  // namespace

void topk_select(const float* x, std::size_t n, std::size_t k, std::int32_t* idx, float* vals) {
  GS_CHECK(k <= n, "top-k asked for ", k, " of ", n, " elements");
  GS_CHECK(n <= static_cast<std::size_t>(INT32_MAX), "top-k indices are int32; ", n, " elements is too many");
  if (k == 0) return;
  if (k == n) {
    for (std::size_t i = 0; i < n; ++i) {
      idx[i] = static_cast<std::int32_t>(i);
      vals[i] = x[i];
    }
    return;
  }
  // 1. histogram
  std::vector<std::uint32_t> hist(std::size_t{1} << kHistBits, 0);
  for (std::size_t i = 0; i < n; ++i) ++hist[magnitude_key(x[i]) >> kShift];
  // 2. the bin of the k-th largest
  std::size_t above = 0;
  std::uint32_t bin = static_cast<std::uint32_t>(hist.size() - 1);
  for (;; --bin) {
    if (above + hist[bin] >= k) break;
    above += hist[bin];
  }
  // 3. threshold inside the bin
  std::vector<std::uint32_t> cand;
  cand.reserve(hist[bin]);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t key = magnitude_key(x[i]);
    if ((key >> kShift) == bin) cand.push_back(key);
  }
  Cut cut = cut_at(std::move(cand), k - above, above, k);  // 1 <= k - above <= cand.size()
  // 4. gather
  std::size_t out = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (cut.take(magnitude_key(x[i]))) {
      idx[out] = static_cast<std::int32_t>(i);
      vals[out] = x[i];
      ++out;
    }
  }
  GS_CHECK_EQ(out, k, "top-k gathered a wrong count");
}

namespace detail {

TopkPath topk_encode_ef_bound(float* x, float* memory, std::size_t n, std::size_t k, std::int32_t* idx, float* vals,
                              std::uint32_t bound, Isa isa) {
  GS_CHECK(k <= n, "top-k asked for ", k, " of ", n, " elements");
  GS_CHECK(n <= static_cast<std::size_t>(INT32_MAX), "top-k indices are int32; ", n, " elements is too many");
  const Isa use = resolve(isa);
  // The candidate list: room for `cap` candidates plus one block's worth of overshoot.
  // Uninitialised (new T[]), so its pages are touched only as far as it fills.
  const std::size_t cap = bound == kNoBound || k == 0 ? 0 : std::min(n, 2 * k + kCandidateBlock);
  const std::size_t room = bound == kNoBound || k == 0 ? kCandidateBlock : cap + kCandidateBlock;
  std::unique_ptr<std::int32_t[]> cidx(new std::int32_t[room]);
  std::unique_ptr<float[]> cval(new float[room]);
  std::size_t count = 0;
  std::uint32_t collect = bound == kNoBound || k == 0 ? kNoBound : bound;
  for (std::size_t b = 0; b < n; b += kCandidateBlock) {
    const std::size_t e = std::min(n, b + kCandidateBlock);
    if (collect == kNoBound) count = 0;  // not collecting: the list is only a write sink
    count = fused_pass(x, memory, b, e, collect, cidx.get(), cval.get(), count, use);
    if (collect != kNoBound && count > cap) collect = kNoBound;  // list full: too many ties below
  }
  const bool sampled = collect != kNoBound && count >= k;
  if (!sampled) {
    topk_select(x, n, k, idx, vals);  // x holds c: the exact path
  } else if (k > 0) {
    std::vector<std::uint32_t> keys(count);
    for (std::size_t j = 0; j < count; ++j) keys[j] = magnitude_key(cval[j]);
    Cut cut = cut_at(std::move(keys), k, 0, k);
    std::size_t out = 0;
    for (std::size_t j = 0; j < count; ++j) {
      if (cut.take(magnitude_key(cval[j]))) {
        idx[out] = cidx[j];
        vals[out] = cval[j];
        ++out;
      }
    }
    GS_CHECK_EQ(out, k, "top-k gathered a wrong count");
  }
  scatter_add(idx, vals, k, -1.f, memory);  // memory[idx] = c - c
  return sampled ? TopkPath::Sampled : TopkPath::Exact;
}

}  // namespace detail

TopkPath topk_encode_ef(float* x, float* memory, std::size_t n, std::size_t k, std::int32_t* idx, float* vals,
                        Isa isa) {
  GS_CHECK(k <= n, "top-k asked for ", k, " of ", n, " elements");
  return detail::topk_encode_ef_bound(x, memory, n, k, idx, vals, sampled_bound(x, memory, n, k), isa);
}

void scatter_add(const std::int32_t* idx, const float* vals, std::size_t k, float scale, float* out) {
  for (std::size_t j = 0; j < k; ++j) out[idx[j]] += vals[j] * scale;
}

}  // namespace gradsync::kernels
