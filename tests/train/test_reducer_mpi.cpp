// The reducer over MPI (run on 1, 2 and 3 ranks): gradients written into bucket views are
// averaged over ranks, with and without overlap; buckets start in order, after they are
// ready; non-sync (no_sync) backward passes communicate nothing; a layout that differs
// across ranks is refused naming the ranks; mixed precision's unscaling (after the fp16 /
// bf16 casts, before other compressors) averages the unscaled values and flags inf/nan.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "algos/allreduce.hpp"
#include "comm/mpi_comm.hpp"
#include "compress/compressor.hpp"
#include "core/error.hpp"
#include "core/timer.hpp"
#include "train/reducer.hpp"
#include "../mpi_gtest_main.hpp"

namespace gs = gradsync;
namespace gt = gradsync::train;

namespace {

gs::Communicator* g_world = nullptr;  // set by main() for the tests' lifetime

std::vector<gs::models::TensorSpec> toy_tensors() {
  // 7 tensors, 4..4000 elements, so 1 KiB buckets give several buckets of odd sizes.
  return {{"a.weight", {10, 40}}, {"a.bias", {10}}, {"b.weight", {1000, 4}}, {"b.bias", {1000}},
          {"c.weight", {3, 7}},   {"c.bias", {3}},  {"d.weight", {33, 17}}};
}

float value(int rank, std::size_t tensor, std::size_t j, int micro) {
  return static_cast<float>(rank + 1) * 0.5f + static_cast<float>(tensor) + 0.001f * static_cast<float>(j % 97) +
         static_cast<float>(micro);
}

void run_case(bool overlap, int accumulate) {
  gs::Communicator& world = *g_world;
  auto comm = world.split(0, world.rank());
  auto algo = gs::make_allreduce("ring", *comm);
  auto comp = gs::make_compressor("none", 1, world.rank());
  const auto tensors = toy_tensors();
  gt::ReducerOptions ro;
  ro.bucket_bytes = 1024;
  ro.first_bucket_bytes = 256;
  ro.overlap = overlap;
  gt::Reducer red(*comm, *algo, *comp, tensors, ro);
  ASSERT_GE(red.num_buckets(), 3u);
  gs::check_same_on_all_ranks(world, "bucket layout", red.layout());

  for (std::int64_t step = 0; step < 3; ++step) {
    const double t0 = gs::now_s();
    gt::StepComm sc;
    for (int k = 0; k < accumulate; ++k) {
      const bool sync = k == accumulate - 1;
      red.begin_backward(t0, step, sync);
      for (std::size_t i = tensors.size(); i-- > 0;) {
        float* g = red.grad(i);
        for (std::size_t j = 0; j < static_cast<std::size_t>(tensors[i].numel()); ++j) {
          const float v = value(world.rank(), i, j, k + static_cast<int>(step));
          g[j] = k == 0 ? v : g[j] + v;
        }
        red.mark_ready(i);
      }
      sc = red.finish_backward();
      if (!sync) {
        EXPECT_TRUE(sc.buckets.empty());  // no communication in no_sync micro-steps
        EXPECT_EQ(sc.stats.wire_bytes, 0u);
      }
    }
    // Every gradient is now the average over ranks of the local sums.
    const int n = world.size();
    for (std::size_t i = 0; i < tensors.size(); ++i)
      for (std::size_t j = 0; j < static_cast<std::size_t>(tensors[i].numel()); ++j) {
        double want = 0;
        for (int r = 0; r < n; ++r)
          for (int k = 0; k < accumulate; ++k) want += value(r, i, j, k + static_cast<int>(step));
        want /= n;
        ASSERT_NEAR(red.grad(i)[j], want, 1e-4 * std::abs(want)) << "tensor " << i << " elem " << j;
      }
    ASSERT_EQ(sc.buckets.size(), red.num_buckets());
    std::uint64_t total = 0;
    for (std::size_t b = 0; b < sc.buckets.size(); ++b) {
      const auto& r = sc.buckets[b];
      total += static_cast<std::uint64_t>(r.bytes);
      EXPECT_LE(r.ready_s, r.start_s + 1e-9);
      EXPECT_LE(r.start_s, r.end_s);
      if (b > 0) {
        EXPECT_GE(r.start_s, sc.buckets[b - 1].end_s - 1e-9);  // one comm thread: in order
      }
    }
    EXPECT_EQ(sc.stats.uncompressed_bytes, total);
    if (n > 1) {
      EXPECT_EQ(sc.stats.collective, "allreduce");
      EXPECT_GT(sc.stats.wire_bytes, 0u);
    }
    if (!overlap) {  // all launched after backward: the first starts after the last is ready
      double last_ready = 0;
      for (const auto& r : sc.buckets) last_ready = std::max(last_ready, r.ready_s);
      EXPECT_GE(sc.buckets.front().start_s, last_ready - 1e-9);
    }
  }
}

// Averages every gradient of `tensors` with a reducer on `algo` whose buckets are shared
// (registered) or private; returns this rank's averaged gradients, concatenated.
std::vector<float> averaged(const std::vector<gs::models::TensorSpec>& tensors, const std::string& algo_name,
                            bool shared, bool* took_effect) {
  gs::Communicator& world = *g_world;
  auto comm = world.split(0, world.rank());
  auto algo = gs::make_allreduce(algo_name, *comm);
  auto comp = gs::make_compressor("none", 1, world.rank());
  gt::ReducerOptions ro;
  ro.bucket_bytes = 1 << 20;
  ro.first_bucket_bytes = 300 << 10;
  ro.shared_buckets = shared;
  gt::Reducer red(*comm, *algo, *comp, tensors, ro);
  *took_effect = red.shared_buckets();
  red.begin_backward(gs::now_s(), 0, true);
  for (std::size_t i = tensors.size(); i-- > 0;) {
    float* g = red.grad(i);
    for (std::size_t j = 0; j < static_cast<std::size_t>(tensors[i].numel()); ++j) g[j] = value(world.rank(), i, j, 0);
    red.mark_ready(i);
  }
  (void)red.finish_backward();
  std::vector<float> out;
  for (std::size_t i = 0; i < tensors.size(); ++i)
    out.insert(out.end(), red.grad(i), red.grad(i) + tensors[i].numel());
  return out;
}

}  // namespace

