// The one Reducer on a device whose buckets are not host memory (run on 1..4 ranks), on
// a machine without a GPU: StagingDevice keeps "device" arrays in memory of its own,
// reports host_memory() == false, so the reducer takes the staged path (download into a
// host mirror, compressor, upload), and checks the ordering protocol of device.hpp (a
// bucket is waited for only after it was produced in this step, the communication thread
// entered once). Every compressor (and mixed precision) must give bit-identical gradients
// and the same wire statistics as the host reducer (device_reducer_cases.hpp); the CUDA
// device runs the same cases in tests/gpu.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/mpi_comm.hpp"
#include "core/error.hpp"
#include "device/host.hpp"
#include "device_reducer_cases.hpp"
#include "../mpi_gtest_main.hpp"

namespace gs = gradsync;

namespace {

gs::Communicator* g_world = nullptr;  // set by main() for the tests' lifetime

// Host memory posing as device memory; everything else is the host device's. With
// in_place, it also offers a "device" communicator (a split of the host one: the memory is
// host memory after all) and the host BucketKernels, so the reducer takes the in-place
// device path for compressors that accept device memory, as with NCCL on a GPU.
class StagingDevice final : public gs::device::Device {
 public:
  explicit StagingDevice(bool in_place = false)
      : in_place_(in_place), kernels_(gs::make_host_bucket_kernels()) {}
  std::string name() const override { return in_place_ ? "in-place-test" : "staging-test"; }
  bool host_memory() const override { return false; }
  // Separate allocations of host memory: the "device" arrays and the mirrors never alias.
  std::unique_ptr<gs::device::Array> zeros(std::size_t n) override { return host().zeros(n); }
  std::unique_ptr<gs::device::Array> host_mirror(std::size_t n) override { return host().zeros(n); }
  // Copies by the reducer's communication thread (staging); the test's own uploads and
  // downloads on this thread do not count.
  void download(const float* src, float* dst, std::size_t n) override {
    if (std::this_thread::get_id() != owner_) ++copies;
    std::memcpy(dst, src, n * sizeof(float));
  }
  void upload(const float* src, float* dst, std::size_t n) override {
    if (std::this_thread::get_id() != owner_) ++copies;
    std::memcpy(dst, src, n * sizeof(float));
  }
  void set_value(float* x, float v) override { *x = v; }
  void prepare_buckets(std::size_t nb) override {
    std::lock_guard<std::mutex> lock(mu_);
    produced_.assign(nb, 0);
    waited_.assign(nb, 0);
  }
  void bucket_produced(std::size_t b) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++produced_.at(b);
  }
  void wait_produced(std::size_t b) override {
    std::lock_guard<std::mutex> lock(mu_);
    // Each bucket is produced once per sync step and waited for once, after that.
    if (++waited_.at(b) > produced_.at(b)) ++order_errors;
  }
  void enter_comm_thread() override { ++entered; }
  void synchronize() override {}
  bool unscale_check_finite(float* x, std::size_t n, float inv) override {
    return host().unscale_check_finite(x, n, inv);
  }
  void fill_zero(float* x, std::size_t n) override { host().fill_zero(x, n); }
  std::unique_ptr<gs::train::Optimizer> make_optimizer(const std::string& name,
                                                       const gs::train::OptimizerOptions& o) override {
    return host().make_optimizer(name, o);
  }
  gs::device::GradientGenerator& generator() override { return host().generator(); }
  gs::BucketKernels* bucket_kernels() override { return kernels_.get(); }
  std::unique_ptr<gs::train::Workload> make_real_workload(const std::string& m, const gs::train::SyntheticDataset& d,
                                                          std::int64_t b, gs::DType p) override {
    return host().make_real_workload(m, d, b, p);
  }
  std::unique_ptr<gs::Communicator> make_communicator(gs::Communicator& host_comm, const std::string&) override {
    return in_place_ ? host_comm.split(0, host_comm.rank()) : nullptr;
  }

  std::atomic<long> copies{0}, entered{0}, order_errors{0};

