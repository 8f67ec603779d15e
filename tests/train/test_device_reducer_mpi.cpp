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
#include "algos/allreduce.hpp"
#include "device/host.hpp"
#include "device_reducer_cases.hpp"
#include "../mpi_gtest_main.hpp"

namespace gs = gradsync;

namespace {

gs::Communicator* g_world = nullptr;  // set by main() for the tests' lifetime

// Host memory posing as device memory (host_memory() false, arrays of its own): what the
// test devices below share; everything else is the host device's.
class HostBackedDevice : public gs::device::Device {
 public:
  bool host_memory() const override { return false; }
  // Separate allocations of host memory: the "device" arrays and the mirrors never alias.
  std::unique_ptr<gs::device::Array> zeros(std::size_t n) override { return host().zeros(n); }
  std::unique_ptr<gs::device::Array> host_mirror(std::size_t n) override { return host().zeros(n); }
  void set_value(float* x, float v) override { *x = v; }
  bool unscale_check_finite(float* x, std::size_t n, float inv) override {
    return host().unscale_check_finite(x, n, inv);
  }
  void fill_zero(float* x, std::size_t n) override { host().fill_zero(x, n); }
  std::unique_ptr<gs::train::Optimizer> make_optimizer(const std::string& name,
                                                       const gs::train::OptimizerOptions& o) override {
    return host().make_optimizer(name, o);
  }
  gs::device::GradientGenerator& generator() override { return host().generator(); }
  std::unique_ptr<gs::train::Workload> make_real_workload(const std::string& m, const gs::train::SyntheticDataset& d,
                                                          std::int64_t b, gs::DType p) override {
    return host().make_real_workload(m, d, b, p);
  }

 protected:
  static gs::device::Device& host() { return gs::device::host_device(); }
};

// The staging device: it checks the ordering protocol of device.hpp and counts the
// reducer's copies. With in_place, it also offers a "device" communicator (a split of the
// host one: the memory is host memory after all) and the host BucketKernels, so the
// reducer takes the in-place device path for compressors that accept device memory, as
// with NCCL on a GPU.
class StagingDevice final : public HostBackedDevice {
 public:
  explicit StagingDevice(bool in_place = false)
      : in_place_(in_place), kernels_(gs::make_host_bucket_kernels()) {}
  std::string name() const override { return in_place_ ? "in-place-test" : "staging-test"; }
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
  gs::BucketKernels* bucket_kernels() override { return kernels_.get(); }
  std::unique_ptr<gs::Communicator> make_communicator(gs::Communicator& host_comm, const std::string&) override {
    return in_place_ ? host_comm.split(0, host_comm.rank()) : nullptr;
  }

  std::atomic<long> copies{0}, entered{0}, order_errors{0};

 private:
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

// ---- the event hand-off (BucketKernels::ready) ------------------------------------------------

// Host kernels that answer ready() with a fresh token, as a device's kernels answer with an
// event recorded on their stream. Everything else is the host kernels'.
class EventKernels final : public gs::BucketKernels {
 public:
  const void* ready() override {
    ++issued;
    last_ = &tokens_[static_cast<std::size_t>(issued % 2)];  // a different address each time
    return last_;
  }
  const void* last() const { return last_; }
  long issued = 0;

