// shm.cpp — shared-memory all-reduce: every rank sums its part of the vector straight from
// its peers' copies in an MPI-3 shared window, then copies the other parts back out.
//
// Purpose: the all-reduce for ranks on one node, bound by memory bandwidth instead of by a
//   message-passing transport. On shared memory a ring moves every byte 2 (p-1) times
//   through the BTL's copy-in/copy-out buffers; here each byte is written once into the
//   window, read once by the rank that reduces it and copied once back out.
//
// Approach (p ranks on one node, rank r; the vector is processed in rounds of at most
//   round_bytes, each cut into p balanced parts, part j reduced by rank j):
//   1. copy-in: rank r copies the round's elements, except its own part r, into its half
//      of the shared segment (its own part it reads from its send buffer directly);
//   2. sync (MPI_Win_sync + barrier);
//   3. reduce: part r is summed in cache-sized blocks (kBlockBytes): out = own + peer_0,
//      then out += peer_j for the other peers, all while the block sits in L1/L2, with the
//      vectorised reduce_out/reduce_into kernels; Avg scales the block; the block goes to
//      recvbuf and to part r of the own half of the segment;
//   4. sync;
//   5. copy-out: rank r copies every part j != r from rank j's half into recvbuf.
//   Consecutive rounds (also across calls) alternate between two halves of the segment, so
//   no third sync is needed: before a rank writes a half in round k+1, every rank has passed
//   step 4 of round k and hence finished reading that half in round k-1.
//   In place (sendbuf == recvbuf) is safe: a rank writes recvbuf only in parts and rounds
//   whose input it has already consumed (step 3 reads block b of its part before writing
//   it; step 5 writes parts whose input went into the segment in step 1).
//   Rounds keep the working set (p copies of a round) in the last-level cache; the segment
//   holds 2 x round_bytes per rank. hier uses one round of the whole vector with a hook that
//   runs its inter-node all-reduce on the summed part between steps 3 and 4.
//
// Registered buffers (comm/shared_buffer.hpp; vectors of kShmZeroCopyMinBytes or more, no
//   hook): when every rank's send and receive buffers lie in shared buffers of this
//   communicator, the copies through the segment go away. Each rank first writes where its
//   buffers are (buffer id, offset) into a control slot of the segment; after a sync every
//   rank reads all slots, so all take the same path:
//   - all registered: rank r sums part r of the whole vector straight from its peers' send
//     buffers into its own receive buffer (blocked and vectorised as above); sync; it copies
//     every other part j straight from rank j's receive buffer; a closing sync keeps a rank
//     from returning (and its caller from reusing the buffers) while a peer still reads them.
//     In place is safe: a rank writes only its own part before the middle sync, and the
//     parts its peers still read (their parts of its send buffer) only after it.
//   - otherwise: the rounds above (the control exchange cost one barrier).
//   Per rank this moves n (reads of the sums) + n/p (writes) + 2 (p-1)/p n (copy-out) bytes
//   instead of the rounds' 2 n + 2 (p-1)/p n + 2 n/p: on the 2-core test host (2 ranks,
//   16 MiB, 2026-12-06) 1.27 ms against 2.06 ms.
//
// Key optimisations: no message passing at all, two barriers per round, each byte read
//   from a peer exactly once, reduction blocked for L1 and vectorised (core/reduce).
//
// Cost (n bytes, p ranks, memory bandwidth B per rank, barrier latency a, R round bytes):
//   T = 2 ceil(n/R) a + ((p-1)/p n [copy-in] + n [reduce reads] + 2 n/p [writes]
//       + (p-1)/p n [copy-out]) / B      ~ 3 n / B + 2 ceil(n/R) a  for large p.
//   Ring over the shared-memory BTL: 2 (p-1) alpha + about 4 (p-1)/p n / B plus the BTL's
//   fragment handling; see the netmodel's "shm" schedule.
//
// Use case: several ranks on one node (alone, or as the intra-node step of hier); needs a
//   Communicator that can allocate shared segments (MPI), else it falls back to ring.
#include "algos/shm.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "algos/algorithms.hpp"
#include "comm/shared_buffer.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/reduce.hpp"