 private:
  static gs::device::Device& host() { return gs::device::host_device(); }
  bool in_place_;
  std::unique_ptr<gs::BucketKernels> kernels_;
  std::thread::id owner_ = std::this_thread::get_id();
  std::mutex mu_;
  std::vector<long> produced_, waited_;  // per bucket, over the run
};

TEST(DeviceReducerMpi, StagedPathMatchesHostForEveryCompressor) {
  for (const auto& c : gs::test::every_device_case()) {
    StagingDevice dev;
    gs::test::expect_device_matches_host(*g_world, dev, "mpi", c, /*tol=*/0);
    EXPECT_EQ(dev.entered.load(), 1) << c.spec;
    EXPECT_EQ(dev.order_errors.load(), 0) << c.spec;
    EXPECT_GT(dev.copies.load(), 0) << c.spec;  // staged: every bucket went down and up
    if (HasFatalFailure()) return;
  }
}

TEST(DeviceReducerMpi, InPlacePathMatchesHostForEveryCompressor) {
  // Every compressor accepts device memory: in place, its kernels through the device's
  // BucketKernels (here the host ones), its state in the device's memory, nothing staged.
  for (const auto& c : gs::test::every_device_case()) {
    StagingDevice dev(/*in_place=*/true);
    gs::test::expect_device_matches_host(*g_world, dev, "test", c, /*tol=*/0, /*in_place_algo=*/"ring");
    const std::string name = c.spec.substr(0, c.spec.find(':'));
    const bool plain_only = c.spec == "none" || c.spec == "powersgd:rank=2";  // start=10: 3 plain steps
    EXPECT_EQ(dev.bucket_kernels()->launches() > 0, !plain_only) << c.spec << ": device kernels";
    EXPECT_EQ(dev.copies.load(), 0) << c.spec << ": in place, never staged";
    EXPECT_EQ(dev.order_errors.load(), 0) << c.spec;
    if (HasFatalFailure()) return;
  }
}

TEST(DeviceReducerMpi, HostDeviceReducesInPlace) {
  // The host device itself: no staging, same results (the reference path of the above).
  gs::test::expect_device_matches_host(*g_world, gs::device::host_device(), "mpi", {"powersgd:rank=2"}, 0);
}

TEST(CommunicatorSeam, NonBlockingCollectivesOnHostMemory) {
  // The seam's iallreduce / iallgather / ialltoall on MPI: complete on the calling thread
  // (an inactive request that wait() passes), right results, and a device event refused.
  gs::Communicator& w = *g_world;
  const int p = w.size(), r = w.rank();
  std::vector<float> x(5, static_cast<float>(r + 1));
  gs::Request a = w.iallreduce(x.data(), x.data(), x.size(), gs::DType::F32, gs::RedOp::Sum);
  w.wait(a);
  for (float v : x) EXPECT_EQ(v, static_cast<float>(p * (p + 1) / 2));
  std::vector<float> mine(2, static_cast<float>(r)), all(2 * static_cast<std::size_t>(p), -1.f);
  gs::Request g = w.iallgather(mine.data(), all.data(), 2, gs::DType::F32);
  w.wait(g);
  for (int q = 0; q < p; ++q) EXPECT_EQ(all[2 * static_cast<std::size_t>(q) + 1], static_cast<float>(q));
  std::vector<float> send(static_cast<std::size_t>(p)), recv(static_cast<std::size_t>(p), -1.f);
  for (int q = 0; q < p; ++q) send[static_cast<std::size_t>(q)] = static_cast<float>(100 * r + q);
  gs::Request t = w.ialltoall(send.data(), recv.data(), 1, gs::DType::F32);
  w.wait(t);
  for (int q = 0; q < p; ++q) EXPECT_EQ(recv[static_cast<std::size_t>(q)], static_cast<float>(100 * q + r));
  int fake_event = 0;
  EXPECT_THROW((void)w.iallreduce(x.data(), x.data(), 1, gs::DType::F32, gs::RedOp::Sum, &fake_event), gs::Error);
}

}  // namespace

int main(int argc, char** argv) {
  return gs::test_support::run_mpi_gtests(argc, argv, "test_device_reducer_mpi",
                                          [](gs::MpiCommunicator* w) { g_world = w; });
}
