// GPU tests through mpiexec (label gpu): NcclCommunicator's collectives and point to point,
// and MPI on GPU buffers through host staging (HostStagedAllreduce, HostStagedCommunicator).
//
// Skips, decided together by all ranks so that no rank waits for another:
//   - every test, when some rank has no usable CUDA device (cuda_device_count() == 0);
//   - the NCCL tests, when a node has more ranks than GPUs (NCCL refuses two ranks on one
//     GPU; the GPU machines lent to this project have one, so 2-rank NCCL needs more);
//   - NcclFailure.*, unless GRADSYNC_TEST_NCCL_FAILURE=1 (CTest sets it in its own test,
//     with a short GRADSYNC_TIMEOUT_S, because that test aborts its communicator).
// Host staging runs with several ranks on one GPU, which is what it is for.
//
// Inputs are small integers, exact in float, half and bfloat16, so sums are exact in any
// order; NCCL's avg (pre-multiplied by 1/n) is compared with a tolerance of n + 1 units.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "algos/allreduce.hpp"
#include "comm/mpi_comm.hpp"
#include "comm/nccl_comm.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "cuda/device.hpp"
#include "cuda/host_staging.hpp"
#include "cuda/memory.hpp"
#include "cuda/stream.hpp"
#include "../mpi_gtest_main.hpp"

namespace gs = gradsync;
using gs::DType;
using gs::RedOp;

namespace {

gs::MpiCommunicator* g_world = nullptr;
std::unique_ptr<gs::NcclCommunicator> g_nccl;  // made by the first NCCL test, ended before MPI
std::unique_ptr<gs::Stream> g_stream;          // the tests' own copies

// ---- collective skip decisions ---------------------------------------------------------------

bool every_rank_has_gpu(std::string* why) {
  std::string mine;
  const bool have = gs::cuda_device_count(&mine) > 0;
  if (g_world->min_int64(have ? 1 : 0) == 1) return true;
  *why = have ? "another rank has no usable CUDA device" : mine;
  return false;
}

bool one_gpu_per_rank(std::string* why) {
  const bool ok = gs::cuda_device_count() >= g_world->local_size();
  if (g_world->min_int64(ok ? 1 : 0) == 1) return true;
  *why = "NCCL needs one GPU per rank: " + std::to_string(g_world->local_size()) + " ranks on this node, " +
         std::to_string(gs::cuda_device_count()) + " GPU(s)";
  return false;
}

// ---- host <-> device values -----------------------------------------------------------------

// A device buffer holding `values` rounded to `t` (plus `extra` poisoned elements).
gs::DeviceBuffer upload(const std::vector<float>& values, DType t, std::size_t extra = 0) {
  const std::size_t esz = gs::dtype_size(t), n = values.size() + extra;
  std::vector<unsigned char> bytes(std::max<std::size_t>(n, 1) * esz, 0xff);
  for (std::size_t i = 0; i < values.size(); ++i) gs::store_from_f32(bytes.data(), i, t, values[i]);
  gs::DeviceBuffer d(bytes.size());
  gs::copy_to_device(d.get(), bytes.data(), bytes.size(), g_stream->get());
  return d;
}

std::vector<float> download(const void* dev, std::size_t n, DType t) {
  std::vector<unsigned char> bytes(std::max<std::size_t>(n, 1) * gs::dtype_size(t));
  gs::copy_to_host(bytes.data(), dev, n * gs::dtype_size(t), g_stream->get());
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = gs::load_as_f32(bytes.data(), i, t);
  return out;
}

gs::DeviceBuffer poisoned(std::size_t n, DType t) {
  gs::DeviceBuffer d(std::max<std::size_t>(n, 1) * gs::dtype_size(t));
  GS_CUDA(cudaMemsetAsync(d.get(), 0xff, d.bytes(), g_stream->get()));  // NaN in every type
  GS_CUDA(cudaStreamSynchronize(g_stream->get()));
  return d;
}

char* at(const gs::DeviceBuffer& d, std::size_t elem, DType t) {
  return d.as<char>() + elem * gs::dtype_size(t);
}

// Input of rank r for reductions: exact in every type for up to 8 ranks.
float rin(int r, std::size_t i) { return static_cast<float>(r + 1 + static_cast<int>(i % 7)); }
float rsum(int n, std::size_t i) {
  float s = 0;
  for (int r = 0; r < n; ++r) s += rin(r, i);
  return s;
}
// Input of rank r for data movement: distinct per rank and index, exact in every type.
float mval(int r, std::size_t i) { return static_cast<float>((r * 37 + static_cast<int>(i % 1000) * 11 + 1) % 251); }

std::vector<float> values(std::size_t n, float (*f)(int, std::size_t), int r) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = f(r, i);
  return v;
}

