// native.cpp — "mpi": the communication library's own all-reduce (MPI_Allreduce through
// Communicator::allreduce; ncclAllReduce on an NCCL communicator).
//
// Purpose: the baseline. Every measurement of our own algorithms can be put next to what
//   the library does with the same buffers, so "ring reached 0.9x of MPI" is a measured
//   statement, not a guess.
// Approach: one call; the library picks its own algorithm (Open MPI's tuned/libnbc
//   decision rules, NCCL's tuner). Half types are reduced by the communicator's own ops,
//   which round once per pairwise addition like ours; Avg is sum then one scale by 1/p.
// Cost: whatever the library's algorithm costs; the cost model treats it as a fitted curve.
// Use case: baseline and fallback.
#include <memory>
#include <string>

#include "algos/algorithms.hpp"

namespace gradsync {
namespace {

class NativeAllreduce final : public AllreduceAlgorithm {
 public:
  explicit NativeAllreduce(Communicator& comm) : comm_(comm) {}
  std::string name() const override { return "mpi"; }
  void run(const void* sendbuf, void* recvbuf, std::size_t count, DType t, RedOp op) override {
    if (count == 0) return;
    comm_.allreduce(sendbuf, recvbuf, count, t, op);
  }
  Request start(const void* sendbuf, void* recvbuf, std::size_t count, DType t, RedOp op,
                const void* after) override {
    if (count == 0) return {};
    return comm_.iallreduce(sendbuf, recvbuf, count, t, op, after);
  }

 private:
  Communicator& comm_;
};

}  // namespace

std::unique_ptr<AllreduceAlgorithm> algos::make_native(Communicator& comm, const AlgoOptions& opts) {
  check_options(opts);
  return std::make_unique<NativeAllreduce>(comm);
}

}  // namespace gradsync
