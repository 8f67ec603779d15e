// gradsync/algos/detail.hpp — small pieces every algorithm unit shares (internal).
//
//   * the tag map: each algorithm owns a fixed tag range, so two algorithms running on the
//     same communicator never match each other's messages;
//   * Scratch: a 64-byte aligned buffer that grows lazily and is reused across calls
//     (algorithms never allocate per chunk or per step);
//   * RequestWindow: a bounded FIFO of in-flight sends; pushing into a full window waits
//     for the oldest, which keeps the number of outstanding requests bounded without
//     waiting on every send;
//   * PieceExchange: a partner exchange in pieces below the transport's eager limit;
//   * PowerOfTwoFold and PowerOfTwoExchanges: what rd and rabenseifner share;
//   * balanced partitions and pointer arithmetic in elements of a DType.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "algos/algorithms.hpp"
#include "comm/communicator.hpp"
#include "core/dtype.hpp"
#include "core/reduce.hpp"
#include "plan/algos.hpp"

namespace gradsync::algos {

// ---- tags (all below 32767, the smallest MPI_TAG_UB the standard allows) ---------------
inline constexpr int kMaxChannels = 64;
inline constexpr int kTagRingReduceScatter = 1000;  // + channel
inline constexpr int kTagRingAllgather = 1100;      // + channel
inline constexpr int kTagRdFold = 1200;
inline constexpr int kTagRdExchange = 1201;
inline constexpr int kTagRdUnfold = 1202;
inline constexpr int kTagRabFold = 1300;
inline constexpr int kTagRabHalving = 1301;
inline constexpr int kTagRabDoubling = 1302;
inline constexpr int kTagRabUnfold = 1303;
inline constexpr int kTagTreeReduce = 1400;
inline constexpr int kTagTreeBcast = 1401;
inline constexpr int kTagHierLocalReduceScatter = 1500;  // on the node-local communicator
inline constexpr int kTagHierLocalAllgather = 1600;      // on the node-local communicator
inline constexpr int kTagBlockAllgather = 1700;          // compressors' all-gathers (compress/collectives.hpp)
static_assert(kTagRingReduceScatter + kMaxChannels <= kTagRingAllgather);
static_assert(kTagRingAllgather + kMaxChannels <= kTagRdFold);
static_assert(kTagHierLocalReduceScatter + kMaxChannels <= kTagHierLocalAllgather);
static_assert(kTagHierLocalAllgather + kMaxChannels <= kTagBlockAllgather);

// Pipelining depth: chunks that may be in flight per peer and channel (plan/algos.hpp, where
// the model reads the same rule).
using plan::kPipelineSlots;
using plan::pipeline_slots;

// ---- element arithmetic ------------------------------------------------------------------
inline char* at(void* base, std::size_t elems, std::size_t esz) { return static_cast<char*>(base) + elems * esz; }
inline const char* at(const void* base, std::size_t elems, std::size_t esz) {
  return static_cast<const char*>(base) + elems * esz;
}
inline int mod(int a, int p) { return ((a % p) + p) % p; }
inline std::size_t ceil_div(std::size_t a, std::size_t b) { return (a + b - 1) / b; }

// Part `k` of `parts` of n elements, sizes differing by at most one (larger parts first).
struct Span {
  std::size_t offset;
  std::size_t count;
};
inline Span balanced_part(std::size_t n, std::size_t parts, std::size_t k) {
  const std::size_t base = n / parts, extra = n % parts;
  return {k * base + (k < extra ? k : extra), base + (k < extra ? 1 : 0)};
}

// Out-of-place with nothing to communicate (one rank): the result is the input.
inline void copy_if_out_of_place(const void* send, void* recv, std::size_t bytes) {
  if (send != recv && bytes > 0) std::memmove(recv, send, bytes);
}

// ---- buffers and requests ------------------------------------------------------------------

// Scratch memory that grows on demand and is kept for the next call. Not zeroed.
class Scratch {
 public:
  void* get(std::size_t bytes) {
    if (bytes > capacity_) {
      const std::size_t want = ceil_div(bytes, 4096) * 4096;
      ptr_.reset(static_cast<std::byte*>(::operator new[](want, std::align_val_t{64})));
      capacity_ = want;
    }
    return ptr_.get();
  }
  std::size_t capacity() const { return capacity_; }

