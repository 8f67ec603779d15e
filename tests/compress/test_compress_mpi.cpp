// MPI tests of the compressors' protocols (runtime/compress/), run on 1-4 ranks: every
// rank builds every rank's gradients (seeded by rank), runs reduce() through the real
// communicator, and compares with a serial computation of the definition over all ranks
// (references.hpp) — onebit against its serial definition, QSGD against the decoded
// messages of all ranks, top-k against per-rank error feedback, PowerSGD against the naive
// Eigen reference, casts against the average. All ranks must end with identical buckets.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <vector>

#include "algos/allreduce.hpp"
#include "comm/mpi_comm.hpp"
#include "compress/compressor.hpp"
#include "compress/qsgd.hpp"
#include "compress/topk.hpp"
#include "references.hpp"
#include "../mpi_gtest_main.hpp"

using namespace gradsync;

namespace {

MpiCommunicator* g_comm = nullptr;

std::vector<float> gradient(std::size_t n, int rank, std::int64_t step, int salt) {
  std::mt19937 rng(static_cast<std::uint32_t>(1000003 * rank + 7919 * step + salt));
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

reference::Grads all_gradients(std::size_t n, int p, std::int64_t step, int salt) {
  reference::Grads g;
  for (int r = 0; r < p; ++r) g.push_back(gradient(n, r, step, salt));
  return g;
}

// Fingerprint of a buffer's bits, compared across ranks.
std::string fingerprint(const std::vector<float>& v) {
  std::uint64_t h = 1469598103934665603ull;
  for (float f : v) {
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    h = (h ^ u) * 1099511628211ull;
  }
  return std::to_string(h);
}

class CompressMpi : public ::testing::Test {
 protected:
  void SetUp() override {
    comm_ = g_comm;
    algo_ = make_allreduce("mpi", *comm_);
  }
  void TearDown() override {
    // A failure on any rank fails the test on every rank (rank 0 prints the summary).
    const std::int64_t any = comm_->max_int64(HasFailure() ? 1 : 0);
    if (any && !HasFailure()) ADD_FAILURE() << "the test failed on another rank";
  }
  void expect_same_on_all_ranks(const std::vector<float>& v, const std::string& what) {
    const auto all = comm_->allgather_strings(fingerprint(v));
    for (std::size_t r = 1; r < all.size(); ++r) EXPECT_EQ(all[r], all[0]) << what << ": rank " << r << " differs";
  }
  int p() const { return comm_->size(); }
  int rank() const { return comm_->rank(); }

  Communicator* comm_ = nullptr;
  std::unique_ptr<AllreduceAlgorithm> algo_;
};

BucketView flat_bucket(int index, std::vector<float>& data) {
  BucketView b;
  b.index = index;
  b.data = data.data();
  b.count = data.size();
  b.tensors = {{"flat", {static_cast<std::int64_t>(data.size())}, 0, data.size()}};
  return b;
}

}  // namespace

TEST_F(CompressMpi, CastsAverageInHalfPrecision) {
  for (const char* spec : {"fp16", "bf16"}) {
    auto c = make_compressor(spec, 1, rank());
    for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{4097}}) {
      const auto grads = all_gradients(n, p(), 0, 1);
      std::vector<float> data = grads[static_cast<std::size_t>(rank())];
      BucketView b = flat_bucket(0, data);
      CompressStats st;
      c->reduce(*comm_, *algo_, b, 0, st);
      const double rel = std::string(spec) == "fp16" ? 0x1p-11 : 0x1p-8;
      for (std::size_t i = 0; i < n; ++i) {
        double mean = 0, absmean = 0;
        for (const auto& g : grads) {
          mean += g[i] / p();
          absmean += std::fabs(g[i]) / p();
        }
        // one rounding per input and per pairwise sum
        ASSERT_NEAR(data[i], mean, (p() + 1) * rel * absmean + 1e-7) << spec << " i=" << i;
      }
      expect_same_on_all_ranks(data, spec);
      EXPECT_EQ(st.uncompressed_bytes, 4 * n);
      EXPECT_EQ(st.compressed_bytes, 2 * n);
      EXPECT_EQ(st.collective, "allreduce");
      EXPECT_TRUE(st.compressed);
      if (p() == 1) {
        EXPECT_EQ(st.wire_bytes, 0u);
      }
    }
  }
}

