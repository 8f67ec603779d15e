// gradsync/algos/shm.hpp — the shared-memory reduction engine behind "shm" and the
// intra-node step of "hier" (internal; see shm.cpp for the algorithm and its cost).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "algos/allreduce.hpp"
#include "algos/detail.hpp"
#include "comm/communicator.hpp"

namespace gradsync::algos {

// Reduces vectors through a shared segment of `comm` (all ranks on one node). Rank r owns
// part r of every round: it sums that part straight from its peers' copies, and every rank
// copies the finished parts back out.
class ShmReducer {
 public:
  // Between the reduction of a rank's part and its publication: (part, elements) of recvbuf.
  using PartHook = std::function<void(void* part, std::size_t count)>;

  // Collective. available() is false (on every rank) when the ranks do not share one node.
  ShmReducer(Communicator& comm, std::size_t round_bytes);
  bool available() const { return available_; }
  std::size_t round_bytes() const { return round_bytes_; }

  // recvbuf = reduction of every rank's sendbuf (sendbuf == recvbuf: in place). With a hook
  // the whole vector is one round, its parts are balanced_part(count, p, r), and the hook
  // runs on this rank's summed part (before any Avg scaling, which is then the hook's job).
  void allreduce(const void* sendbuf, void* recvbuf, std::size_t count, DType t, RedOp op,
                 const PartHook& hook = nullptr);

 private:
  void ensure_capacity(std::size_t half_bytes);
  // The registered-buffer path (shm.cpp); false, on every rank, when some rank's buffers
  // are not registered shared buffers of comm_ (nothing done beyond the control exchange).
  bool zero_copy(const void* sendbuf, void* recvbuf, std::size_t count, DType t, RedOp op);
  void round(const void* sendbuf, void* recvbuf, std::size_t begin, std::size_t n, DType t, RedOp op,
             const PartHook& hook);

  Communicator& comm_;
  std::size_t round_bytes_;
  bool available_ = false;
  std::unique_ptr<SharedSegment> seg_;  // two halves per rank, used by alternate rounds
  std::size_t half_bytes_ = 0;
  std::size_t rounds_ = 0;  // rounds run on seg_ (selects the half)
  std::size_t calls_ = 0;   // zero-copy control exchanges (selects the control slot)
};

// Default round size of shm when --chunk-bytes is not given (measured, see shm.cpp; in
// plan/algos.hpp, which the model reads too).
using plan::kShmRoundBytes;

}  // namespace gradsync::algos