TEST(ReducerMpi, SharedBucketsAverageAsPrivateOnesBitForBit) {
  // Buckets of 300 KiB .. 1 MiB: shm reads the peers' registered buckets in place there.
  const std::vector<gs::models::TensorSpec> tensors = {
      {"a.weight", {400, 500}}, {"a.bias", {500}}, {"b.weight", {90000}}, {"c.weight", {300, 301}}};
  for (const char* algo : {"shm", "ring"}) {
    bool shared_used = false, private_used = true;
    const auto s = averaged(tensors, algo, true, &shared_used);
    const auto p = averaged(tensors, algo, false, &private_used);
    EXPECT_TRUE(shared_used) << "the test ranks share one node: the buckets are registered";
    EXPECT_FALSE(private_used);
    ASSERT_EQ(s.size(), p.size());
    std::size_t differ = 0;
    for (std::size_t k = 0; k < s.size(); ++k) differ += std::memcmp(&s[k], &p[k], sizeof(float)) != 0 ? 1 : 0;
    EXPECT_EQ(differ, 0u) << algo << ": " << differ << " of " << s.size() << " gradients differ";
    // And the average is right.
    const int n = g_world->size();
    double want = 0;
    for (int r = 0; r < n; ++r) want += value(r, 2, 123, 0);
    EXPECT_NEAR(s[200000 + 500 + 123], want / n, 1e-5 * want);
  }
}

TEST(ReducerMpi, AveragesWithOverlap) { run_case(true, 1); }
TEST(ReducerMpi, AveragesWithoutOverlap) { run_case(false, 1); }
TEST(ReducerMpi, AccumulatesWithoutSyncThenAverages) { run_case(true, 3); }

