// GPU tests without MPI (label gpu): device detection, DeviceBuffer / PinnedBuffer copies,
// Stream and Event, the memory footprint query.
//
// Where cuda_device_count() is 0 (no driver, "driver version is insufficient", nothing
// visible) the tests that need a device skip with CUDA's reason; the detection itself and
// the refusal message are checked on every machine.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "cuda/device.hpp"
#include "cuda/memory.hpp"
#include "cuda/mpi_cuda.hpp"
#include "cuda/stream.hpp"

namespace gs = gradsync;

namespace {

#define GS_REQUIRE_GPU()                                                                        \
  do {                                                                                          \
    std::string why_;                                                                           \
    if (gs::cuda_device_count(&why_) == 0) GTEST_SKIP() << "no usable CUDA device (" << why_ << ")"; \
    gs::select_cuda_device(0);                                                                  \
  } while (0)

TEST(CudaDevice, CountAndReasonAgree) {
  std::string why;
  const int n = gs::cuda_device_count(&why);
  EXPECT_GE(n, 0);
  if (n == 0) {
    EXPECT_FALSE(why.empty());
    EXPECT_EQ(why, gs::cuda_unavailable_reason());
    EXPECT_NE(why.find("cudaGetDeviceCount"), std::string::npos) << why;
  } else {
    EXPECT_TRUE(why.empty()) << why;
  }
  EXPECT_EQ(gs::cuda_device_count(), n);  // computed once, same answer
}

TEST(CudaDevice, RequireRefusesWithoutDevice) {
  if (gs::cuda_device_count() > 0) {
    EXPECT_NO_THROW(gs::require_cuda_device());
    return;
  }
  try {
    gs::require_cuda_device();
    FAIL() << "require_cuda_device() did not throw without a device";
  } catch (const gs::NoCudaDeviceError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("no CUDA device found (", 0), 0u) << msg;
    EXPECT_NE(msg.find(gs::cuda_unavailable_reason()), std::string::npos) << msg;
  }
  EXPECT_THROW(gs::select_cuda_device(0), gs::NoCudaDeviceError);
}

TEST(CudaDevice, PlacementPrefersSlurmLocalId) {
  const char* old = std::getenv("SLURM_LOCALID");
  const std::string saved = old ? old : "";
  unsetenv("SLURM_LOCALID");
  EXPECT_EQ(gs::placement_local_rank(3), 3);
  setenv("SLURM_LOCALID", "5", 1);
  EXPECT_EQ(gs::placement_local_rank(3), 5);
  setenv("SLURM_LOCALID", "x1", 1);  // not a number: ignored
  EXPECT_EQ(gs::placement_local_rank(3), 3);
  if (old) setenv("SLURM_LOCALID", saved.c_str(), 1);
  else unsetenv("SLURM_LOCALID");
}

TEST(CudaDevice, MpiCudaAwareAnswersConsistently) {
  const std::string text = gs::mpi_cuda_aware_text();
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(gs::mpi_cuda_aware(), text == "yes") << text;
}

TEST(CudaDevice, InfoAndMemory) {
  GS_REQUIRE_GPU();
  const gs::CudaDeviceInfo info = gs::cuda_device_info(0);
  EXPECT_FALSE(info.name.empty());
  EXPECT_FALSE(info.pci_bus_id.empty());
  EXPECT_GT(info.total_bytes, 0u);
  EXPECT_GE(info.cc_major, 1);
  const gs::GpuMemory before = gs::gpu_memory_info();
  EXPECT_GT(before.total_bytes, 0u);
  EXPECT_LE(before.free_bytes, before.total_bytes);
  gs::DeviceBuffer big(std::size_t{256} << 20);
  const gs::GpuMemory after = gs::gpu_memory_info();
  EXPECT_LE(after.free_bytes, after.total_bytes);
  // Other processes may allocate too; only our own 256 MiB is certain to be in use.
  EXPECT_GE(after.used_bytes(), std::size_t{256} << 20);
  EXPECT_NE(gs::cuda_version_text().find("CUDA runtime"), std::string::npos);
}

TEST(CudaMemory, RoundTripThroughDeviceAndPinned) {
  GS_REQUIRE_GPU();
  gs::Stream stream;
  for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{(1 << 20) + 3}}) {
    std::vector<std::uint32_t> in(n);
    std::iota(in.begin(), in.end(), 17u);
    gs::DeviceBuffer a(n * 4), b(n * 4);
    gs::PinnedBuffer pinned(n * 4);
    gs::copy_to_device(a.get(), in.data(), n * 4, stream.get());
    gs::copy_device_to_device(b.get(), a.get(), n * 4, stream.get());
    gs::copy_to_host(pinned.get(), b.get(), n * 4, stream.get());
    const auto* out = pinned.as<std::uint32_t>();
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += out[i] != in[i] ? 1 : 0;
    EXPECT_EQ(wrong, 0u) << "n = " << n;
  }
}

TEST(CudaMemory, PinnedBufferGrowsAndMoves) {
  GS_REQUIRE_GPU();
  gs::PinnedBuffer p(16);
  ASSERT_NE(p.get(), nullptr);
  p.reserve(8);  // no shrink
  EXPECT_EQ(p.bytes(), 16u);
  p.reserve(1 << 20);
  EXPECT_GE(p.bytes(), std::size_t{1} << 20);
  gs::PinnedBuffer q(std::move(p));
  EXPECT_EQ(p.get(), nullptr);
  EXPECT_NE(q.get(), nullptr);
}

TEST(CudaStream, EventsOrderAndTime) {
  GS_REQUIRE_GPU();
  gs::Stream stream;
  gs::Event start, end, done(false);
  gs::DeviceBuffer buf(std::size_t{64} << 20);
  start.record(stream.get());
  GS_CUDA(cudaMemsetAsync(buf.get(), 0x5a, buf.bytes(), stream.get()));
  end.record(stream.get());
  done.record(stream.get());
  end.synchronize();
  EXPECT_TRUE(end.query());
  done.synchronize();
  EXPECT_TRUE(done.query());
  const float ms = gs::Event::elapsed_ms(start, end);
  EXPECT_GE(ms, 0.f);
  EXPECT_LT(ms, 10000.f);
  stream.synchronize();
  std::vector<unsigned char> host(4096);
  gs::copy_to_host(host.data(), buf.get(), host.size(), stream.get());
  for (unsigned char c : host) ASSERT_EQ(c, 0x5a);
}

}  // namespace