  void cast_to_half(gs::DType t, const float* in, std::uint16_t* out, std::size_t n, float s) override {
    h_->cast_to_half(t, in, out, n, s);
  }
  void cast_from_half(gs::DType t, const std::uint16_t* in, float* out, std::size_t n, float s) override {
    h_->cast_from_half(t, in, out, n, s);
  }
  void qsgd_encode(const float* x, std::size_t n, std::size_t block, std::uint32_t levels, gs::kernels::RngKey key,
                   float* norms, std::uint8_t* codes) override {
    h_->qsgd_encode(x, n, block, levels, key, norms, codes);
  }
  void qsgd_dequantize(const std::uint8_t* codes, const float* norms, std::size_t n, std::size_t block,
                       std::uint32_t levels, float* out, bool acc) override {
    h_->qsgd_dequantize(codes, norms, n, block, levels, out, acc);
  }
  void topk_select(const float* x, std::size_t n, std::size_t k, std::int32_t* idx, float* vals) override {
    h_->topk_select(x, n, k, idx, vals);
  }
  void scatter_add(const std::int32_t* idx, const float* vals, std::size_t k, float s, float* out) override {
    h_->scatter_add(idx, vals, k, s, out);
  }
  void topk_encode_ef(float* x, std::size_t n, std::size_t k, float* mem, std::int32_t* idx, float* vals) override {
    h_->topk_encode_ef(x, n, k, mem, idx, vals);
  }
  void sign_compress_ef(const float* x, float* last, float* scale, std::size_t n, std::uint8_t* bits) override {
    h_->sign_compress_ef(x, last, scale, n, bits);
  }
  void sign_decompress(const std::uint8_t* bits, const float* scale, std::size_t n, float* out, bool acc) override {
    h_->sign_decompress(bits, scale, n, out, acc);
  }
  void powersgd_project(float* a, const float* mem, std::int64_t r, std::int64_t c, const float* q, int k,
                        float* p) override {
    h_->powersgd_project(a, mem, r, c, q, k, p);
  }
  void orthogonalize(float* p, std::int64_t rows, int k) override { h_->orthogonalize(p, rows, k); }
  void powersgd_back_project(const float* a, std::int64_t r, std::int64_t c, const float* p, int k,
                             float* q) override {
    h_->powersgd_back_project(a, r, c, p, k, q);
  }
  void powersgd_expand(float* a, float* mem, std::int64_t r, std::int64_t c, const float* p, const float* q,
                       int k) override {
    h_->powersgd_expand(a, mem, r, c, p, q, k);
  }
  void add_inplace(float* x, const float* mem, std::size_t n) override { h_->add_inplace(x, mem, n); }
  void scale_inplace(float* x, std::size_t n, float s) override { h_->scale_inplace(x, n, s); }
  void divide_inplace(float* x, std::size_t n, float d) override { h_->divide_inplace(x, n, d); }
  void average_ef(float* x, float* mem, const float* sum, std::size_t n, float d) override {
    h_->average_ef(x, mem, sum, n, d);
  }
  void copy(void* dst, const void* src, std::size_t bytes) override { h_->copy(dst, src, bytes); }
  void zero(void* dst, std::size_t bytes) override { h_->zero(dst, bytes); }
  void upload(void* dst, const void* src, std::size_t bytes) override { h_->upload(dst, src, bytes); }
  void* scratch(int slot, std::size_t bytes) override { return h_->scratch(slot, bytes); }
  void* state(std::uint64_t owner, int bucket, int slot, std::size_t bytes) override {
    return h_->state(owner, bucket, slot, bytes);
  }
  void fence() override {}

 private:
  std::unique_ptr<gs::BucketKernels> h_ = gs::make_host_bucket_kernels();
  int tokens_[2] = {0, 0};
  const void* last_ = nullptr;
};

// The "device" communicator of the event test: each i* collective must come with the token
// of the ready() called just before it (the event of every kernel launched so far); it is
// then run on the host communicator, which has no events.
class EventCheckingComm final : public gs::Communicator {
 public:
  // Counts into the device's counters (this communicator goes with the test's reducer).
  EventCheckingComm(std::unique_ptr<gs::Communicator> inner, const EventKernels& k, long& ordered, long& unordered)
      : in_(std::move(inner)), k_(k), ordered(ordered), unordered(unordered) {}
  void check(const void* after) {
    if (after != nullptr && after == k_.last()) ++ordered;
    else ++unordered;
  }
  gs::Request iallreduce(const void* s, void* r, std::size_t n, gs::DType t, gs::RedOp op, const void* after) override {
    check(after);
    return in_->iallreduce(s, r, n, t, op, nullptr);
  }
  gs::Request iallgather(const void* s, void* r, std::size_t n, gs::DType t, const void* after) override {
    check(after);
    return in_->iallgather(s, r, n, t, nullptr);
  }
  gs::Request ialltoall(const void* s, void* r, std::size_t n, gs::DType t, const void* after) override {
    check(after);
    return in_->ialltoall(s, r, n, t, nullptr);
  }
  // Blocking collectives bypass the hand-off: counted as unordered.
  void allreduce(const void* s, void* r, std::size_t n, gs::DType t, gs::RedOp op) override {
    ++unordered;
    in_->allreduce(s, r, n, t, op);
  }
  void allgather(const void* s, void* r, std::size_t n, gs::DType t) override {
    ++unordered;
    in_->allgather(s, r, n, t);
  }
  void alltoall(const void* s, void* r, std::size_t n, gs::DType t) override {
    ++unordered;
    in_->alltoall(s, r, n, t);
  }
  int rank() const override { return in_->rank(); }
  int size() const override { return in_->size(); }
  int local_rank() const override { return in_->local_rank(); }
  int local_size() const override { return in_->local_size(); }
  int node_id() const override { return in_->node_id(); }
  int node_count() const override { return in_->node_count(); }
  std::string backend() const override { return "event-test"; }
  std::string hostname() const override { return in_->hostname(); }
  gs::Request isend(const void* b, std::size_t n, int peer, int tag) override { return in_->isend(b, n, peer, tag); }
  gs::Request irecv(void* b, std::size_t n, int peer, int tag) override { return in_->irecv(b, n, peer, tag); }
  void reduce_scatter(const void* s, void* r, std::size_t n, gs::DType t, gs::RedOp op) override {
    in_->reduce_scatter(s, r, n, t, op);
  }
  void broadcast(void* b, std::size_t n, gs::DType t, int root) override { in_->broadcast(b, n, t, root); }
  void barrier() override { in_->barrier(); }
  double max_double(double v) override { return in_->max_double(v); }
  double sum_double(double v) override { return in_->sum_double(v); }
  std::int64_t min_int64(std::int64_t v) override { return in_->min_int64(v); }
  std::int64_t max_int64(std::int64_t v) override { return in_->max_int64(v); }
  std::vector<std::string> allgather_strings(const std::string& s) override { return in_->allgather_strings(s); }
  void broadcast_bytes(std::vector<char>& b, int root) override { in_->broadcast_bytes(b, root); }
  std::unique_ptr<gs::Communicator> split(int color, int key) override { return in_->split(color, key); }

