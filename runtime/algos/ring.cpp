// ring.cpp — ring all-reduce: reduce-scatter then allgather around a ring, chunked,
// pipelined, over K concurrent channels.
//
// Purpose: the bandwidth-optimal all-reduce for large messages (Patarasuk & Yuan 2009; the
//   algorithm behind NCCL's and Horovod's ring). Every rank sends and receives exactly
//   2 (p-1)/p of the vector, whatever p is, and only talks to its two ring neighbours.
//
// Approach: the vector is cut into p segments; segment j ends up owned by rank j.
//   reduce-scatter, steps s = 0..p-2: send segment (r-s-1) to the right neighbour, receive
//     segment (r-s-2) from the left and add our own contribution to it. The segment sent
//     at step s is the one completed at step s-1, so after p-1 steps rank r holds the full
//     sum of segment r.
//   allgather, steps s = 0..p-2: send segment (r-s) right, receive segment (r-s-1) from the
//     left straight into the result buffer.
//   Chunking and pipelining: every per-step segment is cut into C chunks of at most
//     chunk_bytes. The unit of work is (step, chunk); receives run up to pipeline_slots(chunk)
//     units ahead (4, or 1 MiB worth of small chunks) into a ring of slots, and a unit's send
//     is posted as soon as the data it carries is final, so the transfer of chunk k+1 is on the wire while chunk k is reduced.
//   Channels: K rings on K disjoint slices of the buffer, each with its own tag, advanced in
//     lockstep: the receives of all channels for a unit are completed by one wait_all and
//     their sends posted together, so the K transfers are in flight at once (the analog of
//     NCCL_NSOCKS_PERTHREAD / Open MPI btl_tcp_links: more connections per peer).
//
// Chunk (choose_chunk() in chunk.cpp, unless --chunk-bytes / GRADSYNC_CHUNK_BYTES is set):
//   between nodes over Open MPI's TCP BTL, the largest power of two below btl_tcp_eager_limit
//   (32 KiB for the default 64 KiB) so that no chunk waits for a rendezvous handshake; on one
//   node 4 MiB. Measured 2026-12-01 on the 1 Gbit/s testbed, one connection per peer, busy
//   machine: 2 hosts, 64 MiB: 99.8 MB/s busbw with 32 KiB chunks, 56.6 with 4 MiB, Open MPI's
//   all-reduce 74.1; 3 hosts: 102.0 vs 106.3 vs 34.3 (README "Measured defaults").
//
// Key optimisations: no copy of the input: out of place, the reduction writes
//   recv = send + incoming directly (reduce_out), and the first step sends straight from the
//   send buffer. Avg scales only the owned segment (1/p of the work) before the allgather.
//   Slots and request windows live in a RingWorkspace reused across calls.
//
// Cost (alpha-beta-gamma, n bytes, p ranks, C chunks per step):
//   T = 2 (p-1) A alpha + 2 (p-1)/p n beta + (p-1)/p n gamma, pipelining hiding most of the
//   gamma term behind the transfers. A = C on one node (the ranks' own per-message work);
//   between nodes the W = pipeline_slots chunks in flight share one network latency:
//   A = 1 + (C-1)/W (netmodel/collectives.hpp prices it so).
//
// Use case: large gradient buckets (MiB and up), any rank count; the reference algorithm
//   every other one is measured against.
#include "algos/ring.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "algos/algorithms.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/reduce.hpp"