 private:
  struct Free {
    void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{64}); }
  };
  std::unique_ptr<std::byte[], Free> ptr_;
  std::size_t capacity_ = 0;
};

// A bounded FIFO of in-flight requests (sends whose buffers stay valid until drain()).
class RequestWindow {
 public:
  // Empties the window and sets its capacity (>= 1). After a normal run the window is
  // already drained; anything left (an earlier call ended by an exception) is cancelled.
  void reset(Communicator& comm, std::size_t capacity) {
    for (auto& r : slots_) r.reset();
    size_ = 0;
    comm_ = &comm;
    if (capacity == 0) capacity = 1;
    if (slots_.size() < capacity) slots_.resize(capacity);
    capacity_ = capacity;
    head_ = 0;
  }
  // Adds a request; an inactive one (a zero-byte transfer that was never posted) is dropped.
  // When the window is full, waits for the oldest first.
  void push(Request r) {
    if (!r.active()) return;
    if (size_ == capacity_) {
      comm_->wait(slots_[head_]);
      head_ = (head_ + 1) % capacity_;
      --size_;
    }
    slots_[(head_ + size_) % capacity_] = std::move(r);
    ++size_;
  }
  // Waits for everything in the window.
  void drain() {
    if (size_ == 0) return;
    comm_->wait_all(slots_.data(), capacity_);  // inactive slots are skipped
    size_ = 0;
    head_ = 0;
  }

 private:
  Communicator* comm_ = nullptr;
  std::vector<Request> slots_;
  std::size_t capacity_ = 1;
  std::size_t head_ = 0;
  std::size_t size_ = 0;
};

// Exchange with a partner, posting only the non-empty directions (both sides compute the
// same sizes, so a skipped send always meets a skipped receive).
inline void exchange(Communicator& comm, const void* sendbuf, std::size_t sendbytes, int dst, void* recvbuf,
                     std::size_t recvbytes, int src, int tag) {
  Request r[2];
  if (recvbytes > 0) r[0] = comm.irecv(recvbuf, recvbytes, src, tag);
  if (sendbytes > 0) r[1] = comm.isend(sendbuf, sendbytes, dst, tag);
  comm.wait_all(r, 2);
}

// exchange() cut into pieces of at most `piece` bytes, pipeline_slots(piece) of them in
// flight each way, oldest first (MPI keeps one peer's messages on one tag in order). Over
// TCP a message above the eager limit waits for a rendezvous handshake, and a large one
// stalls the link (chunk.cpp); pieces below the limit flow back to back, like the ring's
// chunks. on_piece(offset, bytes) runs on each received piece as it lands, so a reduction
// overlaps the transfer of the pieces behind it; it runs after the same piece's send has
// completed, so it may overwrite the bytes at that offset of sendbuf (rd reduces in place
// into the vector it sends). Pieces hold whole elements of `esz` bytes.
// Both sides compute the same sizes. piece 0, or both sizes within one piece: one
// exchange(). The request slots are reused across calls.
class PieceExchange {
 public:
  template <class OnPiece>
  void run(Communicator& comm, const void* sendbuf, std::size_t sendbytes, int dst, void* recvbuf,
           std::size_t recvbytes, int src, int tag, std::size_t piece, std::size_t esz, OnPiece&& on_piece) {
    if (piece > 0) piece = std::max(esz, piece / esz * esz);
    if (piece == 0 || (sendbytes <= piece && recvbytes <= piece)) {
      exchange(comm, sendbuf, sendbytes, dst, recvbuf, recvbytes, src, tag);
      if (recvbytes > 0) on_piece(std::size_t{0}, recvbytes);
      return;
    }
    const std::size_t nr = (recvbytes + piece - 1) / piece, ns = (sendbytes + piece - 1) / piece;
    const std::size_t w = pipeline_slots(piece);
    if (recv_.size() < w) {
      recv_.resize(w);
      send_.resize(w);
    }
    std::size_t pr = 0, ps = 0;  // pieces posted each way
    auto post = [&](std::size_t upto) {
      for (; pr < nr && pr < upto; ++pr)
        recv_[pr % w] = comm.irecv(static_cast<char*>(recvbuf) + pr * piece, std::min(piece, recvbytes - pr * piece),
                                   src, tag);
      for (; ps < ns && ps < upto; ++ps)
        send_[ps % w] = comm.isend(static_cast<const char*>(sendbuf) + ps * piece,
                                   std::min(piece, sendbytes - ps * piece), dst, tag);
    };
    post(w);
    for (std::size_t i = 0; i < nr || i < ns; ++i) {
      if (i < ns) comm.wait(send_[i % w]);  // first: on_piece may overwrite what piece i sent
      if (i < nr) {
        comm.wait(recv_[i % w]);
        on_piece(i * piece, std::min(piece, recvbytes - i * piece));
      }
      post(i + 1 + w);
    }
  }
  void run(Communicator& comm, const void* sendbuf, std::size_t sendbytes, int dst, void* recvbuf,
           std::size_t recvbytes, int src, int tag, std::size_t piece) {
    run(comm, sendbuf, sendbytes, dst, recvbuf, recvbytes, src, tag, piece, 1, [](std::size_t, std::size_t) {});
  }