double ulp_tol(DType t, int n) {
  const int mantissa = t == DType::F32 ? 23 : t == DType::F16 ? 10 : 7;
  return (n + 1) * std::ldexp(1.0, -mantissa);
}

// Count of elements of `got` different from want(i); rel > 0 allows a relative error.
template <typename F>
std::size_t wrong(const std::vector<float>& got, F&& want, double rel = 0) {
  std::size_t w = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], e = want(i);
    if (g == e) continue;
    if (rel > 0 && std::fabs(g - e) <= rel * std::fabs(e)) continue;
    ++w;
  }
  return w;
}

const DType kTypes[] = {DType::F32, DType::F16, DType::BF16};

// ---- fixtures -----------------------------------------------------------------------------------

class GpuMpiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!every_rank_has_gpu(&why)) GTEST_SKIP() << "no usable CUDA device (" << why << ")";
    gs::select_cuda_device(g_world->local_rank());
    if (!g_stream) g_stream = std::make_unique<gs::Stream>();
  }
  int rank() const { return g_world->rank(); }
  int size() const { return g_world->size(); }
};

class NcclTest : public GpuMpiTest {
 protected:
  void SetUp() override {
    GpuMpiTest::SetUp();
    if (IsSkipped()) return;
    std::string why;
    if (!one_gpu_per_rank(&why)) GTEST_SKIP() << why;
    if (!g_nccl) g_nccl = std::make_unique<gs::NcclCommunicator>(*g_world);
    comm_ = g_nccl.get();
  }
  gs::NcclCommunicator* comm_ = nullptr;
};

using StagedTest = GpuMpiTest;

// ---- NCCL ---------------------------------------------------------------------------------------

TEST_F(NcclTest, Identity) {
  EXPECT_EQ(comm_->backend(), "nccl");
  EXPECT_EQ(comm_->rank(), rank());
  EXPECT_EQ(comm_->size(), size());
  EXPECT_GE(comm_->device(), 0);
  EXPECT_FALSE(comm_->aborted());
  EXPECT_NE(gs::nccl_version_text().find("NCCL 2."), std::string::npos);
  comm_->barrier();
}

TEST_F(NcclTest, AllreduceEveryTypeOpAndPlace) {
  const int n = size();
  for (DType t : kTypes)
    for (RedOp op : {RedOp::Sum, RedOp::Avg})
      for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{65537}})
        for (bool in_place : {false, true}) {
          SCOPED_TRACE(std::string(gs::dtype_name(t)) + " " + gs::redop_name(op) + " count " +
                       std::to_string(count) + (in_place ? " in place" : " out of place"));
          gs::DeviceBuffer send = upload(values(count, rin, rank()), t);
          gs::DeviceBuffer recv = in_place ? gs::DeviceBuffer() : poisoned(count, t);
          void* out = in_place ? send.get() : recv.get();
          comm_->allreduce(send.get(), out, count, t, op);
          auto want = [&](std::size_t i) {
            const double s = rsum(n, i);
            return op == RedOp::Avg ? s / n : s;
          };
          EXPECT_EQ(wrong(download(out, count, t), want, op == RedOp::Avg ? ulp_tol(t, n) : 0), 0u);
          if (!in_place) {
            EXPECT_EQ(wrong(download(send.get(), count, t), [&](std::size_t i) { return rin(rank(), i); }), 0u);
          }
        }
}

