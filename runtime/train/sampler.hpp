// gradsync/train/sampler.hpp — PyTorch DistributedSampler semantics (shuffle, drop the tail).
//
// Epoch e uses one permutation of the M training indices, drawn from (seed, e) — the same
// on every rank. Rank r of N takes positions r, r+N, r+2N, ... of it, and every rank takes
// exactly floor(M / N) samples (the tail is dropped), so all ranks run the same number of
// batches. Batch b of rank r with batch size B is its positions [b*B, (b+1)*B), i.e.
// permutation positions N*(b*B + j) + r. Together the N ranks' batch b is exactly
// permutation positions [b*N*B, (b+1)*N*B): the batch one rank with batch N*B would take,
// which is what makes N x B equivalent to 1 x N*B.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace gradsync::train {

// The permutation of [0, m) for an epoch (Fisher-Yates over SplitMix64(seed, epoch)).
std::vector<std::int64_t> epoch_permutation(std::int64_t m, std::uint64_t seed, std::int64_t epoch);

class DistributedSampler {
 public:
  DistributedSampler(std::int64_t dataset_size, int nranks, int rank, std::uint64_t seed);

  std::int64_t samples_per_rank() const { return m_ / nranks_; }
  // Writes the dataset indices of this rank's `count` samples starting at position `first`
  // of its share of `epoch`. Thread-safe (the loader's workers call it concurrently).
  void indices(std::int64_t epoch, std::int64_t first, std::int64_t count, std::int64_t* out) const;

 private:
  std::shared_ptr<const std::vector<std::int64_t>> permutation(std::int64_t epoch) const;

  std::int64_t m_;
  int nranks_, rank_;
  std::uint64_t seed_;
  // The last two epochs' permutations (workers may straddle an epoch boundary).
  mutable std::mutex mu_;
  mutable std::int64_t cached_epoch_[2] = {-1, -1};
  mutable std::shared_ptr<const std::vector<std::int64_t>> cached_[2];
};

}  // namespace gradsync::train
