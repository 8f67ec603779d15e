// CPU top-k by magnitude (the topk compressor): the true k largest |x[i]|, exactly k of
// them, ties at the threshold taken in index order, returned in increasing index order.
//
// Approach (a radix-select on the magnitude bits, which order like |x| for non-NaN values):
//   1. histogram of the top 12 bits of magnitude_key(x) (4096 bins, L1-resident);
//   2. walking the bins from the top finds the bin B holding the k-th largest key and the
//      number `above` of keys in higher bins;
//   3. the keys of bin B are gathered and std::nth_element finds the (k - above)-th largest
//      among them: the threshold t;
//   4. one pass emits every i with key > t, and the first (k - #{key > t}) with key == t.
// Three passes over the input, O(n) whatever the distribution; step 3 works on one bin only.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/error.hpp"
#include "kernels/cpu_kernels.hpp"

namespace gradsync::kernels {

namespace {
constexpr int kHistBits = 12;
constexpr int kShift = 31 - kHistBits;  // keys are < 2^31
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
  const std::size_t need = k - above;  // 1 <= need <= cand.size()
  std::nth_element(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(need - 1), cand.end(),
                   std::greater<std::uint32_t>());
  const std::uint32_t t = cand[need - 1];
  std::size_t greater = above;
  for (const std::uint32_t c : cand) greater += c > t;
  std::size_t ties = k - greater;  // how many keys equal to t to take, in index order
  // 4. gather
  std::size_t out = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t key = magnitude_key(x[i]);
    if (key > t || (key == t && ties > 0)) {
      if (key == t) --ties;
      idx[out] = static_cast<std::int32_t>(i);
      vals[out] = x[i];
      ++out;
    }
  }
  GS_CHECK_EQ(out, k, "top-k gathered a wrong count");
}

void scatter_add(const std::int32_t* idx, const float* vals, std::size_t k, float scale, float* out) {
  for (std::size_t j = 0; j < k; ++j) out[idx[j]] += vals[j] * scale;
}

}  // namespace gradsync::kernels