namespace gradsync {

using algos::at;
using algos::mod;
using algos::Span;

// ---- segments --------------------------------------------------------------------------

void RingSegments::assign_balanced(std::size_t begin, std::size_t n, int parts) {
  offset.resize(static_cast<std::size_t>(parts));
  count.resize(static_cast<std::size_t>(parts));
  for (int j = 0; j < parts; ++j) {
    const Span s = algos::balanced_part(n, static_cast<std::size_t>(parts), static_cast<std::size_t>(j));
    offset[static_cast<std::size_t>(j)] = begin + s.offset;
    count[static_cast<std::size_t>(j)] = s.count;
  }
}

RingSegments RingSegments::balanced(std::size_t begin, std::size_t n, int parts) {
  RingSegments r;
  r.assign_balanced(begin, n, parts);
  return r;
}

std::size_t RingSegments::max_count() const {
  std::size_t m = 0;
  for (std::size_t c : count) m = std::max(m, c);
  return m;
}

// ---- the two phases ------------------------------------------------------------------------

// Geometry shared by both phases: who the neighbours are, how segments are cut into chunks
// and how (step, chunk) units map to slots.
class RingPhase {
 public:
  RingPhase(Communicator& comm, std::span<const RingSegments> rings, DType t, std::size_t chunk_bytes, int tag_base,
            RingWorkspace& ws)
      : comm_(comm), rings_(rings), t_(t), esz_(dtype_size(t)), tag_base_(tag_base), ws_(ws) {
    p_ = comm.size();
    r_ = comm.rank();
    right_ = mod(r_ + 1, p_);
    left_ = mod(r_ - 1, p_);
    K_ = rings.size();
    std::size_t n_max = 0;
    for (const auto& ring : rings) {
      GS_CHECK(ring.offset.size() == static_cast<std::size_t>(p_) && ring.count.size() == static_cast<std::size_t>(p_),
               "ring layout has ", ring.count.size(), " segments for ", p_, " ranks");
      n_max = std::max(n_max, ring.max_count());
    }
    // Every segment of every ring is cut into the same number of chunks C, so all channels
    // advance through the same (step, chunk) units; no chunk exceeds chunk_bytes (0: the
    // transport-aware default, the same on every rank).
    if (chunk_bytes == 0) chunk_bytes = algos::choose_chunk(comm, AlgoOptions{}).bytes;
    const std::size_t chunk_elems = std::max<std::size_t>(1, chunk_bytes / esz_);
    C_ = std::max<std::size_t>(1, algos::ceil_div(n_max, chunk_elems));
    slot_elems_ = algos::ceil_div(n_max, C_);
    depth_ = algos::pipeline_slots(slot_elems_ * esz_);
    U_ = static_cast<std::size_t>(p_ - 1) * C_;
    empty_ = n_max == 0;
  }

  // See ring_reduce_scatter() in ring.hpp.
  void reduce_scatter(const void* sendbuf, void* recvbuf) {
    if (p_ == 1) {
      for (const auto& ring : rings_)
        algos::copy_if_out_of_place(at(sendbuf, ring.offset[0], esz_), at(recvbuf, ring.offset[0], esz_),
                                    ring.count[0] * esz_);
      return;
    }
    if (empty_) return;
    const std::size_t D = std::min(depth_, U_);  // receive slots per channel
    char* slots = static_cast<char*>(ws_.slots_.get(D * K_ * slot_elems_ * esz_));
    auto slot = [&](std::size_t u, std::size_t c) { return slots + ((u % D) * K_ + c) * slot_elems_ * esz_; };
    prepare_requests(D, C_ + D);

    // Unit u = (step s, chunk k): receive chunk k of segment (r-s-2) from the left into a slot.
    auto post_recv = [&](std::size_t u) {
      const int seg = mod(r_ - static_cast<int>(u / C_) - 2, p_);
      for (std::size_t c = 0; c < K_; ++c) {
        const Span ch = chunk(c, seg, u % C_);
        if (ch.count > 0)
          ws_.recvs_[(u % D) * K_ + c] = comm_.irecv(slot(u, c), ch.count * esz_, left_, tag(c));
      }
    };
    // ... and send chunk k of segment (r-s-1) to the right: our own input at step 0, the
    // partial sum completed at step s-1 afterwards.
    auto post_send = [&](std::size_t u) {
      const std::size_t s = u / C_;
      const int seg = mod(r_ - static_cast<int>(s) - 1, p_);
      const void* src = s == 0 ? sendbuf : recvbuf;
      for (std::size_t c = 0; c < K_; ++c) {
        const Span ch = chunk(c, seg, u % C_);
        if (ch.count > 0) ws_.sends_.push(comm_.isend(at(src, ch.offset, esz_), ch.count * esz_, right_, tag(c)));
      }
    };

    for (std::size_t u = 0; u < D; ++u) post_recv(u);
    for (std::size_t u = 0; u < std::min(C_, U_); ++u) post_send(u);
    for (std::size_t u = 0; u < U_; ++u) {
      GS_LOG(TRACE) << "ring reduce-scatter: step " << u / C_ << " chunk " << u % C_ << " from rank " << left_;
      comm_.wait_all(&ws_.recvs_[(u % D) * K_], K_);
      const int seg = mod(r_ - static_cast<int>(u / C_) - 2, p_);
      for (std::size_t c = 0; c < K_; ++c) {
        const Span ch = chunk(c, seg, u % C_);
        if (ch.count > 0)
          reduce_out(at(recvbuf, ch.offset, esz_), at(sendbuf, ch.offset, esz_), slot(u, c), ch.count, t_);
      }
      if (u + D < U_) post_recv(u + D);  // the slot just consumed takes unit u+D
      if (u + C_ < U_) post_send(u + C_);  // the chunk just completed moves on next step
    }
    ws_.sends_.drain();
  }

