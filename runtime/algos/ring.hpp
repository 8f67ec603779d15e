// gradsync/algos/ring.hpp — the ring reduce-scatter and allgather phases as free
// functions over variable-size segments, shared by the ring all-reduce, the hierarchical
// all-reduce and the benchmark.
//
// A "ring" here is a partition of (part of) a buffer into comm.size() segments; segment j
// belongs to rank j. Several rings (channels) on disjoint parts of the buffer run at once:
// their non-blocking steps are posted together and progressed by one wait, each channel
// on its own tag. Every per-step segment is cut into chunks of at most `chunk_bytes`, and
// up to kPipelineSlots chunks are in flight, so the transfer of chunk k+1 overlaps the
// reduction of chunk k (the NCCL_BUFFSIZE analog).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "algos/detail.hpp"
#include "comm/communicator.hpp"
#include "core/dtype.hpp"

namespace gradsync {

// Segment j (j = 0..p-1, the rank that owns it) covers elements
// [offset[j], offset[j] + count[j]) of the buffers. Segments may be empty.
struct RingSegments {
  std::vector<std::size_t> offset;
  std::vector<std::size_t> count;

  // Elements [begin, begin + n) cut into `parts` contiguous segments whose sizes differ by
  // at most one (the larger ones first).
  static RingSegments balanced(std::size_t begin, std::size_t n, int parts);
  // Re-fill in place (keeps the vectors' capacity; for per-call layouts).
  void assign_balanced(std::size_t begin, std::size_t n, int parts);
  std::size_t max_count() const;
};

// Memory the ring phases reuse across calls: slots for received chunks and the request
// windows. Owned by the caller (one per algorithm instance); grows lazily, never per chunk.
class RingWorkspace {
 public:
  RingWorkspace() = default;
  RingWorkspace(const RingWorkspace&) = delete;
  RingWorkspace& operator=(const RingWorkspace&) = delete;

 private:
  friend class RingPhase;
  algos::Scratch slots_;
  std::vector<Request> recvs_;
  algos::RequestWindow sends_;
};

// Reduce-scatter (sum). On return, for every ring, recvbuf's segment comm.rank() holds the
// sum over all ranks of sendbuf's segment comm.rank(). Other segments of recvbuf are left
// with partial sums (scratch). sendbuf is never written; sendbuf == recvbuf is allowed.
// With one rank it copies the rank's segments when out of place.
// Tags used: tag_base + channel index.
// Cost per ring with n elements: (p-1) alpha-steps (times the chunks per step) + (p-1)/p n beta
// + (p-1)/p n gamma.
void ring_reduce_scatter(Communicator& comm, const void* sendbuf, void* recvbuf, std::span<const RingSegments> rings,
                         DType t, std::size_t chunk_bytes, int tag_base, RingWorkspace& ws);

// Allgather, in place: on entry every rank holds its own segment (segment comm.rank()) of
// each ring in buf; on return buf holds every segment of every ring.
// Tags used: tag_base + channel index. Cost: (p-1) alpha-steps + (p-1)/p n beta.
void ring_allgather(Communicator& comm, void* buf, std::span<const RingSegments> rings, DType t,
                    std::size_t chunk_bytes, int tag_base, RingWorkspace& ws);

// The ring phases laid out for buffers of n contiguous blocks, rank j's segment being block
// j, [j*block, (j+1)*block): the reduce-scatter / all-gather benchmarks and the
// compressors' all-gathers (compress/collectives.hpp). With K channels, ring c takes slice c
// of every block (slices differ by at most one element), so each channel still moves (n-1)/n
// of its slice and rank j's result stays contiguous.
class RingBlocks {
 public:
  explicit RingBlocks(int channels = 1) : rings_(static_cast<std::size_t>(channels)) {}

  // The rings for n blocks of `block` elements (kept between calls: no allocation after the
  // first call of a size).
  const std::vector<RingSegments>& layout(int nranks, std::size_t block);
  RingWorkspace& workspace() { return ws_; }

  // All-gather of `block` elements of t per rank into recv (n blocks, block j from rank j):
  // this rank's block is copied into place from send (nothing to copy when send already is
  // that block: in place), then ring_allgather moves the others. Tags tag_base + channel.
  void allgather(Communicator& comm, const void* send, void* recv, std::size_t block, DType t,
                 std::size_t chunk_bytes, int tag_base);

 private:
  std::vector<RingSegments> rings_;
  RingWorkspace ws_;
};

// Single-ring conveniences.
inline void ring_reduce_scatter(Communicator& comm, const void* sendbuf, void* recvbuf, const RingSegments& ring,
                                DType t, std::size_t chunk_bytes, int tag_base, RingWorkspace& ws) {
  ring_reduce_scatter(comm, sendbuf, recvbuf, std::span<const RingSegments>(&ring, 1), t, chunk_bytes, tag_base, ws);
}
inline void ring_allgather(Communicator& comm, void* buf, const RingSegments& ring, DType t,
                           std::size_t chunk_bytes, int tag_base, RingWorkspace& ws) {
  ring_allgather(comm, buf, std::span<const RingSegments>(&ring, 1), t, chunk_bytes, tag_base, ws);
}

}  // namespace gradsync
