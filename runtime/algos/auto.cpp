// auto.cpp — "auto": picks an all-reduce algorithm per message size and rank count.
//
// Purpose: one sensible default for training, where bucket sizes range from a few KiB
//   (biases, norms, the last bucket) to tens of MiB.
//
// Approach: a fixed decision table (like Open MPI's tuned decision rules and NCCL's
//   tuner, in their simplest form), evaluated identically on every rank because it
//   depends only on the message size and the communicator's shape:
//     bytes <= 64 KiB                          -> rd            latency-bound: lg p rounds
//     several nodes, equal ranks per node > 1  -> hier          keep bytes on the node
//     bytes <= 1 MiB                           -> rabenseifner  2 lg p rounds, 2n(p-1)/p bytes
//     larger                                   -> ring          bandwidth-optimal, pipelined,
//                                                               neighbour-only traffic
//   The 64 KiB bound is where n beta starts to rival the alpha terms on the fabrics we
//   model (alpha ~ 1-50 us, beta ~ 0.1-1 ns/byte); the 1 MiB bound is where the ring's
//   2 (p-1) alphas become negligible and its pipelining and neighbour-only pattern (and the
//   absence of a pre/post step on non-power-of-two p) win. Both are constants here, meant
//   to be revisited with calibrated fabric files.
//   One node (every rank shares one node, more than one rank, shm available): a separate
//   rule, placed before the table above (one_node_pick):
//     bytes <= 64 KiB -> mpi   Open MPI's shared-memory collectives answer small messages
//                              in well under a microsecond, below rd's lg p exchanges
//     larger          -> shm   each byte copied once into a shared window, summed once
//   (measured on 2026-12-01, see README "Shared-memory all-reduce").
//   The sub-algorithms are built once, in the constructor (hier builds sub-communicators,
//   a collective step), and share the options (chunk size, channels). The choice is
//   reported through chosen(bytes) and logged at INFO once per distinct size on rank 0.
//
// Cost: that of the chosen algorithm.
// Use case: the default of gradsync-train; benchmarks name algorithms explicitly.
#include <memory>
#include <set>
#include <string>

#include "algos/algorithms.hpp"
#include "core/log.hpp"

namespace gradsync {
namespace {

constexpr std::size_t kSmallBytes = std::size_t{64} << 10;
constexpr std::size_t kMediumBytes = std::size_t{1} << 20;

class AutoAllreduce final : public AllreduceAlgorithm {
 public:
  AutoAllreduce(Communicator& comm, const AlgoOptions& opts) : comm_(comm) {
    rd_ = algos::make_recursive_doubling(comm, opts);
    rabenseifner_ = algos::make_rabenseifner(comm, opts);
    ring_ = algos::make_ring(comm, opts);
    // node_count and size are the same on every rank, and shm answers "available" alike
    // everywhere, so this is collective on all ranks or none.
    if (comm.node_count() == 1 && comm.size() > 1) {
      auto shm = algos::make_shared_memory(comm, opts);
      if (shm->chosen(kMediumBytes) == "shm") {
        shm_ = std::move(shm);
        native_ = algos::make_native(comm, opts);
      }
    }
    // node_count is the same on every rank, so every rank takes this branch or none does
    // (hier's constructor is collective; local_size may differ between nodes, which hier
    // detects collectively and answers with its ring fallback).
    if (comm.node_count() > 1) {
      auto hier = algos::make_hierarchical(comm, opts);
      // Equal nodes (no fallback) of more than one rank: local_size is now the same everywhere.
      if (hier->chosen(kMediumBytes) == "hier" && comm.local_size() > 1) hier_ = std::move(hier);
    }
  }

  std::string name() const override { return "auto"; }
  std::string chosen(std::size_t bytes) const override { return pick(bytes).name(); }
  ChunkChoice chunk() const override { return ring_->chunk(); }  // what its pipelined choices use

  void run(const void* sendbuf, void* recvbuf, std::size_t count, DType t, RedOp op) override {
    if (count == 0) return;
    const std::size_t bytes = count * dtype_size(t);
    AllreduceAlgorithm& algo = pick(bytes);
    if (log_level() >= LogLevel::Info && comm_.rank() == 0 && logged_.insert(bytes).second) {
      GS_LOG(INFO) << "auto: " << bytes << " bytes on " << comm_.size() << " ranks -> " << algo.name();
    }
    algo.run(sendbuf, recvbuf, count, t, op);
  }

 private:
  // The one-node rule (see the header): native for small messages, shm for the rest.
  AllreduceAlgorithm* one_node_pick(std::size_t bytes) const {
    if (!shm_) return nullptr;
    return bytes <= kSmallBytes ? native_.get() : shm_.get();
  }

  AllreduceAlgorithm& pick(std::size_t bytes) const {
    if (AllreduceAlgorithm* a = one_node_pick(bytes)) return *a;
    if (bytes <= kSmallBytes) return *rd_;
    if (hier_) return *hier_;
    if (bytes <= kMediumBytes) return *rabenseifner_;
    return *ring_;
  }

  Communicator& comm_;
  std::unique_ptr<AllreduceAlgorithm> rd_, rabenseifner_, ring_, hier_;
  std::unique_ptr<AllreduceAlgorithm> shm_, native_;  // one node only
  std::set<std::size_t> logged_;  // sizes whose choice was logged
};

}  // namespace

std::unique_ptr<AllreduceAlgorithm> algos::make_auto(Communicator& comm, const AlgoOptions& opts) {
  check_options(opts);
  return std::make_unique<AutoAllreduce>(comm, opts);
}

}  // namespace gradsync