namespace {

// Loss-scaled gradients (x 1024) through the reducer with unscaling; in step 1 rank 0 puts
// an inf into tensor 6 (the first bucket).
void run_unscale_case(const std::string& compress, gt::Unscale where) {
  gs::Communicator& world = *g_world;
  auto comm = world.split(0, world.rank());
  auto algo = gs::make_allreduce("ring", *comm);
  auto comp = gs::make_compressor(compress, 1, world.rank());
  const auto tensors = toy_tensors();
  gt::ReducerOptions ro;
  ro.bucket_bytes = 1024;
  ro.first_bucket_bytes = 256;
  ro.unscale = where;
  gt::Reducer red(*comm, *algo, *comp, tensors, ro);
  const float scale = 1024.f;
  for (std::int64_t step = 0; step < 2; ++step) {
    red.begin_backward(gs::now_s(), step, true, 1.f / scale);
    for (std::size_t i = tensors.size(); i-- > 0;) {
      float* g = red.grad(i);
      for (std::size_t j = 0; j < static_cast<std::size_t>(tensors[i].numel()); ++j)
        g[j] = scale * value(world.rank(), i, j, static_cast<int>(step));
      if (step == 1 && i == 6 && world.rank() == 0) g[3] = std::numeric_limits<float>::infinity();
      red.mark_ready(i);
    }
    const gt::StepComm sc = red.finish_backward();
    const bool injected = step == 1;
    if (where == gt::Unscale::AfterReduce) {
      EXPECT_EQ(sc.found_inf, injected) << compress << " step " << step;  // the sum spreads the inf
    } else {
      EXPECT_EQ(sc.found_inf, injected && world.rank() == 0) << compress << " step " << step;  // local check
    }
    EXPECT_GE(sc.unscale_s, 0.0);
    if (injected) continue;
    // Unscaled averages; the casts round to half (11 or 8 significant bits).
    const double tol = compress == "bf16" ? 1e-2 : 2e-3;
    const int n = world.size();
    for (std::size_t i = 0; i < tensors.size(); ++i)
      for (std::size_t j = 0; j < static_cast<std::size_t>(tensors[i].numel()); ++j) {
        double want = 0;
        for (int r = 0; r < n; ++r) want += value(r, i, j, static_cast<int>(step));
        want /= n;
        ASSERT_NEAR(red.grad(i)[j], want, tol * std::abs(want)) << compress << " tensor " << i << " elem " << j;
      }
  }
  if (where == gt::Unscale::BeforeReduce && world.rank() == 0) {
    // The bucket holding the inf was zeroed before the compressor: nothing non-finite left.
    for (std::size_t i = 0; i < tensors.size(); ++i)
      for (std::size_t j = 0; j < static_cast<std::size_t>(tensors[i].numel()); ++j)
        ASSERT_TRUE(std::isfinite(red.grad(i)[j])) << compress << " tensor " << i;
  }
}

}  // namespace

TEST(ReducerMpi, UnscalesAfterHalfCastsAndSpreadsInf) {
  run_unscale_case("fp16", gt::Unscale::AfterReduce);
  run_unscale_case("bf16", gt::Unscale::AfterReduce);
}
TEST(ReducerMpi, UnscalesBeforeOtherCompressorsAndZeroesInf) {
  run_unscale_case("none", gt::Unscale::BeforeReduce);  // exact fp32 path: same averages
}

TEST(ReducerMpi, MissingGradientIsAnError) {
  auto comm = g_world->split(0, g_world->rank());
  auto algo = gs::make_allreduce("ring", *comm);
  auto comp = gs::make_compressor("none", 1, 0);
  gt::Reducer red(*comm, *algo, *comp, toy_tensors(), gt::ReducerOptions{});
  red.begin_backward(gs::now_s(), 0, /*sync=*/false);
  red.mark_ready(6);
  EXPECT_THROW(red.mark_ready(6), gs::Error);  // twice
  EXPECT_THROW(red.finish_backward(), gs::Error);  // 1 of 7 marked
}

TEST(ReducerMpi, DifferentLayoutsAreRefusedNamingTheRanks) {
  gs::Communicator& world = *g_world;
  if (world.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  auto comm = world.split(0, world.rank());
  auto algo = gs::make_allreduce("ring", *comm);
  auto comp = gs::make_compressor("none", 1, 0);
  gt::ReducerOptions ro;
  ro.first_bucket_bytes = 256;
  ro.bucket_bytes = world.rank() == 1 ? 1 << 20 : 1024;  // rank 1 differs: two buckets, not several
  ro.shared_buckets = true;  // whose allocation, one per bucket, is collective: not attempted
  gt::Reducer red(*comm, *algo, *comp, toy_tensors(), ro);
  EXPECT_FALSE(red.shared_buckets());
  try {
    gs::check_same_on_all_ranks(world, "bucket layout", red.layout());
    FAIL() << "a different layout on rank 1 was not detected";
  } catch (const gs::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("bucket layout differs"), std::string::npos) << m;
    EXPECT_NE(m.find("rank(s) 1"), std::string::npos) << m;
  }
}

int main(int argc, char** argv) {
  return gs::test_support::run_mpi_gtests(argc, argv, "test_reducer_mpi", [](gs::MpiCommunicator* w) { g_world = w; });
}