 private:
  std::vector<Request> recv_, send_;
};

// Largest power of two <= p (p >= 1).
inline int floor_pow2(int p) {
  int q = 1;
  while (q * 2 <= p) q *= 2;
  return q;
}

// The non-power-of-two step rd and rabenseifner share (Thakur, Rabenseifner & Gropp 2005):
// with p' the largest power of two <= p and rem = p - p', each even rank among the first
// 2 rem folds its vector into its odd neighbour and sits out; the odd ones (new rank
// rank/2) and the ranks >= 2 rem (new rank rank - rem) run the power-of-two algorithm;
// afterwards every odd rank < 2 rem sends the result back to its even neighbour.
class PowerOfTwoFold {
 public:
  PowerOfTwoFold(int p, int r) : r_(r), pof2_(floor_pow2(p)), rem_(p - pof2_) {
    if (r < 2 * rem_) newrank_ = (r % 2 == 0) ? -1 : r / 2;
    else newrank_ = r - rem_;
  }
  int pof2() const { return pof2_; }
  // This rank's rank among the p' participants, or -1 if it sits out.
  int newrank() const { return newrank_; }
  // Communicator rank of participant nr.
  int real_rank(int nr) const { return nr < rem_ ? nr * 2 + 1 : nr + rem_; }

  // Returns where this rank's partial sum now is: sendbuf, or recvbuf after a fold
  // (recv = send + neighbour's, through `tmp` of `count` elements).
  const void* fold(Communicator& comm, const void* sendbuf, void* recvbuf, void* tmp, std::size_t count,
                   DType t, int tag) const {
    if (r_ >= 2 * rem_) return sendbuf;
    const std::size_t bytes = count * dtype_size(t);
    if (newrank_ < 0) {
      comm.send(sendbuf, bytes, r_ + 1, tag);
      return sendbuf;
    }
    comm.recv(tmp, bytes, r_ - 1, tag);
    reduce_out(recvbuf, sendbuf, tmp, count, t);
    return recvbuf;
  }
  // The result goes back to the ranks that sat out.
  void unfold(Communicator& comm, void* recvbuf, std::size_t bytes, int tag) const {
    if (r_ >= 2 * rem_) return;
    if (newrank_ < 0) comm.recv(recvbuf, bytes, r_ + 1, tag);
    else comm.send(recvbuf, bytes, r_ - 1, tag);
  }

 private:
  int r_, pof2_, rem_, newrank_ = 0;
};

// What rd and rabenseifner share: the fold of their ranks onto p' participants, the piece
// size of their partner exchanges (choose_piece) and its request slots, one scratch vector.
class PowerOfTwoExchanges : public AllreduceAlgorithm {
 public:
  ChunkChoice chunk() const override { return chunk_; }

 protected:
  PowerOfTwoExchanges(Communicator& comm, const AlgoOptions& opts)
      : comm_(comm),
        p_(comm.size()),
        fold_(p_, comm.rank()),
        chunk_(p_ > 1 ? choose_piece(comm, opts) : ChunkChoice{}) {}

  Communicator& comm_;
  int p_;
  PowerOfTwoFold fold_;
  ChunkChoice chunk_;
  Scratch scratch_;
  PieceExchange pieces_;
};

}  // namespace gradsync::algos
