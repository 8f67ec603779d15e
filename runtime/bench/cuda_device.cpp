// cuda_device.cpp — --device cuda of gradsync-bench (built only with GRADSYNC_HAVE_CUDA).
//
// CudaContext owns this rank's GPU, the device buffers, the NCCL communicator (made on first
// use: only --algo nccl needs one GPU per rank) and the host-staged communicator of
// pingpong. StagedCollective runs a host collective (ring, rd, mpi, ...) on device buffers:
//   device input -> pinned host (D2H), the host collective over MPI, pinned result -> device
//   (H2D), all inside run(), i.e. inside the timed region.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "bench/device.hpp"
#include "comm/nccl_comm.hpp"
#include "core/error.hpp"
#include "core/units.hpp"
#include "cuda/device.hpp"
#include "cuda/host_staging.hpp"
#include "cuda/memory.hpp"
#include "cuda/mpi_cuda.hpp"
#include "cuda/stream.hpp"

namespace gradsync::bench {

namespace {

class StagedCollective final : public Collective {
 public:
  StagedCollective(std::unique_ptr<Collective> host, DType t) : host_(std::move(host)), esz_(dtype_size(t)) {}

  bool has_redop() const override { return host_->has_redop(); }
  bool has_root() const override { return host_->has_root(); }
  Layout layout(std::size_t elems) const override { return host_->layout(elems); }
  double bus_factor() const override { return host_->bus_factor(); }
  bool has_input() const override { return host_->has_input(); }
  float input(std::size_t i) const override { return host_->input(i); }
  float expected(std::size_t i, const Layout& l) const override { return host_->expected(i, l); }
  std::string algo_used(std::size_t bytes) const override { return host_->algo_used(bytes); }

  void reserve(std::size_t max_send_count, std::size_t max_recv_count) override {
    staging_.host(kSend, max_send_count * esz_);
    staging_.host(kRecv, max_recv_count * esz_);
    staging_.host(kInPlace, std::max(max_send_count, max_recv_count) * esz_);
    host_->reserve(max_send_count, max_recv_count);
  }

  void run(const void* send, void* recv, const Layout& l) override {
    void* hs = staging_.host(kSend, l.send_count * esz_);
    void* hr = staging_.host(kRecv, l.recv_count * esz_);
    if (host_->has_input()) staging_.to_host(hs, send, l.send_count * esz_);
    host_->run(hs, hr, l);
    staging_.to_device(recv, hr, l.recv_count * esz_);
  }

  void run_in_place(void* buf, const Layout& l) override {
    char* h = static_cast<char*>(staging_.host(kInPlace, std::max(l.send_count, l.recv_count) * esz_));
    char* d = static_cast<char*>(buf);
    const std::size_t in = l.ip_send_offset * esz_, out = l.ip_recv_offset * esz_;
    if (host_->has_input()) staging_.to_host(h + in, d + in, l.send_count * esz_);
    host_->run_in_place(h, l);
    staging_.to_device(d + out, h + out, l.recv_count * esz_);
  }

 private:
  static constexpr int kSend = 0, kRecv = 1, kInPlace = 2;
  std::unique_ptr<Collective> host_;
  std::size_t esz_;
  HostStaging staging_;
};

class CudaContext final : public DeviceContext {
 public:
  explicit CudaContext(Communicator& world)
      : device_(select_cuda_device(world.local_rank())), info_(cuda_device_info(device_)) {}

  std::vector<std::string> header_lines(const BenchOptions& o) const override {
    char gpu[512];
    std::snprintf(gpu, sizeof gpu, "device: cuda (rank 0: GPU %d %s, sm_%d%d, %s, %s; %s)", device_,
                  info_.name.c_str(), info_.cc_major, info_.cc_minor, info_.pci_bus_id.c_str(),
                  format_bytes(static_cast<double>(info_.total_bytes)).c_str(), cuda_version_text().c_str());
    std::vector<std::string> lines{gpu};
    if (o.algo == "nccl") {
      lines.push_back("nccl: " + nccl_version_text() +
                      "; buffers in GPU memory; each call is enqueued on the NCCL communicator's stream and an event "
                      "after it is waited for before the clock stops");
    } else {
      lines.push_back("staging: buffers in GPU memory; MPI CUDA-aware: " + mpi_cuda_aware_text() +
                      "; every call copies its input GPU->host and its result host->GPU through pinned memory "
                      "INSIDE the timed region (fill and check copies are outside)");
    }
    return lines;
  }

  std::string footer_line() const override {
    const GpuMemory m = gpu_memory_info();
    return "GPU memory (rank 0, cudaMemGetInfo after the sweep): " +
           format_bytes(static_cast<double>(m.used_bytes())) + " used of " +
           format_bytes(static_cast<double>(m.total_bytes));
  }

  std::string timing_note(const BenchOptions& o) const override {
    return o.algo == "nccl" ? "; device cuda: NCCL call waited for (event) before the clock stops"
                            : "; device cuda: includes the host staging copies (GPU->host input, host->GPU result)";
  }

  void* alloc(std::size_t bytes) override {
    buffers_.emplace_back(std::max<std::size_t>(bytes, 64));
    return buffers_.back().get();
  }
  void upload(void* dev, const void* host, std::size_t bytes) override {
    copy_to_device(dev, host, bytes, stream_.get());
  }
  void download(void* host, const void* dev, std::size_t bytes) override {
    copy_to_host(host, dev, bytes, stream_.get());
  }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    copy_device_to_device(dst, src, bytes, stream_.get());
  }

  std::unique_ptr<Collective> make_collective(const std::string& op, const CollectiveConfig& cfg,
                                              Communicator& world) override {
    if (cfg.algo == "nccl") {
      CollectiveConfig c = cfg;
      c.copy = [this](void* dst, const void* src, std::size_t bytes) { copy(dst, src, bytes); };
      return bench::make_collective(op, c, nccl(world));
    }
    return std::make_unique<StagedCollective>(bench::make_collective(op, cfg, world), cfg.dtype);
  }

  Communicator& p2p_comm(const std::string& algo, Communicator& world) override {
    if (algo == "nccl") return nccl(world);
    if (!staged_) staged_ = std::make_unique<HostStagedCommunicator>(world);
    return *staged_;
  }

 private:
  Communicator& nccl(Communicator& world) {
    if (!nccl_) nccl_ = std::make_unique<NcclCommunicator>(world, device_);
    return *nccl_;
  }

  int device_;
  CudaDeviceInfo info_;
  Stream stream_;                     // the fill/check copies
  std::vector<DeviceBuffer> buffers_;
  // Declared after the buffers: destroyed before them (NCCL may still reference them).
  std::unique_ptr<NcclCommunicator> nccl_;
  std::unique_ptr<HostStagedCommunicator> staged_;
};

}  // namespace

std::unique_ptr<DeviceContext> make_cuda_context(Communicator& world) {
  // Decide together: the lowest rank without a GPU speaks, every rank fails alike.
  std::string why;
  const bool have = cuda_device_count(&why) > 0;
  const std::int64_t first_missing = world.min_int64(have ? world.size() : world.rank());
  if (first_missing < world.size()) {
    throw NoCudaDeviceError(world.rank() == first_missing ? "no CUDA device found (" + where() + ": " + why + ")"
                                                         : std::string());
  }
  return std::make_unique<CudaContext>(world);
}

}  // namespace gradsync::bench
