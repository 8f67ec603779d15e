// allreduce: every rank ends with the element-wise reduction of all ranks' buffers.
// Any algorithm of the registry (algos/allreduce.hpp), "auto" included. "nccl" is the
// registry's native entry (Communicator::allreduce) on the NCCL communicator: ncclAllReduce.
#include "bench/ops.hpp"

namespace gradsync::bench {

namespace {

class AllreduceOp final : public Collective {
 public:
  AllreduceOp(const CollectiveConfig& cfg, Communicator& comm)
      : cfg_(cfg), rank_(comm.rank()), n_(comm.size()),
        algo_(make_allreduce(cfg.algo == "nccl" ? "mpi" : cfg.algo, comm, cfg.algo_options)) {}

  bool has_redop() const override { return true; }

  Layout layout(std::size_t elems) const override {
    Layout l;
    l.send_count = l.recv_count = l.param_count = elems;
    return l;
  }
  // Each rank sends and receives 2(n-1)/n of the buffer in the bandwidth-optimal algorithm.
  double bus_factor() const override { return 2.0 * (n_ - 1) / n_; }

  float input(std::size_t i) const override { return reduce_input(rank_, i, n_, cfg_.dtype); }
  float expected(std::size_t i, const Layout&) const override {
    float sum = 0;
    for (int r = 0; r < n_; ++r) sum += reduce_input(r, i, n_, cfg_.dtype);
    return cfg_.redop == RedOp::Avg ? avg_of_sum(sum, n_, cfg_.dtype) : sum;
  }

  void run(const void* send, void* recv, const Layout& l) override {
    algo_->run(send, recv, l.param_count, cfg_.dtype, cfg_.redop);
  }
  void run_in_place(void* buf, const Layout& l) override {
    algo_->run(buf, buf, l.param_count, cfg_.dtype, cfg_.redop);
  }
  ChunkChoice chunk() const override { return cfg_.algo == "nccl" ? ChunkChoice{} : algo_->chunk(); }
  std::string algo_used(std::size_t bytes) const override {
    return cfg_.algo == "nccl" ? cfg_.algo : algo_->chosen(bytes);
  }

 private:
  CollectiveConfig cfg_;
  int rank_, n_;
  std::unique_ptr<AllreduceAlgorithm> algo_;
};

}  // namespace

std::unique_ptr<Collective> make_allreduce_op(const CollectiveConfig& cfg, Communicator& comm) {
  return std::make_unique<AllreduceOp>(cfg, comm);
}

}  // namespace gradsync::bench
