// gradsync/train/sampler.cpp — see sampler.hpp.
#include "train/sampler.hpp"

#include <numeric>
#include <utility>

#include "core/error.hpp"
#include "train/rng.hpp"

namespace gradsync::train {

std::vector<std::int64_t> epoch_permutation(std::int64_t m, std::uint64_t seed, std::int64_t epoch) {
  std::vector<std::int64_t> p(static_cast<std::size_t>(m));
  std::iota(p.begin(), p.end(), std::int64_t{0});
  SplitMix64 rng(mix64(seed, 0x5a4dULL, static_cast<std::uint64_t>(epoch)));
  for (std::int64_t i = m - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(i + 1)));
    std::swap(p[static_cast<std::size_t>(i)], p[static_cast<std::size_t>(j)]);
  }
  return p;
}

DistributedSampler::DistributedSampler(std::int64_t dataset_size, int nranks, int rank, std::uint64_t seed)
    : m_(dataset_size), nranks_(nranks), rank_(rank), seed_(seed) {
  GS_CHECK(nranks > 0 && rank >= 0 && rank < nranks, "sampler: bad rank ", rank, " of ", nranks);
  GS_USAGE_CHECK(dataset_size >= nranks, "the data set has ", dataset_size, " samples, fewer than the ", nranks,
                 " ranks");
}

std::shared_ptr<const std::vector<std::int64_t>> DistributedSampler::permutation(std::int64_t epoch) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (int i = 0; i < 2; ++i)
    if (cached_epoch_[i] == epoch) return cached_[i];
  // Computed under the lock: workers asking for the same new epoch wait instead of all
  // computing it. Replaces the older of the two entries.
  const int slot = cached_epoch_[0] < cached_epoch_[1] ? 0 : 1;
  cached_[slot] = std::make_shared<const std::vector<std::int64_t>>(epoch_permutation(m_, seed_, epoch));
  cached_epoch_[slot] = epoch;
  return cached_[slot];
}

void DistributedSampler::indices(std::int64_t epoch, std::int64_t first, std::int64_t count, std::int64_t* out) const {
  GS_CHECK(first >= 0 && first + count <= samples_per_rank(), "sampler: positions [", first, ", ", first + count,
           ") outside this rank's ", samples_per_rank(), " samples");
  const auto perm = permutation(epoch);
  for (std::int64_t j = 0; j < count; ++j)
    out[j] = (*perm)[static_cast<std::size_t>((first + j) * nranks_ + rank_)];
}

}  // namespace gradsync::train
