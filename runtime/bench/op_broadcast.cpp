// broadcast: the root's buffer ends up on every rank.
// mpi: MPI_Bcast. binomial: a binomial tree over point-to-point (p2p_algos.hpp).
// Out of place follows NCCL's semantics (the root's receive buffer gets the data too):
// the root broadcasts straight from its send buffer, then copies it locally (memcpy, or a
// device-to-device copy for nccl). In place is the bare broadcast of one buffer.
// nccl: ncclBroadcast (in place on one buffer).
#include <cstring>

#include "bench/ops.hpp"
#include "bench/p2p_algos.hpp"

namespace gradsync::bench {

namespace {

class BroadcastOp final : public Collective {
 public:
  BroadcastOp(const CollectiveConfig& cfg, Communicator& comm) : cfg_(cfg), comm_(comm), rank_(comm.rank()) {}

  bool has_root() const override { return true; }

  Layout layout(std::size_t elems) const override {
    Layout l;
    l.send_count = l.recv_count = l.param_count = elems;
    return l;
  }
  double bus_factor() const override { return 1.0; }

  bool has_input() const override { return rank_ == cfg_.root; }
  float input(std::size_t i) const override { return move_input(cfg_.root, i); }
  float expected(std::size_t i, const Layout&) const override { return move_input(cfg_.root, i); }

  void run(const void* send, void* recv, const Layout& l) override {
    const std::size_t bytes = l.param_count * dtype_size(cfg_.dtype);
    if (rank_ == cfg_.root) {
      // The root's buffer is only read by a broadcast.
      bcast(const_cast<void*>(send), l.param_count);
      if (bytes == 0) return;
      if (cfg_.copy) cfg_.copy(recv, send, bytes);
      else std::memcpy(recv, send, bytes);
    } else {
      bcast(recv, l.param_count);
    }
  }
  void run_in_place(void* buf, const Layout& l) override { bcast(buf, l.param_count); }
  std::string algo_used(std::size_t) const override { return cfg_.algo; }

 private:
  void bcast(void* buf, std::size_t count) {
    if (cfg_.algo == "binomial") binomial_broadcast(comm_, buf, count * dtype_size(cfg_.dtype), cfg_.root);
    else comm_.broadcast(buf, count, cfg_.dtype, cfg_.root);
  }
  CollectiveConfig cfg_;
  Communicator& comm_;
  int rank_;
};

}  // namespace

std::unique_ptr<Collective> make_broadcast_op(const CollectiveConfig& cfg, Communicator& comm) {
  return std::make_unique<BroadcastOp>(cfg, comm);
}

}  // namespace gradsync::bench