TEST_F(NcclTest, ReduceScatterThreeForms) {
  const int n = size();
  const DType t = DType::F32;
  for (std::size_t c : {std::size_t{1}, std::size_t{1000}, std::size_t{4099}}) {
    SCOPED_TRACE("count " + std::to_string(c));
    const std::size_t total = c * static_cast<std::size_t>(n);
    auto want = [&](std::size_t i) { return static_cast<double>(rsum(n, static_cast<std::size_t>(rank()) * c + i)); };
    // Out of place.
    gs::DeviceBuffer send = upload(values(total, rin, rank()), t);
    gs::DeviceBuffer recv = poisoned(c, t);
    comm_->reduce_scatter(send.get(), recv.get(), c, t, RedOp::Sum);
    EXPECT_EQ(wrong(download(recv.get(), c, t), want), 0u) << "out of place";
    // NCCL's in-place form: recvbuf = sendbuf + rank * count.
    gs::DeviceBuffer buf = upload(values(total, rin, rank()), t);
    comm_->reduce_scatter(buf.get(), at(buf, static_cast<std::size_t>(rank()) * c, t), c, t, RedOp::Sum);
    EXPECT_EQ(wrong(download(at(buf, static_cast<std::size_t>(rank()) * c, t), c, t), want), 0u) << "NCCL in place";
    // The interface's in place (sendbuf == recvbuf): the result is block 0.
    gs::DeviceBuffer buf0 = upload(values(total, rin, rank()), t);
    comm_->reduce_scatter(buf0.get(), buf0.get(), c, t, RedOp::Sum);
    EXPECT_EQ(wrong(download(buf0.get(), c, t), want), 0u) << "in place, block 0";
  }
}

TEST_F(NcclTest, AllgatherOutOfAndInPlace) {
  const int n = size();
  for (DType t : kTypes)
    for (std::size_t c : {std::size_t{1}, std::size_t{1000}, std::size_t{4099}}) {
      SCOPED_TRACE(std::string(gs::dtype_name(t)) + " count " + std::to_string(c));
      const std::size_t total = c * static_cast<std::size_t>(n);
      auto want = [&](std::size_t i) { return static_cast<double>(mval(static_cast<int>(i / c), i % c)); };
      gs::DeviceBuffer send = upload(values(c, mval, rank()), t);
      gs::DeviceBuffer recv = poisoned(total, t);
      comm_->allgather(send.get(), recv.get(), c, t);
      EXPECT_EQ(wrong(download(recv.get(), total, t), want), 0u) << "out of place";
      // In place: my block already sits at rank * c of the result buffer.
      std::vector<float> full(total, -1.f);
      for (std::size_t k = 0; k < c; ++k) full[static_cast<std::size_t>(rank()) * c + k] = mval(rank(), k);
      gs::DeviceBuffer buf = upload(full, t);
      comm_->allgather(at(buf, static_cast<std::size_t>(rank()) * c, t), buf.get(), c, t);
      EXPECT_EQ(wrong(download(buf.get(), total, t), want), 0u) << "in place";
    }
}

TEST_F(NcclTest, BroadcastFromEveryRoot) {
  const DType t = DType::BF16;
  for (int root = 0; root < size(); ++root)
    for (std::size_t count : {std::size_t{1}, std::size_t{100000}}) {
      SCOPED_TRACE("root " + std::to_string(root) + " count " + std::to_string(count));
      gs::DeviceBuffer buf = rank() == root ? upload(values(count, mval, root), t) : poisoned(count, t);
      comm_->broadcast(buf.get(), count, t, root);
      EXPECT_EQ(wrong(download(buf.get(), count, t), [&](std::size_t i) { return mval(root, i); }), 0u);
    }
}