 private:
  std::unique_ptr<gs::Communicator> in_;
  const EventKernels& k_;

 public:
  long& ordered;
  long& unordered;
};

// The user's all-reduce on the event test's device communicator: ring (the host reducer's
// bits), taking the event as the library's own all-reduce does.
class EventRing final : public gs::AllreduceAlgorithm {
 public:
  explicit EventRing(EventCheckingComm& c) : c_(c), ring_(gs::make_allreduce("ring", c)) {}
  std::string name() const override { return "ring"; }
  void run(const void* s, void* r, std::size_t n, gs::DType t, gs::RedOp op) override { ring_->run(s, r, n, t, op); }
  gs::Request start(const void* s, void* r, std::size_t n, gs::DType t, gs::RedOp op, const void* after) override {
    c_.check(after);
    ring_->run(s, r, n, t, op);
    return {};
  }

 private:
  EventCheckingComm& c_;
  std::unique_ptr<gs::AllreduceAlgorithm> ring_;
};

// The in-place device path with EventKernels and EventCheckingComm.
class EventDevice final : public HostBackedDevice {
 public:
  std::string name() const override { return "event-test"; }
  void download(const float* src, float* dst, std::size_t n) override { std::memcpy(dst, src, n * sizeof(float)); }
  void upload(const float* src, float* dst, std::size_t n) override { std::memcpy(dst, src, n * sizeof(float)); }
  void prepare_buckets(std::size_t) override {}
  void bucket_produced(std::size_t) override {}
  void wait_produced(std::size_t) override {}
  void enter_comm_thread() override {}
  void synchronize() override {}
  gs::BucketKernels* bucket_kernels() override { return &kernels; }
  std::unique_ptr<gs::Communicator> make_communicator(gs::Communicator& host_comm, const std::string&) override {
    return std::make_unique<EventCheckingComm>(host_comm.split(0, host_comm.rank()), kernels, ordered, unordered);
  }

  EventKernels kernels;
  long ordered = 0, unordered = 0;  // collectives with / without the latest event
};

TEST(DeviceReducerMpi, CollectivesFollowTheKernelsEvent) {
  // Every collective of every compressor on device memory is handed the event of the
  // kernels before it (BucketKernels::ready) rather than waiting on the host, and the
  // results stay the host reducer's bits. ("none" has no kernels: its all-reduce follows the
  // bucket's production, which the reducer waits for.)
  for (const auto& c : gs::test::every_device_case()) {
    EventDevice dev;
    gs::test::expect_device_matches_host(*g_world, dev, "test", c, /*tol=*/0, "ring",
                                         [&](gs::Communicator& comm) -> std::unique_ptr<gs::AllreduceAlgorithm> {
                                           return std::make_unique<EventRing>(dynamic_cast<EventCheckingComm&>(comm));
                                         });
    const bool plain_only = c.spec == "none" || c.spec == "powersgd:rank=2";  // plain all-reduces (run)
    EXPECT_EQ(dev.ordered > 0, !plain_only) << c.spec << ": collectives handed the kernels' event";
    EXPECT_EQ(dev.unordered, 0) << c.spec << ": collectives without the latest event";
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
