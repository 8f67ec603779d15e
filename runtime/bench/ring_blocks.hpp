// gradsync/bench/ring_blocks.hpp — the ring phases of algos/ring.hpp laid out for the
// reduce-scatter / allgather benchmarks, where rank j's segment is the contiguous block
// [j*block, (j+1)*block) of an n-block buffer. With K channels, ring c takes slice c of
// every block (slices differ by at most one element), so each channel still moves
// (n-1)/n of its slice and rank j's result stays contiguous.
#pragma once

#include <vector>

#include "algos/detail.hpp"
#include "algos/ring.hpp"

namespace gradsync::bench {

class RingBlocks {
 public:
  explicit RingBlocks(int channels) : rings_(static_cast<std::size_t>(channels)) {}

  // The rings for n blocks of `block` elements (kept between calls: no allocation after the
  // first call of a size).
  const std::vector<RingSegments>& layout(int nranks, std::size_t block) {
    const std::size_t k = rings_.size();
    for (std::size_t c = 0; c < k; ++c) {
      const algos::Span slice = algos::balanced_part(block, k, c);
      RingSegments& ring = rings_[c];
      ring.offset.resize(static_cast<std::size_t>(nranks));
      ring.count.resize(static_cast<std::size_t>(nranks));
      for (std::size_t j = 0; j < static_cast<std::size_t>(nranks); ++j) {
        ring.offset[j] = j * block + slice.offset;
        ring.count[j] = slice.count;
      }
    }
    return rings_;
  }
  RingWorkspace& workspace() { return ws_; }

 private:
  std::vector<RingSegments> rings_;
  RingWorkspace ws_;
};

}  // namespace gradsync::bench
