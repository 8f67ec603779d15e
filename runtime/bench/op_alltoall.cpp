// alltoall: block j of rank i's send buffer becomes block i of rank j's receive buffer.
// mpi: MPI_Alltoall. pairwise: n-1 exchange steps over point-to-point (p2p_algos.hpp).
// nccl: grouped ncclSend/ncclRecv to every peer (NcclCommunicator::alltoall).
#include "bench/ops.hpp"
#include "bench/p2p_algos.hpp"

namespace gradsync::bench {

namespace {

class AlltoallOp final : public Collective {
 public:
  AlltoallOp(const CollectiveConfig& cfg, Communicator& comm)
      : cfg_(cfg), comm_(comm), rank_(comm.rank()), n_(comm.size()) {}

  Layout layout(std::size_t elems) const override {
    Layout l;
    l.param_count = elems / static_cast<std::size_t>(n_);  // per peer
    l.send_count = l.recv_count = l.param_count * static_cast<std::size_t>(n_);
    return l;
  }
  double bus_factor() const override { return static_cast<double>(n_ - 1) / n_; }

  float input(std::size_t i) const override { return move_input(rank_, i); }
  float expected(std::size_t i, const Layout& l) const override {
    const std::size_t from = i / l.param_count, k = i % l.param_count;
    return move_input(static_cast<int>(from), static_cast<std::size_t>(rank_) * l.param_count + k);
  }

  void run(const void* send, void* recv, const Layout& l) override {
    if (cfg_.algo == "pairwise") pairwise_.run(comm_, send, recv, l.param_count * dtype_size(cfg_.dtype));
    else comm_.alltoall(send, recv, l.param_count, cfg_.dtype);
  }
  void run_in_place(void* buf, const Layout& l) override { run(buf, buf, l); }
  std::string algo_used(std::size_t) const override { return cfg_.algo; }

 private:
  CollectiveConfig cfg_;
  Communicator& comm_;
  int rank_, n_;
  PairwiseAlltoall pairwise_;
};

}  // namespace

std::unique_ptr<Collective> make_alltoall_op(const CollectiveConfig& cfg, Communicator& comm) {
  return std::make_unique<AlltoallOp>(cfg, comm);
}

}  // namespace gradsync::bench