  // See ring_allgather() in ring.hpp.
  void allgather(void* buf) {
    if (p_ == 1 || empty_) return;
    // Receives land in place, so the look-ahead costs no memory: keep one step plus the
    // pipeline depth posted.
    const std::size_t W = std::min(U_, C_ + depth_);
    prepare_requests(W, C_ + depth_);

    auto post_recv = [&](std::size_t u) {  // chunk k of segment (r-s-1) from the left
      const int seg = mod(r_ - static_cast<int>(u / C_) - 1, p_);
      for (std::size_t c = 0; c < K_; ++c) {
        const Span ch = chunk(c, seg, u % C_);
        if (ch.count > 0)
          ws_.recvs_[(u % W) * K_ + c] = comm_.irecv(at(buf, ch.offset, esz_), ch.count * esz_, left_, tag(c));
      }
    };
    auto post_send = [&](std::size_t u) {  // chunk k of segment (r-s) to the right
      const int seg = mod(r_ - static_cast<int>(u / C_), p_);
      for (std::size_t c = 0; c < K_; ++c) {
        const Span ch = chunk(c, seg, u % C_);
        if (ch.count > 0) ws_.sends_.push(comm_.isend(at(buf, ch.offset, esz_), ch.count * esz_, right_, tag(c)));
      }
    };

    for (std::size_t u = 0; u < W; ++u) post_recv(u);
    for (std::size_t u = 0; u < std::min(C_, U_); ++u) post_send(u);
    for (std::size_t u = 0; u < U_; ++u) {
      GS_LOG(TRACE) << "ring allgather: step " << u / C_ << " chunk " << u % C_ << " from rank " << left_;
      comm_.wait_all(&ws_.recvs_[(u % W) * K_], K_);
      if (u + W < U_) post_recv(u + W);
      if (u + C_ < U_) post_send(u + C_);  // forward what just arrived
    }
    ws_.sends_.drain();
  }

 private:
  int tag(std::size_t c) const { return tag_base_ + static_cast<int>(c); }

  // Chunk k of segment `seg` of ring c, in elements of the whole buffer.
  Span chunk(std::size_t c, int seg, std::size_t k) const {
    const auto j = static_cast<std::size_t>(seg);
    const Span part = algos::balanced_part(rings_[c].count[j], C_, k);
    return {rings_[c].offset[j] + part.offset, part.count};
  }

  // Receive slots for `units` units of K channels; a send window for `units_in_flight`.
  void prepare_requests(std::size_t units, std::size_t sends_in_flight) {
    if (ws_.recvs_.size() < units * K_) ws_.recvs_.resize(units * K_);
    ws_.sends_.reset(comm_, sends_in_flight * K_);
  }

