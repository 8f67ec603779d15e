// gradsync/cuda/host_staging.hpp — MPI on GPU buffers through pinned host memory.
//
// Debian's Open MPI is not CUDA-aware (cuda/mpi_cuda.hpp), and the algorithms of
// runtime/algos reduce on the host anyway, so GPU buffers reach MPI by staging: copy the
// input device -> pinned host, run the host code over MPI, copy the result host -> device.
// The copies are synchronous on the staging object's own stream and are part of the cost
// (the bench times them; the cost model sees them as two PCIe transfers per call).
// Unlike NCCL, staging lets several ranks share one GPU.
//
//   HostStaging              pinned buffers + a stream: the building block (the bench's
//                            staged collectives use it directly).
//   HostStagedAllreduce      any registry all-reduce (ring, rd, ..., mpi, auto) on device
//                            buffers: stage in, run in place on the host, stage out.
//   HostStagedCommunicator   the Communicator seam on device buffers over a host (MPI)
//                            communicator: native collectives and point-to-point with
//                            staging. Only for code that moves bytes (collectives, sends);
//                            an algorithm that reduces received data on the CPU must run
//                            on host pointers (use HostStagedAllreduce for those).
//
// All device pointers must belong to the device that was current when the object was
// made. Not thread-safe: one thread uses one object at a time.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "algos/allreduce.hpp"
#include "comm/communicator.hpp"
#include "cuda/memory.hpp"
#include "cuda/stream.hpp"

namespace gradsync {

class HostStaging {
 public:
  static constexpr int kSlots = 3;
  HostStaging() = default;

  // Pinned buffer `slot` (0..kSlots-1) of at least `bytes` (grown on demand, so no
  // allocation in steady state).
  void* host(int slot, std::size_t bytes);
  void to_host(void* host, const void* dev, std::size_t bytes) { copy_to_host(host, dev, bytes, stream_.get()); }
  void to_device(void* dev, const void* host, std::size_t bytes) {
    copy_to_device(dev, host, bytes, stream_.get());
  }
  cudaStream_t stream() const { return stream_.get(); }

 private:
  Stream stream_;
  std::array<PinnedBuffer, kSlots> bufs_;
};

class HostStagedAllreduce final : public AllreduceAlgorithm {
 public:
  explicit HostStagedAllreduce(std::unique_ptr<AllreduceAlgorithm> host) : host_(std::move(host)) {}
  std::string name() const override { return host_->name(); }
  std::string chosen(std::size_t bytes) const override { return host_->chosen(bytes); }
  // sendbuf, recvbuf: device pointers (equal: in place).
  void run(const void* sendbuf, void* recvbuf, std::size_t count, DType t, RedOp op) override;

 private:
  std::unique_ptr<AllreduceAlgorithm> host_;
  HostStaging staging_;
};

// make_allreduce(name, host_comm, opts) wrapped in HostStagedAllreduce. `host_comm` is a
// host-memory communicator (MPI) and must outlive the algorithm.
std::unique_ptr<AllreduceAlgorithm> make_host_staged_allreduce(const std::string& name, Communicator& host_comm,
                                                               const AlgoOptions& opts = {});

class HostStagedCommunicator final : public Communicator {
 public:
  // `host` (an MPI communicator on host memory) must outlive this object.
  explicit HostStagedCommunicator(Communicator& host);
  ~HostStagedCommunicator() override;

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  int local_rank() const override { return host_->local_rank(); }
  int local_size() const override { return host_->local_size(); }
  int node_id() const override { return host_->node_id(); }
  int node_count() const override { return host_->node_count(); }
  std::string backend() const override { return host_->backend() + "-staged"; }
  std::string hostname() const override { return host_->hostname(); }

  // Device pointers. A send copies to pinned memory before it is posted; a receive copies
  // to the device when its test() first sees it complete. Requests must not outlive this.
  Request isend(const void* buf, std::size_t bytes, int peer, int tag) override;
  Request irecv(void* buf, std::size_t bytes, int peer, int tag) override;

  void allreduce(const void* sendbuf, void* recvbuf, std::size_t count, DType t, RedOp op) override;
  void reduce_scatter(const void* sendbuf, void* recvbuf, std::size_t recvcount, DType t, RedOp op) override;
  void allgather(const void* sendbuf, void* recvbuf, std::size_t sendcount, DType t) override;
  void alltoall(const void* sendbuf, void* recvbuf, std::size_t count, DType t) override;
  void broadcast(void* buf, std::size_t count, DType t, int root) override;
  void barrier() override { host_->barrier(); }

  // Control plane: host values, delegated.
  double max_double(double v) override { return host_->max_double(v); }
  double sum_double(double v) override { return host_->sum_double(v); }
  std::int64_t min_int64(std::int64_t v) override { return host_->min_int64(v); }
  std::int64_t max_int64(std::int64_t v) override { return host_->max_int64(v); }
  std::vector<std::string> allgather_strings(const std::string& s) override { return host_->allgather_strings(s); }
  void broadcast_bytes(std::vector<char>& bytes, int root) override { host_->broadcast_bytes(bytes, root); }

  std::unique_ptr<Communicator> split(int color, int key) override;

  // Pinned buffers of finished point-to-point requests, reused by the next ones.
  PinnedBuffer take_pinned(std::size_t bytes);
  void give_back_pinned(PinnedBuffer buf);
  HostStaging& staging() { return staging_; }

 private:
  explicit HostStagedCommunicator(std::unique_ptr<Communicator> owned);
  std::unique_ptr<Communicator> owned_;
  Communicator* host_;
  HostStaging staging_;
  std::vector<PinnedBuffer> pool_;
};

}  // namespace gradsync