TEST_F(NcclTest, AlltoallOutOfAndInPlace) {
  const int n = size();
  const DType t = DType::F32;
  for (std::size_t c : {std::size_t{1}, std::size_t{999}}) {
    SCOPED_TRACE("count " + std::to_string(c));
    const std::size_t total = c * static_cast<std::size_t>(n);
    // Sender s puts s * 1000 + p * 10 + k % 10 into element k of block p.
    std::vector<float> mine(total);
    for (std::size_t i = 0; i < total; ++i)
      mine[i] = static_cast<float>(rank() * 1000 + static_cast<int>(i / c) * 10 + static_cast<int>(i % c % 10));
    auto want = [&](std::size_t i) {
      return static_cast<double>(static_cast<int>(i / c) * 1000 + rank() * 10 + static_cast<int>(i % c % 10));
    };
    gs::DeviceBuffer send = upload(mine, t);
    gs::DeviceBuffer recv = poisoned(total, t);
    comm_->alltoall(send.get(), recv.get(), c, t);
    EXPECT_EQ(wrong(download(recv.get(), total, t), want), 0u) << "out of place";
    gs::DeviceBuffer buf = upload(mine, t);
    comm_->alltoall(buf.get(), buf.get(), c, t);
    EXPECT_EQ(wrong(download(buf.get(), total, t), want), 0u) << "in place";
  }
}

TEST_F(NcclTest, SendRecvRing) {
  const int n = size(), right = (rank() + 1) % n, left = (rank() - 1 + n) % n;
  for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{4096}, std::size_t{(1 << 20) + 5}}) {
    SCOPED_TRACE("bytes " + std::to_string(bytes));
    const std::size_t count = bytes / 4;
    gs::DeviceBuffer send = upload(values(count, mval, rank()), DType::F32);
    gs::DeviceBuffer recv = poisoned(count, DType::F32);
    comm_->sendrecv(send.get(), count * 4, right, recv.get(), count * 4, left, 7);
    EXPECT_EQ(wrong(download(recv.get(), count, DType::F32), [&](std::size_t i) { return mval(left, i); }), 0u);
  }
  // Several requests in flight, waited together: one NCCL group.
  const std::size_t count = 1000;
  gs::DeviceBuffer a = upload(values(count, mval, rank()), DType::F32);
  gs::DeviceBuffer b = upload(values(count, mval, rank() + 1), DType::F32);
  gs::DeviceBuffer ra = poisoned(count, DType::F32), rb = poisoned(count, DType::F32);
  gs::Request reqs[4] = {comm_->irecv(ra.get(), count * 4, left, 1), comm_->irecv(rb.get(), count * 4, right, 2),
                         comm_->isend(a.get(), count * 4, right, 1), comm_->isend(b.get(), count * 4, left, 2)};
  comm_->wait_all(reqs, 4);
  EXPECT_EQ(wrong(download(ra.get(), count, DType::F32), [&](std::size_t i) { return mval(left, i); }), 0u);
  EXPECT_EQ(wrong(download(rb.get(), count, DType::F32), [&](std::size_t i) { return mval(right + 1, i); }), 0u);
}

TEST_F(NcclTest, SplitMakesWorkingCommunicators) {
  std::unique_ptr<gs::Communicator> sub = comm_->split(rank() % 2, rank());
  ASSERT_EQ(sub->backend(), "nccl");
  const int m = sub->size();
  const std::size_t count = 1000;
  gs::DeviceBuffer buf = upload(std::vector<float>(count, 1.f), DType::F32);
  sub->allreduce(buf.get(), buf.get(), count, DType::F32, RedOp::Sum);
  EXPECT_EQ(wrong(download(buf.get(), count, DType::F32), [&](std::size_t) { return static_cast<double>(m); }), 0u);
}

