// The one Reducer on the CUDA device (device/cuda.hpp) against the host reducer, on the
// same inputs (tests/train/device_reducer_cases.hpp): every compressor and mixed
// precision. --backend mpi (every bucket staged through pinned memory; ranks may share a
// GPU): bit-identical to the host. --backend nccl (one GPU per rank): none, fp16, bf16,
// qsgd and topk run in place with the CUDA kernels (the all-reduces within rounding of the
// host's ring, the all-gathers bit-identical), PowerSGD and 1-bit are staged (bit-identical). Skips, on every rank alike, where a rank has no usable GPU.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "comm/mpi_comm.hpp"
#include "cuda/device.hpp"
#include "device/cuda.hpp"
#include "../train/device_reducer_cases.hpp"
#include "../mpi_gtest_main.hpp"

namespace gs = gradsync;

namespace {

gs::MpiCommunicator* g_world = nullptr;

bool every_rank_has_gpu(std::string* why) {
  std::string mine;
  const bool have = gs::cuda_device_count(&mine) > 0;
  if (g_world->min_int64(have ? 1 : 0) == 1) return true;
  *why = have ? "another rank has no usable CUDA device" : mine;
  return false;
}

TEST(CudaDeviceReducer, StagedMpiMatchesHostForEveryCompressor) {
  std::string why;
  if (!every_rank_has_gpu(&why)) GTEST_SKIP() << "no usable CUDA device (" << why << ")";
  auto dev = gs::device::make_cuda_device(g_world->local_rank());
  for (const auto& c : gs::test::every_device_case()) {
    gs::test::expect_device_matches_host(*g_world, *dev, "mpi", c, /*tol=*/0);
    if (HasFatalFailure()) return;
  }
}

TEST(CudaDeviceReducer, NcclMatchesHostForEveryCompressor) {
  std::string why;
  if (!every_rank_has_gpu(&why)) GTEST_SKIP() << "no usable CUDA device (" << why << ")";
  const bool one_each = gs::cuda_device_count() >= g_world->local_size();
  if (g_world->min_int64(one_each ? 1 : 0) == 0) GTEST_SKIP() << "NCCL needs one GPU per rank";
  auto dev = gs::device::make_cuda_device(g_world->local_rank());
  for (const auto& c : gs::test::every_device_case()) {
    // In place: none and the half casts are reduced by NCCL's own all-reduce (its summation
    // order: within rounding); QSGD and top-k move bits (all-gather) and decode with the
    // CUDA kernels (the CPU's bits). PowerSGD runs its products on cuBLAS and its
    // Gram-Schmidt in double on the device, and NCCL sums P and Q in its own order: within
    // rounding, through the orthogonalisation's conditioning. 1-bit moves bits; its scales
    // are double sums in another order than the CPU's (the last bit of a scale).
    const std::string name = c.spec.substr(0, c.spec.find(':'));
    const double tol = name == "none"       ? 1e-5
                       : name == "fp16"     ? 2e-3
                       : name == "bf16"     ? 1.6e-2
                       : name == "powersgd" ? 1e-3
                       : name == "onebit"   ? 1e-5
                                            : 0;
    gs::test::expect_device_matches_host(*g_world, *dev, "nccl", c, tol);
    if (HasFatalFailure()) return;
  }
}

}  // namespace

int main(int argc, char** argv) {
  return gs::test_support::run_mpi_gtests(argc, argv, "test_device_reducer_cuda_mpi",
                                          [](gs::MpiCommunicator* w) { g_world = w; });
}