namespace gradsync {
namespace algos {

namespace {
// Reduction block: p inputs of this size and the output stay in L1/L2 while summed.
constexpr std::size_t kBlockBytes = std::size_t{16} << 10;
constexpr std::size_t kAlign = 64;
std::size_t round_up(std::size_t v, std::size_t a) { return ceil_div(v, a) * a; }
// A rank's control slot (one of two, alternate calls): where its buffers of this call are.
struct ZeroCopySlot {
  std::uint64_t registered;  // 1: both buffers below are registered shared buffers
  std::uint64_t send_id, send_offset, recv_id, recv_offset;
};
static_assert(sizeof(ZeroCopySlot) <= kAlign);
// The segment of each rank: two control slots, then the two halves of the rounds.
constexpr std::size_t kControlBytes = 2 * kAlign;

// out[0, m) = rank r's own elements + every peer's from element i on (peer(j, i): rank j's
// copy), summed in rank order: the same order on both paths, so they give the same bits.
template <typename Peer>
void sum_block(char* out, const char* own, const Peer& peer, int p, int r, std::size_t i, std::size_t m, DType t) {
  const int first = r == 0 ? 1 : 0;
  reduce_out(out, own, peer(first, i), m, t);
  for (int j = first + 1; j < p; ++j)
    if (j != r) reduce_into(out, peer(j, i), m, t);
}

// recv gets every part of an n-element vector but rank r's from its owner (from(j, i):
// element i of rank j's summed copy).
template <typename From>
void copy_out_parts(char* recv, const From& from, int p, int r, std::size_t n, std::size_t esz) {
  for (int j = 0; j < p; ++j) {
    const Span s = balanced_part(n, static_cast<std::size_t>(p), static_cast<std::size_t>(j));
    if (j != r && s.count > 0) std::memcpy(recv + s.offset * esz, from(j, s.offset), s.count * esz);
  }
}
}  // namespace

ShmReducer::ShmReducer(Communicator& comm, std::size_t round_bytes)
    : comm_(comm), round_bytes_(std::max<std::size_t>(round_bytes, kAlign)) {
  if (comm.size() == 1) return;
  // A first, small segment answers whether the ranks share a node (same answer everywhere).
  seg_ = comm.allocate_shared(kControlBytes + 2 * kAlign);
  available_ = seg_ != nullptr;
  if (available_) half_bytes_ = kAlign;
}

void ShmReducer::ensure_capacity(std::size_t half_bytes) {
  half_bytes = round_up(std::max(half_bytes, kAlign), kAlign);
  if (half_bytes <= half_bytes_) return;
  // Every rank asks for the same size at the same call (same count), so this is collective.
  seg_.reset();  // frees the old window (collective) before mapping the new one
  seg_ = comm_.allocate_shared(kControlBytes + 2 * half_bytes);
  GS_CHECK(seg_ != nullptr, "shm: the shared segment of ", kControlBytes + 2 * half_bytes,
           " bytes per rank could not be mapped");
  half_bytes_ = half_bytes;
  rounds_ = 0;
}

void ShmReducer::allreduce(const void* sendbuf, void* recvbuf, std::size_t count, DType t, RedOp op,
                           const PartHook& hook) {
  const std::size_t esz = dtype_size(t);
  if (count == 0) return;
  if (comm_.size() == 1) {
    copy_if_out_of_place(sendbuf, recvbuf, count * esz);
    if (hook) hook(recvbuf, count);
    return;
  }
  GS_CHECK(available_, "shm: ranks do not share one node");
  // The same decision on every rank: count and the hook are the same everywhere.
  if (!hook && count * esz >= plan::kShmZeroCopyMinBytes && zero_copy(sendbuf, recvbuf, count, t, op)) return;
  const std::size_t round_elems = hook ? count : std::max<std::size_t>(1, round_bytes_ / esz);
  ensure_capacity(std::min(count, round_elems) * esz);
  for (std::size_t begin = 0; begin < count; begin += round_elems)
    round(sendbuf, recvbuf, begin, std::min(round_elems, count - begin), t, op, hook);
}

void ShmReducer::round(const void* sendbuf, void* recvbuf, std::size_t begin, std::size_t n, DType t, RedOp op,
                       const PartHook& hook) {
  const int p = comm_.size(), r = comm_.rank();
  const std::size_t esz = dtype_size(t);
  const std::size_t half = (rounds_++ % 2) * half_bytes_;
  // Element i of this round lives at byte i*esz of each rank's current half.
  auto shared = [&](int rank, std::size_t i) {
    return static_cast<char*>(seg_->part(rank)) + kControlBytes + half + i * esz;
  };
  const char* send = at(sendbuf, begin, esz);
  char* recv = at(recvbuf, begin, esz);

  // 1. copy-in everything but the own part.
  const Span mine = balanced_part(n, static_cast<std::size_t>(p), static_cast<std::size_t>(r));
  if (mine.offset > 0) std::memcpy(shared(r, 0), send, mine.offset * esz);
  const std::size_t tail = mine.offset + mine.count;
  if (tail < n) std::memcpy(shared(r, tail), send + tail * esz, (n - tail) * esz);
  seg_->sync();

  // 3. reduce the own part, block by block.
  const std::size_t block = std::max<std::size_t>(1, kBlockBytes / esz);
  const float scale = 1.0f / static_cast<float>(p);
  for (std::size_t b = mine.offset; b < tail; b += block) {
    const std::size_t m = std::min(block, tail - b);
    char* out = recv + b * esz;
    sum_block(out, send + b * esz, shared, p, r, b, m, t);
    if (hook) continue;
    if (op == RedOp::Avg) scale_inplace(out, m, t, scale);
    std::memcpy(shared(r, b), out, m * esz);
  }
  if (hook && mine.count > 0) {
    hook(recv + mine.offset * esz, mine.count);
    std::memcpy(shared(r, mine.offset), recv + mine.offset * esz, mine.count * esz);
  } else if (hook) {
    hook(recv + mine.offset * esz, 0);
  }
  seg_->sync();

  // 5. copy-out the parts the peers reduced.
  copy_out_parts(recv, shared, p, r, n, esz);
}

bool ShmReducer::zero_copy(const void* sendbuf, void* recvbuf, std::size_t count, DType t, RedOp op) {
  const int p = comm_.size(), r = comm_.rank();
  const std::size_t esz = dtype_size(t), bytes = count * esz;
  // 1. publish where this rank's buffers are; read everyone's.
  const SharedRef send = find_shared(comm_, sendbuf, bytes), recv = find_shared(comm_, recvbuf, bytes);
  const std::size_t slot = (calls_++ % 2) * kAlign;
  auto slot_of = [&](int rank) {
    return static_cast<ZeroCopySlot*>(static_cast<void*>(static_cast<char*>(seg_->part(rank)) + slot));
  };
  ZeroCopySlot mine{};
  if (send.buffer && recv.buffer)
    mine = ZeroCopySlot{1, send.buffer->id(), send.offset, recv.buffer->id(), recv.offset};
  *slot_of(r) = mine;
  seg_->sync();
  std::vector<const char*> src(static_cast<std::size_t>(p)), summed(static_cast<std::size_t>(p));
  for (int j = 0; j < p; ++j) {
    const ZeroCopySlot s = *slot_of(j);
    if (s.registered != 1) return false;  // every rank sees the same slots: all fall back
    const SharedBuffer* sb = shared_by_id(comm_, s.send_id);
    const SharedBuffer* rb = shared_by_id(comm_, s.recv_id);
    GS_CHECK(sb && rb, "shm: rank ", j, "'s registered buffers (ids ", s.send_id, ", ", s.recv_id,
             ") are unknown on rank ", r);
    src[static_cast<std::size_t>(j)] = static_cast<const char*>(sb->peer(j)) + s.send_offset;
    summed[static_cast<std::size_t>(j)] = static_cast<const char*>(rb->peer(j)) + s.recv_offset;
  }
  src[static_cast<std::size_t>(r)] = static_cast<const char*>(sendbuf);
  char* const recv_mine = static_cast<char*>(recvbuf);

  // 2. sum the own part from every rank's send buffer, block by block.
  auto sent = [&](int j, std::size_t i) { return src[static_cast<std::size_t>(j)] + i * esz; };
  const Span own = balanced_part(count, static_cast<std::size_t>(p), static_cast<std::size_t>(r));
  const std::size_t block = std::max<std::size_t>(1, kBlockBytes / esz), tail = own.offset + own.count;
  const float scale = 1.0f / static_cast<float>(p);
  for (std::size_t b = own.offset; b < tail; b += block) {
    const std::size_t m = std::min(block, tail - b);
    char* o = recv_mine + b * esz;
    sum_block(o, sent(r, b), sent, p, r, b, m, t);
    if (op == RedOp::Avg) scale_inplace(o, m, t, scale);
  }
  seg_->sync();

  // 3. copy the other parts out of their owners' receive buffers.
  copy_out_parts(
      recv_mine, [&](int j, std::size_t i) { return summed[static_cast<std::size_t>(j)] + i * esz; }, p, r, count, esz);
  // 4. nobody returns while a peer still reads its buffers.
  seg_->sync();
  return true;
}

}  // namespace algos

// ---- the all-reduce ------------------------------------------------------------------------

namespace {

class ShmAllreduce final : public AllreduceAlgorithm {
 public:
  ShmAllreduce(Communicator& comm, const AlgoOptions& opts)
      : comm_(comm),
        chunk_{opts.chunk_bytes > 0 ? opts.chunk_bytes : algos::kShmRoundBytes,
               opts.chunk_bytes > 0 ? "set (--chunk-bytes / GRADSYNC_CHUNK_BYTES)"
                                    : "shm round: p copies stay in the last-level cache"},
        reducer_(comm, chunk_.bytes) {
    if (comm.size() > 1 && !reducer_.available()) {
      if (comm.rank() == 0) {
        GS_LOG(WARN) << "shm: the " << comm.size() << " ranks span " << comm.node_count()
                     << " nodes (no shared segment); falling back to the ring";
      }
      fallback_ = algos::make_ring(comm, opts);
      return;
    }
    if (comm.rank() == 0) {
      GS_LOG(INFO) << "shm: " << comm.size() << " ranks, round " << chunk_.bytes << " bytes (" << chunk_.reason << ")";
    }
  }

  std::string name() const override { return "shm"; }
  std::string chosen(std::size_t bytes) const override { return fallback_ ? fallback_->chosen(bytes) : "shm"; }
  ChunkChoice chunk() const override { return fallback_ ? fallback_->chunk() : chunk_; }

  void run(const void* sendbuf, void* recvbuf, std::size_t count, DType t, RedOp op) override {
    if (fallback_) return fallback_->run(sendbuf, recvbuf, count, t, op);
    reducer_.allreduce(sendbuf, recvbuf, count, t, op);
  }

 private:
  Communicator& comm_;
  ChunkChoice chunk_;
  algos::ShmReducer reducer_;
  std::unique_ptr<AllreduceAlgorithm> fallback_;  // ranks on several nodes
};

}  // namespace

std::unique_ptr<AllreduceAlgorithm> algos::make_shared_memory(Communicator& comm, const AlgoOptions& opts) {
  check_options(opts);
  return std::make_unique<ShmAllreduce>(comm, opts);
}

}  // namespace gradsync