TEST_F(NcclTest, NonBlockingCollectivesFollowTheCallersEvent) {
  // The input arrives by an asynchronous copy on another stream; the collective is ordered
  // after it only by the event handed to iallreduce / iallgather (no host synchronisation).
  const int n = size();
  const std::size_t count = 1 << 20;
  gs::PinnedBuffer host(count * sizeof(float));
  for (std::size_t i = 0; i < count; ++i) host.as<float>()[i] = rin(rank(), i);
  gs::DeviceBuffer buf = poisoned(count, DType::F32), all = poisoned(count * static_cast<std::size_t>(n), DType::F32);
  gs::Stream producer;
  gs::Event ready(false);
  GS_CUDA(cudaMemcpyAsync(buf.get(), host.get(), count * sizeof(float), cudaMemcpyHostToDevice, producer.get()));
  ready.record(producer.get());
  gs::Request g = comm_->iallgather(buf.get(), all.get(), count, DType::F32, ready.get());
  gs::Request a = comm_->iallreduce(buf.get(), buf.get(), count, DType::F32, RedOp::Sum, ready.get());
  gs::Request reqs[2] = {std::move(g), std::move(a)};
  comm_->wait_all(reqs, 2);
  EXPECT_EQ(wrong(download(buf.get(), count, DType::F32), [&](std::size_t i) { return rsum(n, i); }), 0u);
  const std::vector<float> got = download(all.get(), count * static_cast<std::size_t>(n), DType::F32);
  EXPECT_EQ(wrong(got, [&](std::size_t i) { return rin(static_cast<int>(i / count), i % count); }), 0u);
}

// Aborts its own communicator: only with GRADSYNC_TEST_NCCL_FAILURE=1 (its own CTest).
TEST_F(NcclTest, FailureAbortsAndLaterCallsRefuse) {
  const char* on = std::getenv("GRADSYNC_TEST_NCCL_FAILURE");
  if (!on || std::string(on) != "1") GTEST_SKIP() << "set GRADSYNC_TEST_NCCL_FAILURE=1 to run";
  gs::NcclCommunicator comm(*g_world);
  gs::DeviceBuffer buf = poisoned(1024, DType::F32);
  // A receive that no send matches: NCCL refuses it, or it never completes and the wait
  // times out (GRADSYNC_TIMEOUT_S); either way an Error and an aborted communicator.
  {
    gs::Request r = comm.irecv(buf.get(), 4096, rank(), 99);
    EXPECT_THROW(comm.wait(r), gs::Error);
  }
  EXPECT_TRUE(comm.aborted());
  try {
    comm.allreduce(buf.get(), buf.get(), 16, DType::F32, RedOp::Sum);
    FAIL() << "an aborted communicator accepted a call";
  } catch (const gs::Error& e) {
    EXPECT_NE(std::string(e.what()).find("aborted"), std::string::npos) << e.what();
  }
}

// ---- host staging (ranks may share a GPU) -----------------------------------------------------

TEST_F(StagedTest, HostStagedAllreduceAlgorithms) {
  const int n = size();
  for (const char* algo : {"ring", "rd", "mpi", "auto"})
    for (DType t : {DType::F32, DType::F16})
      for (std::size_t count : {std::size_t{1}, std::size_t{1000}, std::size_t{65537}})
        for (bool in_place : {false, true}) {
          SCOPED_TRACE(std::string(algo) + " " + gs::dtype_name(t) + " count " + std::to_string(count) +
                       (in_place ? " in place" : " out of place"));
          auto a = gs::make_host_staged_allreduce(algo, *g_world);
          gs::DeviceBuffer send = upload(values(count, rin, rank()), t);
          gs::DeviceBuffer recv = in_place ? gs::DeviceBuffer() : poisoned(count, t);
          void* out = in_place ? send.get() : recv.get();
          a->run(send.get(), out, count, t, RedOp::Sum);
          EXPECT_EQ(wrong(download(out, count, t), [&](std::size_t i) { return static_cast<double>(rsum(n, i)); }),
                    0u);
        }
}

