// reducescatter: rank j ends with block j of the element-wise reduction of all ranks'
// n-block buffers. Sizes as nccl-tests: "size" is the input (n blocks), "count" one block.
// mpi: MPI_Reduce_scatter_block; in place (MPI_IN_PLACE) the result is block 0 of the buffer.
// ring: ring_reduce_scatter (algos/ring.hpp), whose output is rank j's segment of a
//   full-size buffer: out of place it reduces into a full-size scratch and copies block j
//   out (1/n of the data, inside the timed call); in place the result is block j of the
//   buffer, as in NCCL (recvbuff = sendbuff + rank * recvcount).
// nccl: ncclReduceScatter; in place in NCCL's own form (the result is block `rank`, passed
//   as recvbuf = buf + rank * count, which NCCL recognises as in place).
#include <cstring>

#include "algos/ring.hpp"
#include "bench/ops.hpp"
#include "core/reduce.hpp"

namespace gradsync::bench {

namespace {

class ReduceScatterOp final : public Collective {
 public:
  ReduceScatterOp(const CollectiveConfig& cfg, Communicator& comm)
      : cfg_(cfg), comm_(comm), rank_(comm.rank()), n_(comm.size()), ring_(cfg.algo_options.channels) {}

  bool has_redop() const override { return true; }

  Layout layout(std::size_t elems) const override {
    Layout l;
    l.param_count = elems / static_cast<std::size_t>(n_);
    l.send_count = l.param_count * static_cast<std::size_t>(n_);
    l.recv_count = l.param_count;
    const bool block_rank = cfg_.algo == "ring" || cfg_.algo == "nccl";
    l.ip_recv_offset = block_rank ? static_cast<std::size_t>(rank_) * l.param_count : 0;
    return l;
  }
  double bus_factor() const override { return static_cast<double>(n_ - 1) / n_; }

  float input(std::size_t i) const override { return reduce_input(rank_, i, n_, cfg_.dtype); }
  float expected(std::size_t i, const Layout& l) const override {
    const std::size_t at = static_cast<std::size_t>(rank_) * l.param_count + i;
    float sum = 0;
    for (int r = 0; r < n_; ++r) sum += reduce_input(r, at, n_, cfg_.dtype);
    return cfg_.redop == RedOp::Avg ? avg_of_sum(sum, n_, cfg_.dtype) : sum;
  }

  void run(const void* send, void* recv, const Layout& l) override {
    if (cfg_.algo != "ring") {
      comm_.reduce_scatter(send, recv, l.param_count, cfg_.dtype, cfg_.redop);
      return;
    }
    const std::size_t esz = dtype_size(cfg_.dtype);
    void* full = scratch_.get(l.send_count * esz);
    char* mine = ring_into(send, full, l);
    if (l.param_count > 0) std::memcpy(recv, mine, l.param_count * esz);
  }
  void run_in_place(void* buf, const Layout& l) override {
    if (cfg_.algo == "ring") {
      ring_into(buf, buf, l);
    } else if (cfg_.algo == "nccl") {
      char* mine = static_cast<char*>(buf) + l.ip_recv_offset * dtype_size(cfg_.dtype);
      comm_.reduce_scatter(buf, mine, l.param_count, cfg_.dtype, cfg_.redop);
    } else {
      comm_.reduce_scatter(buf, buf, l.param_count, cfg_.dtype, cfg_.redop);
    }
  }
  std::string algo_used(std::size_t) const override { return cfg_.algo; }

 private:
  // Ring reduce-scatter of `send` into the full-size `full`; returns this rank's block.
  char* ring_into(const void* send, void* full, const Layout& l) {
    const auto& rings = ring_.layout(n_, l.param_count);
    ring_reduce_scatter(comm_, send, full, std::span<const RingSegments>(rings), cfg_.dtype,
                        cfg_.algo_options.chunk_bytes, algos::kTagRingReduceScatter, ring_.workspace());
    char* mine = static_cast<char*>(full) + static_cast<std::size_t>(rank_) * l.param_count * dtype_size(cfg_.dtype);
    if (cfg_.redop == RedOp::Avg) scale_inplace(mine, l.param_count, cfg_.dtype, 1.0f / static_cast<float>(n_));
    return mine;
  }

  CollectiveConfig cfg_;
  Communicator& comm_;
  int rank_, n_;
  RingBlocks ring_;
  algos::Scratch scratch_;
};

}  // namespace

std::unique_ptr<Collective> make_reducescatter_op(const CollectiveConfig& cfg, Communicator& comm) {
  return std::make_unique<ReduceScatterOp>(cfg, comm);
}

}  // namespace gradsync::bench