TEST_F(CompressMpi, OnebitEqualsItsSerialDefinition) {
  for (std::size_t n : {std::size_t{5}, std::size_t{100}, std::size_t{1000}}) {
    auto c = make_compressor("onebit", 1, rank());
    reference::OnebitReference ref(p(), n);
    for (std::int64_t step = 0; step < 4; ++step) {
      const auto grads = all_gradients(n, p(), step, 2);
      const auto want = ref.step(grads);
      std::vector<float> data = grads[static_cast<std::size_t>(rank())];
      BucketView b = flat_bucket(1, data);
      CompressStats st;
      c->reduce(*comm_, *algo_, b, step, st);
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_NEAR(data[i], want[i], 1e-5f * std::fabs(want[i]) + 1e-30f)
            << "n=" << n << " step=" << step << " i=" << i;
      expect_same_on_all_ranks(data, "onebit");
      EXPECT_EQ(st.collective, "alltoall+allgather");
      const std::size_t chunk = ((n + p() - 1) / p() + 31) / 32 * 32;
      EXPECT_EQ(st.compressed_bytes, p() * chunk / 8 + 4u * p() + chunk / 8 + 4);
    }
  }
}

TEST_F(CompressMpi, QsgdAveragesTheDecodedMessagesOfAllRanks) {
  const std::size_t n = 3000;
  auto c = make_compressor("qsgd:levels=8,bucket=256", 42, rank());
  for (std::int64_t step = 0; step < 3; ++step) {
    const auto grads = all_gradients(n, p(), step, 3);
    // serial: every rank's message, decoded and averaged in rank order
    std::vector<float> want(n);
    for (int r = 0; r < p(); ++r) {
      compress_detail::QsgdCompressor q(8, 256, 42, r);
      std::vector<std::uint8_t> msg(q.message_bytes(n));
      q.encode(grads[static_cast<std::size_t>(r)].data(), n, q.key(step, 2), msg.data());
      q.decode(msg.data(), n, want.data(), r > 0);
    }
    for (auto& v : want) v *= 1.f / static_cast<float>(p());
    std::vector<float> data = grads[static_cast<std::size_t>(rank())];
    BucketView b = flat_bucket(2, data);
    CompressStats st;
    c->reduce(*comm_, *algo_, b, step, st);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(data[i], want[i]) << "step " << step << " i=" << i;
    EXPECT_EQ(st.collective, "allgather");
    EXPECT_EQ(st.compressed_bytes, n + 12 * 4);
    EXPECT_EQ(st.wire_bytes, (p() - 1) * (n + 12 * 4));
  }
}

TEST_F(CompressMpi, TopkAveragesSparseContributionsWithErrorFeedback) {
  const std::size_t n = 2000;
  auto c = make_compressor("topk:ratio=0.02", 1, rank());
  std::vector<std::vector<float>> memory(static_cast<std::size_t>(p()), std::vector<float>(n, 0.f));
  const std::size_t k = 40;
  for (std::int64_t step = 0; step < 4; ++step) {
    const auto grads = all_gradients(n, p(), step, 4);
    std::vector<float> want(n, 0.f);
    for (int r = 0; r < p(); ++r) {
      std::vector<float> x = grads[static_cast<std::size_t>(r)];
      std::vector<std::int32_t> idx(k);
      std::vector<float> vals(k);
      compress_detail::TopkCompressor::encode(x.data(), n, k, memory[static_cast<std::size_t>(r)].data(), idx.data(),
                                              vals.data());
      for (std::size_t j = 0; j < k; ++j)
        want[static_cast<std::size_t>(idx[j])] += vals[j] * (1.f / static_cast<float>(p()));
    }
    std::vector<float> data = grads[static_cast<std::size_t>(rank())];
    BucketView b = flat_bucket(3, data);
    CompressStats st;
    c->reduce(*comm_, *algo_, b, step, st);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(data[i], want[i]) << "step " << step << " i=" << i;
    EXPECT_EQ(st.compressed_bytes, 8 * k);
    EXPECT_EQ(st.collective, "allgather");
  }
}

