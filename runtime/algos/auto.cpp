// auto.cpp — "auto": picks an all-reduce algorithm per message size and rank count.
//
// Purpose: one sensible default for training, where bucket sizes range from a few KiB
//   (biases, norms, the last bucket) to tens of MiB.
//
// Approach: the shared decision table plan::auto_allreduce (runtime/plan/algos.hpp; the
//   model resolves "auto" with the same function), evaluated identically on every rank
//   because it depends only on the message size and the communicator's shape:
//     one node of several ranks with a shared window: bytes <= 64 KiB -> mpi (Open MPI's
//       shared-memory collectives), larger -> shm (measured 2026-12-01, README
//       "Shared-memory all-reduce");
//     otherwise bytes <= 64 KiB -> rd; several equal nodes of several ranks -> hier;
//     bytes <= 1 MiB -> rabenseifner; larger -> ring.
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
#include "core/error.hpp"
#include "core/log.hpp"
#include "plan/algos.hpp"

namespace gradsync {
namespace {

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
      if (shm->chosen(plan::kAutoMediumBytes) == "shm") {
        shm_ = std::move(shm);
        native_ = algos::make_native(comm, opts);
      }
    }
    // node_count is the same on every rank, so every rank takes this branch or none does
    // (hier's constructor is collective; local_size may differ between nodes, which hier
    // detects collectively and answers with its ring fallback: the shape is not uniform).
    shape_.nodes = comm.node_count();
    shape_.ranks_per_node = comm.local_size();
    shape_.shm = shm_ != nullptr;
    if (comm.node_count() > 1) {
      auto hier = algos::make_hierarchical(comm, opts);
      shape_.uniform = hier->chosen(plan::kAutoMediumBytes) == "hier";
      // Uniform: local_size is now the same everywhere, so the decision below is too.
      if (plan::auto_uses_hier(shape_)) hier_ = std::move(hier);
    }
  }

  std::string name() const override { return "auto"; }
  std::string chosen(std::size_t bytes) const override { return pick(bytes).name(); }
  ChunkChoice chunk() const override { return ring_->chunk(); }  // what its pipelined choices use

  void run(const void* sendbuf, void* recvbuf, std::size_t count, DType t, RedOp op) override {
    if (count == 0) return;
    const std::size_t bytes = count * dtype_size(t);
    // The last size's choice is kept: a benchmark or a training step repeats its sizes, and
    // at 8 bytes the rule's string compare was measurable (0.68 vs 0.56 us for mpi itself).
    if (bytes != last_bytes_) {
      last_algo_ = &pick(bytes);
      last_bytes_ = bytes;
      if (log_level() >= LogLevel::Info && comm_.rank() == 0 && logged_.insert(bytes).second) {
        GS_LOG(INFO) << "auto: " << bytes << " bytes on " << comm_.size() << " ranks -> " << last_algo_->name();
      }
    }
    last_algo_->run(sendbuf, recvbuf, count, t, op);
  }

 private:
  AllreduceAlgorithm& pick(std::size_t bytes) const {
    const std::string name = plan::auto_allreduce(bytes, shape_);
    if (name == "mpi") return *native_;
    if (name == "shm") return *shm_;
    if (name == "rd") return *rd_;
    if (name == "hier") return *hier_;
    if (name == "rabenseifner") return *rabenseifner_;
    GS_CHECK(name == "ring", "auto: the shared rule chose '", name, "', which auto does not build");
    return *ring_;
  }

  Communicator& comm_;
  plan::Shape shape_;
  std::unique_ptr<AllreduceAlgorithm> rd_, rabenseifner_, ring_, hier_;
  std::unique_ptr<AllreduceAlgorithm> shm_, native_;  // one node only
  std::set<std::size_t> logged_;  // sizes whose choice was logged
  std::size_t last_bytes_ = 0;     // run()'s last size (0: none yet) and its algorithm
  AllreduceAlgorithm* last_algo_ = nullptr;
};

}  // namespace

std::unique_ptr<AllreduceAlgorithm> algos::make_auto(Communicator& comm, const AlgoOptions& opts) {
  check_options(opts);
  return std::make_unique<AutoAllreduce>(comm, opts);
}

}  // namespace gradsync