TEST_F(StagedTest, HostStagedCommunicatorCollectives) {
  gs::HostStagedCommunicator comm(*g_world);
  const int n = size();
  const DType t = DType::F32;
  const std::size_t c = 1001, total = c * static_cast<std::size_t>(n);
  EXPECT_EQ(comm.backend(), "mpi-staged");
  {  // allreduce
    gs::DeviceBuffer buf = upload(values(c, rin, rank()), t);
    comm.allreduce(buf.get(), buf.get(), c, t, RedOp::Sum);
    EXPECT_EQ(wrong(download(buf.get(), c, t), [&](std::size_t i) { return static_cast<double>(rsum(n, i)); }), 0u);
  }
  {  // reduce-scatter, out of place and in place (block 0)
    auto want = [&](std::size_t i) { return static_cast<double>(rsum(n, static_cast<std::size_t>(rank()) * c + i)); };
    gs::DeviceBuffer send = upload(values(total, rin, rank()), t);
    gs::DeviceBuffer recv = poisoned(c, t);
    comm.reduce_scatter(send.get(), recv.get(), c, t, RedOp::Sum);
    EXPECT_EQ(wrong(download(recv.get(), c, t), want), 0u);
    comm.reduce_scatter(send.get(), send.get(), c, t, RedOp::Sum);
    EXPECT_EQ(wrong(download(send.get(), c, t), want), 0u);
  }
  {  // allgather, in place
    auto want = [&](std::size_t i) { return static_cast<double>(mval(static_cast<int>(i / c), i % c)); };
    std::vector<float> full(total, -1.f);
    for (std::size_t k = 0; k < c; ++k) full[static_cast<std::size_t>(rank()) * c + k] = mval(rank(), k);
    gs::DeviceBuffer buf = upload(full, t);
    comm.allgather(at(buf, static_cast<std::size_t>(rank()) * c, t), buf.get(), c, t);
    EXPECT_EQ(wrong(download(buf.get(), total, t), want), 0u);
  }
  {  // alltoall, out of place
    std::vector<float> mine(total);
    for (std::size_t i = 0; i < total; ++i) mine[i] = static_cast<float>(rank() * 1000 + static_cast<int>(i / c));
    gs::DeviceBuffer send = upload(mine, t);
    gs::DeviceBuffer recv = poisoned(total, t);
    comm.alltoall(send.get(), recv.get(), c, t);
    EXPECT_EQ(wrong(download(recv.get(), total, t),
                    [&](std::size_t i) { return static_cast<double>(static_cast<int>(i / c) * 1000 + rank()); }),
              0u);
  }
  {  // broadcast from the last rank
    const int root = n - 1;
    gs::DeviceBuffer buf = rank() == root ? upload(values(c, mval, root), t) : poisoned(c, t);
    comm.broadcast(buf.get(), c, t, root);
    EXPECT_EQ(wrong(download(buf.get(), c, t), [&](std::size_t i) { return mval(root, i); }), 0u);
  }
  {  // point to point: a ring exchange
    const int right = (rank() + 1) % n, left = (rank() - 1 + n) % n;
    gs::DeviceBuffer send = upload(values(c, mval, rank()), t);
    gs::DeviceBuffer recv = poisoned(c, t);
    comm.sendrecv(send.get(), c * 4, right, recv.get(), c * 4, left, 5);
    EXPECT_EQ(wrong(download(recv.get(), c, t), [&](std::size_t i) { return mval(left, i); }), 0u);
  }
}


}  // namespace

int main(int argc, char** argv) {
  return gs::test_support::run_mpi_gtests(argc, argv, "test_nccl_mpi", [](gs::MpiCommunicator* w) {
    if (!w) {  // before the MPI communicator it uses, and before MPI_Finalize
      g_nccl.reset();
      g_stream.reset();
    }
    g_world = w;
  });
}