  Communicator& comm_;
  std::span<const RingSegments> rings_;
  DType t_;
  std::size_t esz_;
  int tag_base_;
  RingWorkspace& ws_;
  int p_ = 1, r_ = 0, right_ = 0, left_ = 0;
  std::size_t K_ = 1, C_ = 1, slot_elems_ = 0, U_ = 0;
  std::size_t depth_ = algos::kPipelineSlots;  // units in flight (pipeline_slots of the chunk)
  bool empty_ = true;
};

void ring_reduce_scatter(Communicator& comm, const void* sendbuf, void* recvbuf, std::span<const RingSegments> rings,
                         DType t, std::size_t chunk_bytes, int tag_base, RingWorkspace& ws) {
  RingPhase(comm, rings, t, chunk_bytes, tag_base, ws).reduce_scatter(sendbuf, recvbuf);
}

void ring_allgather(Communicator& comm, void* buf, std::span<const RingSegments> rings, DType t,
                    std::size_t chunk_bytes, int tag_base, RingWorkspace& ws) {
  RingPhase(comm, rings, t, chunk_bytes, tag_base, ws).allgather(buf);
}

const std::vector<RingSegments>& RingBlocks::layout(int nranks, std::size_t block) {
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

void RingBlocks::allgather(Communicator& comm, const void* send, void* recv, std::size_t block, DType t,
                           std::size_t chunk_bytes, int tag_base) {
  const std::size_t bytes = block * dtype_size(t);
  char* mine = static_cast<char*>(recv) + static_cast<std::size_t>(comm.rank()) * bytes;
  if (bytes > 0 && send != mine) std::memcpy(mine, send, bytes);
  ring_allgather(comm, recv, std::span<const RingSegments>(layout(comm.size(), block)), t, chunk_bytes, tag_base,
                 ws_);
}

// ---- the all-reduce --------------------------------------------------------------------------

namespace {

class RingAllreduce final : public AllreduceAlgorithm {
 public:
  RingAllreduce(Communicator& comm, const AlgoOptions& opts)
      : comm_(comm), chunk_(algos::choose_chunk(comm, opts)), chunk_bytes_(chunk_.bytes), channels_(opts.channels) {
    rings_.resize(static_cast<std::size_t>(channels_));
    if (comm.rank() == 0) {
      GS_LOG(INFO) << "ring: " << comm.size() << " ranks, chunk " << chunk_bytes_ << " bytes (" << chunk_.reason
                   << "), " << channels_ << " channel(s)";
    }
  }

  std::string name() const override { return "ring"; }
  ChunkChoice chunk() const override { return chunk_; }

  void run(const void* sendbuf, void* recvbuf, std::size_t count, DType t, RedOp op) override {
    if (count == 0) return;
    const int p = comm_.size();
    if (p == 1) {
      algos::copy_if_out_of_place(sendbuf, recvbuf, count * dtype_size(t));
      return;
    }
    layout(count);
    ring_reduce_scatter(comm_, sendbuf, recvbuf, rings_, t, chunk_bytes_, algos::kTagRingReduceScatter, ws_);
    if (op == RedOp::Avg) {  // one scale of the owned segments, before they are spread
      const auto r = static_cast<std::size_t>(comm_.rank());
      for (const auto& ring : rings_)
        scale_inplace(at(recvbuf, ring.offset[r], dtype_size(t)), ring.count[r], t, 1.0f / static_cast<float>(p));
    }
    ring_allgather(comm_, recvbuf, rings_, t, chunk_bytes_, algos::kTagRingAllgather, ws_);
  }

 private:
  // Channel c takes slice c of the buffer; each slice is cut into one segment per rank.
  void layout(std::size_t count) {
    if (count == layout_count_) return;
    const auto K = static_cast<std::size_t>(channels_);
    for (std::size_t c = 0; c < K; ++c) {
      const Span slice = algos::balanced_part(count, K, c);
      rings_[c].assign_balanced(slice.offset, slice.count, comm_.size());
    }
    layout_count_ = count;
  }

  Communicator& comm_;
  ChunkChoice chunk_;
  std::size_t chunk_bytes_;
  int channels_;
  std::vector<RingSegments> rings_;
  std::size_t layout_count_ = 0;
  RingWorkspace ws_;
};

}  // namespace

std::unique_ptr<AllreduceAlgorithm> algos::make_ring(Communicator& comm, const AlgoOptions& opts) {
  check_options(opts);
  return std::make_unique<RingAllreduce>(comm, opts);
}

}  // namespace gradsync
