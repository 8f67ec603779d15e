// allgather: every rank ends with the n ranks' blocks, in rank order. Sizes as nccl-tests:
// "size" is the gathered result (n blocks), "count" one block.
// mpi: MPI_Allgather. ring: RingBlocks::allgather (algos/ring.hpp), which works in place on
//   the full buffer: out of place it first copies the own block into place (1/n of the
//   data, inside the timed call). In place, the input is block `rank` of the buffer (NCCL's
//   convention, also MPI_IN_PLACE's).
// nccl: ncclAllGather, in place in the same form.
#include "algos/ring.hpp"
#include "bench/ops.hpp"

namespace gradsync::bench {

namespace {

class AllgatherOp final : public Collective {
 public:
  AllgatherOp(const CollectiveConfig& cfg, Communicator& comm)
      : cfg_(cfg), comm_(comm), rank_(comm.rank()), n_(comm.size()), ring_(cfg.algo_options.channels) {}

  Layout layout(std::size_t elems) const override {
    Layout l;
    l.param_count = elems / static_cast<std::size_t>(n_);
    l.send_count = l.param_count;
    l.recv_count = l.param_count * static_cast<std::size_t>(n_);
    l.ip_send_offset = static_cast<std::size_t>(rank_) * l.param_count;
    return l;
  }
  double bus_factor() const override { return static_cast<double>(n_ - 1) / n_; }

  float input(std::size_t i) const override { return move_input(rank_, i); }
  float expected(std::size_t i, const Layout& l) const override {
    return move_input(static_cast<int>(i / l.param_count), i % l.param_count);
  }

  void run(const void* send, void* recv, const Layout& l) override {
    if (cfg_.algo == "ring") {
      ring_.allgather(comm_, send, recv, l.param_count, cfg_.dtype, cfg_.algo_options.chunk_bytes,
                      algos::kTagRingAllgather);
    } else {
      comm_.allgather(send, recv, l.param_count, cfg_.dtype);
    }
  }
  // Both paths take a send block that is block `rank` of recv as in place.
  void run_in_place(void* buf, const Layout& l) override {
    run(static_cast<char*>(buf) + l.ip_send_offset * dtype_size(cfg_.dtype), buf, l);
  }
  std::string algo_used(std::size_t) const override { return cfg_.algo; }

 private:
  CollectiveConfig cfg_;
  Communicator& comm_;
  int rank_, n_;
  RingBlocks ring_;
};

}  // namespace

std::unique_ptr<Collective> make_allgather_op(const CollectiveConfig& cfg, Communicator& comm) {
  return std::make_unique<AllgatherOp>(cfg, comm);
}

}  // namespace gradsync::bench
