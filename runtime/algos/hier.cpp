// hier.cpp — hierarchical (two-level) all-reduce: reduce-scatter inside each node, ring
// all-reduce of the shards across nodes, allgather inside each node.
//
// Purpose: keep most bytes on the fast intra-node path (shared memory, NVLink) and send
//   only 1/L of the vector per rank over the slower network, with L ranks per node. This
//   is the structure of Horovod's hierarchical all-reduce and of NCCL's multi-node rings,
//   and the runtime side of the NCCL_P2P_DISABLE / "through host memory" advice.
//
// Approach (N nodes of L ranks each, local rank l on node m):
//   1. node-local reduce-scatter over the sub-communicator split(node_id, rank): the
//      vector is cut into L shards; local rank l ends with the node's sum of shard l.
//      When the node's ranks can map a shared segment, steps 1 and 3 are the shm
//      algorithm's (shm.cpp: each rank sums its shard straight from its peers' copies),
//      with step 2 run on the summed shard in between; otherwise node-local rings.
//   2. inter-node ring all-reduce of shard l over the sub-communicator split(local_rank,
//      node_id), i.e. among the N ranks that hold the same shard, one per node. It uses
//      opts.channels concurrent rings (parallel connections per peer across the network).
//   3. node-local allgather of the L shards.
//   With one node, step 2 is empty (plain reduce-scatter + allgather); with one rank per
//   node, steps 1 and 3 are empty (plain ring). The sub-communicators are built once, in
//   the constructor.
//   Requires the same number of ranks on every node; otherwise (checked collectively in
//   the constructor) it falls back to the flat ring and says so with a warning; chosen()
//   then reports "ring".
//
// Cost (n bytes, intra-node alpha_l, beta_l; inter-node alpha_g, beta_g):
//   T = 2 (L-1) alpha_l + 2 (L-1)/L n beta_l + 2 (N-1) alpha_g + 2 (N-1)/(N L) n beta_g
//       + ((L-1)/L + (N-1)/(N L)) n gamma.
//
// Use case: several ranks per node on a network much slower than the node's memory,
//   large messages.
#include <memory>
#include <string>

#include "algos/algorithms.hpp"
#include "algos/detail.hpp"
#include "algos/ring.hpp"
#include "algos/shm.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/reduce.hpp"

namespace gradsync {
namespace {

class Hierarchical final : public AllreduceAlgorithm {
 public:
  Hierarchical(Communicator& comm, const AlgoOptions& opts) : comm_(comm) {
    const std::int64_t min_local = comm.min_int64(comm.local_size());
    const std::int64_t max_local = comm.max_int64(comm.local_size());
    if (min_local != max_local) {
      if (comm.rank() == 0) {
        GS_LOG(WARN) << "hier: nodes have different rank counts (" << min_local << " to " << max_local
                     << " ranks per node); falling back to the flat ring";
      }
      fallback_ = algos::make_ring(comm, opts);
      return;
    }
    local_ = comm.split(comm.node_id(), comm.rank());
    cross_ = comm.split(local_->rank(), comm.node_id());
    GS_CHECK_EQ(local_->size(), comm.local_size(), "hier: node-local sub-communicator size");
    GS_CHECK_EQ(cross_->size(), comm.node_count(), "hier: inter-node sub-communicator size");
    cross_ring_ = algos::make_ring(*cross_, opts);
    chunk_bytes_ = algos::choose_chunk(*local_, opts).bytes;
    shm_ = std::make_unique<algos::ShmReducer>(*local_, algos::kShmRoundBytes);
    if (!shm_->available()) shm_.reset();
    if (comm.rank() == 0) {
      GS_LOG(INFO) << "hier: " << comm.node_count() << " node(s) x " << local_->size() << " rank(s), intra-node "
                   << (shm_ ? "shm" : "ring, chunk " + std::to_string(chunk_bytes_) + " bytes") << ", inter-node chunk "
                   << cross_ring_->chunk().bytes << " bytes (" << cross_ring_->chunk().reason << "), "
                   << opts.channels << " inter-node channel(s)";
    }
  }

  std::string name() const override { return "hier"; }
  std::string chosen(std::size_t bytes) const override { return fallback_ ? fallback_->chosen(bytes) : "hier"; }
  ChunkChoice chunk() const override { return fallback_ ? fallback_->chunk() : cross_ring_->chunk(); }

  void run(const void* sendbuf, void* recvbuf, std::size_t count, DType t, RedOp op) override {
    if (fallback_) {
      fallback_->run(sendbuf, recvbuf, count, t, op);
      return;
    }
    if (count == 0) return;
    if (shm_) {  // shm's reduce-scatter, the inter-node all-reduce of the shard, shm's allgather
      const float scale = 1.0f / static_cast<float>(comm_.size());
      shm_->allreduce(sendbuf, recvbuf, count, t, op, [&](void* shard, std::size_t n) {
        cross_ring_->run(shard, shard, n, t, RedOp::Sum);
        if (op == RedOp::Avg) scale_inplace(shard, n, t, scale);
      });
      return;
    }
    const std::size_t esz = dtype_size(t);
    if (count != layout_count_) {
      shards_.assign_balanced(0, count, local_->size());
      layout_count_ = count;
    }
    const auto l = static_cast<std::size_t>(local_->rank());
    void* shard = algos::at(recvbuf, shards_.offset[l], esz);
    const std::size_t shard_n = shards_.count[l];

    GS_LOG(TRACE) << "hier: node-local reduce-scatter of " << count << " elements";
    ring_reduce_scatter(*local_, sendbuf, recvbuf, shards_, t, chunk_bytes_, algos::kTagHierLocalReduceScatter, ws_);
    GS_LOG(TRACE) << "hier: inter-node all-reduce of shard " << l << " (" << shard_n << " elements)";
    cross_ring_->run(shard, shard, shard_n, t, RedOp::Sum);
    if (op == RedOp::Avg) scale_inplace(shard, shard_n, t, 1.0f / static_cast<float>(comm_.size()));
    GS_LOG(TRACE) << "hier: node-local allgather";
    ring_allgather(*local_, recvbuf, shards_, t, chunk_bytes_, algos::kTagHierLocalAllgather, ws_);
  }

 private:
  Communicator& comm_;
  std::size_t chunk_bytes_ = 0;                     // node-local rings (without shm)
  std::unique_ptr<algos::ShmReducer> shm_;          // node-local steps when available
  std::unique_ptr<AllreduceAlgorithm> fallback_;  // set when nodes differ in size
  std::unique_ptr<Communicator> local_;           // ranks of this node, by global rank
  std::unique_ptr<Communicator> cross_;           // same local rank on every node, by node
  std::unique_ptr<AllreduceAlgorithm> cross_ring_;
  RingSegments shards_;
  std::size_t layout_count_ = 0;
  RingWorkspace ws_;
};

}  // namespace

std::unique_ptr<AllreduceAlgorithm> algos::make_hierarchical(Communicator& comm, const AlgoOptions& opts) {
  check_options(opts);
  return std::make_unique<Hierarchical>(comm, opts);
}

}  // namespace gradsync