TEST_F(CompressMpi, PowerSgdMatchesTheNaiveReference) {
  BucketView layout;
  layout.index = 4;
  layout.tensors = {{"conv", {24, 4, 3, 3}, 0, 864}, {"bias", {24}, 864, 24}, {"fc", {20, 50}, 888, 1000}};
  layout.count = 1888;
  auto c = make_compressor("powersgd:rank=3,start=2", 11, rank());
  reference::PowerSgdReference ref(p(), 3, 2, 2.0, 11, layout);
  ASSERT_EQ(ref.compressed_matrices(), 2u);
  for (std::int64_t step = 0; step < 6; ++step) {
    const auto grads = all_gradients(layout.count, p(), step, 5);
    const auto want = ref.step(grads, step);
    std::vector<float> data = grads[static_cast<std::size_t>(rank())];
    BucketView b = layout;
    b.data = data.data();
    CompressStats st;
    c->reduce(*comm_, *algo_, b, step, st);
    double maxabs = 0;
    for (double v : want) maxabs = std::max(maxabs, std::fabs(v));
    for (std::size_t i = 0; i < layout.count; ++i)
      ASSERT_NEAR(data[i], want[i], 3e-5 * maxabs) << "step " << step << " i=" << i;
    expect_same_on_all_ranks(data, "powersgd");
    EXPECT_EQ(st.compressed, step >= 2) << step;
    EXPECT_EQ(st.compressed_bytes, step >= 2 ? 4u * (24 * 3 + 36 * 3 + 20 * 3 + 50 * 3 + 24) : 4u * layout.count);
  }
}

// The all-gathering compressors over a ring algorithm move their blocks with gradsync's ring
// all-gather (compress/collectives.hpp), with --algo mpi with MPI_Allgather: a data movement
// either way, so the buckets must agree bit for bit, over steps (error feedback), for odd
// sizes, and with chunks smaller than a block (64 bytes: several chunks per ring step).
TEST_F(CompressMpi, RingAllgatherPathEqualsTheLibrarysBitForBit) {
  AlgoOptions tiny;
  tiny.chunk_bytes = 64;
  const std::unique_ptr<AllreduceAlgorithm> ring = make_allreduce("ring", *comm_, tiny);
  const std::unique_ptr<AllreduceAlgorithm> ring_default = make_allreduce("ring", *comm_);
  for (const char* spec : {"topk:ratio=0.05", "qsgd:levels=4", "onebit"}) {
    for (AllreduceAlgorithm* algo : {ring.get(), ring_default.get()}) {
      for (std::size_t n : {std::size_t{7}, std::size_t{1000}, std::size_t{4099}}) {
        auto lib = make_compressor(spec, 3, rank());
        auto own = make_compressor(spec, 3, rank());
        for (std::int64_t step = 0; step < 3; ++step) {
          std::vector<float> a = gradient(n, rank(), step, 5);
          std::vector<float> b = a;
          BucketView ba = flat_bucket(2, a), bb = flat_bucket(2, b);
          CompressStats sa, sb;
          lib->reduce(*comm_, *algo_, ba, step, sa);
          own->reduce(*comm_, *algo, bb, step, sb);
          ASSERT_EQ(fingerprint(a), fingerprint(b))
              << spec << " n=" << n << " step=" << step << " chunk " << algo->chunk().bytes;
          EXPECT_EQ(sa.wire_bytes, sb.wire_bytes) << spec;
          EXPECT_EQ(sa.collective, sb.collective) << spec;
        }
      }
    }
  }
}

int main(int argc, char** argv) {
  return gradsync::test_support::run_mpi_gtests(argc, argv, "test_compress_mpi", [](MpiCommunicator* w) { g_comm = w; });
}
