// Tests of the compressors' definitions on one process (runtime/compress/): spec checking,
// QSGD's unbiasedness and variance bound, the error-feedback identities, PowerSGD's
// exactness on low-rank matrices and agreement with a naive reference (p ranks simulated
// through the phase API), top-k's choice, and the cast round trip.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <span>
#include <vector>

#include "compress/cast.hpp"
#include "compress/compressor.hpp"
#include "compress/onebit.hpp"
#include "compress/powersgd.hpp"
#include "compress/qsgd.hpp"
#include "compress/topk.hpp"
#include "core/error.hpp"
#include "kernels/cpu_kernels.hpp"
#include "references.hpp"

using namespace gradsync;
using namespace gradsync::compress_detail;

namespace {

std::vector<float> gaussian(std::size_t n, std::uint32_t seed, float sigma = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Expect `fn` to throw UsageError whose message contains every one of `parts`.
template <typename Fn>
void expect_usage_error(Fn fn, const std::vector<std::string>& parts, const std::string& what) {
  try {
    fn();
    ADD_FAILURE() << what << ": no error";
  } catch (const UsageError& e) {
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << what << ": " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": wrong exception type: " << e.what();
  }
}

}  // namespace

// ---- specs ------------------------------------------------------------------------------------

TEST(CompressSpec, KnownNames) {
  const auto& names = compressor_names();
  for (const char* n : {"none", "fp16", "bf16", "powersgd", "qsgd", "onebit", "sign", "topk"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
}

TEST(CompressSpec, CanonicalSpecs) {
  EXPECT_EQ(make_compressor("fp16", 0, 0)->spec(), "fp16");
  EXPECT_EQ(make_compressor("bf16", 0, 0)->spec(), "bf16");
  EXPECT_EQ(make_compressor("onebit", 0, 0)->spec(), "onebit");
  EXPECT_EQ(make_compressor("sign", 0, 0)->spec(), "onebit");
  EXPECT_EQ(make_compressor("qsgd:levels=16", 0, 0)->spec(), "qsgd:bucket=512,levels=16");
  EXPECT_EQ(make_compressor("topk:ratio=0.01", 0, 0)->spec(), "topk:ratio=0.01");
  EXPECT_EQ(make_compressor("powersgd:rank=4", 0, 0)->spec(),
            "powersgd:error_feedback=1,min_rate=2,rank=4,start=10,threads=1,warm_start=1");
  EXPECT_EQ(
      make_compressor("powersgd:rank=2,start=0,warm_start=0,error_feedback=0,min_rate=1.5,threads=2", 0, 0)->spec(),
      "powersgd:error_feedback=0,min_rate=1.5,rank=2,start=0,threads=2,warm_start=0");
  EXPECT_NO_THROW(check_compressor_spec("qsgd:levels=127,bucket=1"));
  EXPECT_NO_THROW(check_compressor_spec("topk:ratio=1"));
}

TEST(CompressSpec, BadSpecsAreRefusedNamingSpecAndKey) {
  struct Case {
    const char* spec;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {"gzip", {"gzip", "unknown compressor"}},
      {"fp16:scale=2", {"fp16", "scale"}},
      {"onebit:levels=2", {"onebit", "levels"}},
      {"powersgd", {"powersgd", "rank"}},
      {"powersgd:rank=0", {"powersgd", "rank"}},
      {"powersgd:rank=-1", {"powersgd", "rank"}},
      {"powersgd:rank=x", {"powersgd", "rank"}},
      {"powersgd:rank=4,foo=1", {"powersgd", "foo"}},
      {"powersgd:rank=4,min_rate=0", {"powersgd", "min_rate"}},
      {"powersgd:rank=4,warm_start=2", {"powersgd", "warm_start"}},
      {"powersgd:rank=4,error_feedback=yes", {"powersgd", "error_feedback"}},
      {"powersgd:rank=4,start=-3", {"powersgd", "start"}},
      {"powersgd:rank=4,threads=0", {"powersgd", "threads"}},
      {"powersgd:rank=4,threads=65", {"powersgd", "threads"}},
      {"qsgd", {"qsgd", "levels"}},
      {"qsgd:levels=0", {"qsgd", "levels"}},
      {"qsgd:levels=-4", {"qsgd", "levels"}},
      {"qsgd:levels=128", {"qsgd", "levels"}},
      {"qsgd:levels=4,bucket=0", {"qsgd", "bucket"}},
      {"qsgd:levels=4,block=8", {"qsgd", "block"}},
      {"topk", {"topk", "ratio"}},
      {"topk:ratio=0", {"topk", "ratio"}},
      {"topk:ratio=-0.5", {"topk", "ratio"}},
      {"topk:ratio=1.5", {"topk", "ratio"}},
      {"topk:ratio=nan", {"topk", "ratio"}},
      {"topk:k=5", {"topk", "k"}},
  };
  for (const auto& c : cases) {
    expect_usage_error([&] { check_compressor_spec(c.spec); }, c.parts, c.spec);
    expect_usage_error([&] { (void)make_compressor(c.spec, 1, 0); }, c.parts, c.spec);
  }
}

// ---- QSGD -----------------------------------------------------------------------------------------

TEST(Qsgd, UnbiasedOverManyDraws) {
  const std::size_t n = 200;
  auto x = gaussian(n, 1);
  x[7] = 0.f;
  QsgdCompressor q(4, 64, 1234, 0);
  std::vector<std::uint8_t> msg(q.message_bytes(n));
  std::vector<double> mean(n, 0.0);
  const int draws = 4000;
  std::vector<float> dec(n);
  for (int t = 0; t < draws; ++t) {
    q.encode(x.data(), n, q.key(t, 0), msg.data());
    q.decode(msg.data(), n, dec.data(), false);
    for (std::size_t i = 0; i < n; ++i) mean[i] += dec[i];
  }
  // Var(q_i) = (norm/S)^2 p (1-p) <= (norm/S)^2 / 4 per draw: 6 sigma of the mean.
  std::vector<float> norms(kernels::qsgd_num_blocks(n, 64));
  kernels::qsgd_norms(x.data(), n, 64, norms.data());
  for (std::size_t i = 0; i < n; ++i) {
    const double sigma = norms[i / 64] / 4.0 / 2.0 / std::sqrt(static_cast<double>(draws));
    EXPECT_NEAR(mean[i] / draws, x[i], 6 * sigma + 1e-7) << "element " << i;
  }
  EXPECT_EQ(mean[7], 0.0);  // zero stays exactly zero
}

TEST(Qsgd, VarianceWithinThePapersBound) {
  // E||Q(x)-x||^2 <= min(n/S^2, sqrt(n)/S) ||x||^2 (per block of n elements), and the
  // empirical mean matches the exact expectation sum (norm/S)^2 p_i (1-p_i).
  const std::size_t block = 256;
  for (std::uint32_t levels : {1u, 2u, 8u, 64u}) {
    for (int kind = 0; kind < 3; ++kind) {
      std::vector<float> x = gaussian(block, 10 + kind);
      if (kind == 1)  // sparse
        for (std::size_t i = 0; i < block; ++i)
          if (i % 17) x[i] = 0.f;
      if (kind == 2)  // flat: all |x_i| equal, the worst case for small S
        for (auto& v : x) v = v < 0 ? -1.f : 1.f;
      QsgdCompressor q(levels, block, 99, 3);
      std::vector<std::uint8_t> msg(q.message_bytes(block));
      std::vector<float> dec(block);
      double norm2 = 0;
      for (float v : x) norm2 += static_cast<double>(v) * v;
      const double norm = std::sqrt(norm2);
      double exact = 0;
      for (float v : x) {
        const double r = std::fabs(v) / norm * levels;
        const double pr = r - std::floor(r);
        exact += (norm / levels) * (norm / levels) * pr * (1 - pr);
      }
      const double bound =
          std::min(static_cast<double>(block) / (levels * levels), std::sqrt(static_cast<double>(block)) / levels) *
          norm2;
      const int draws = 2000;
      double err = 0;
      for (int t = 0; t < draws; ++t) {
        q.encode(x.data(), block, q.key(t, 5), msg.data());
        q.decode(msg.data(), block, dec.data(), false);
        for (std::size_t i = 0; i < block; ++i) err += (dec[i] - x[i]) * static_cast<double>(dec[i] - x[i]);
      }
      err /= draws;
      EXPECT_LE(exact, bound * (1 + 1e-9)) << "S=" << levels << " kind=" << kind;
      EXPECT_LE(err, bound * 1.05 + 1e-12) << "S=" << levels << " kind=" << kind;
      EXPECT_NEAR(err, exact, 0.1 * exact + 1e-9) << "S=" << levels << " kind=" << kind;
    }
  }
}

TEST(Qsgd, MessageLayoutAndReproducibility) {
  QsgdCompressor q(8, 512, 5, 1);
  EXPECT_EQ(q.message_bytes(1000), 1000u + 2 * 4);
  EXPECT_EQ(q.message_bytes(1001), 1004u + 2 * 4);
  const auto x = gaussian(1001, 3);
  std::vector<std::uint8_t> a(q.message_bytes(1001)), b(a.size()), c(a.size());
  q.encode(x.data(), 1001, q.key(7, 2), a.data());
  q.encode(x.data(), 1001, q.key(7, 2), b.data());
  q.encode(x.data(), 1001, q.key(8, 2), c.data());
  EXPECT_EQ(a, b);  // same (seed, rank, step, bucket): same message
  EXPECT_NE(a, c);  // another step: other random numbers
  QsgdCompressor other_rank(8, 512, 5, 2);
  EXPECT_NE(q.key(7, 2).k0, other_rank.key(7, 2).k0);
}

// ---- error feedback identities ---------------------------------------------------------------------

TEST(ErrorFeedback, TopkResidualPlusDecodedIsInputExactly) {
  const std::size_t n = 1000;
  const auto g = gaussian(n, 4);
  std::vector<float> memory = gaussian(n, 5, 0.1f);
  std::vector<float> x = g;
  std::vector<float> input(n);
  for (std::size_t i = 0; i < n; ++i) input[i] = g[i] + memory[i];
  const std::size_t k = TopkCompressor::k_for(0.05, n);
  EXPECT_EQ(k, 50u);
  std::vector<std::int32_t> idx(k);
  std::vector<float> vals(k);
  TopkCompressor::encode(x.data(), n, k, memory.data(), idx.data(), vals.data());
  std::vector<float> decoded(n, 0.f);
  TopkCompressor::decode(idx.data(), vals.data(), k, 1.f, decoded.data());
  for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(memory[i] + decoded[i], input[i]) << i;
  // and the kept entries are the k largest of the corrected gradient
  std::vector<float> mags(n);
  for (std::size_t i = 0; i < n; ++i) mags[i] = std::fabs(input[i]);
  std::vector<float> sorted = mags;
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  for (std::size_t j = 0; j < k; ++j) EXPECT_GE(mags[static_cast<std::size_t>(idx[j])], sorted[k - 1]);
}

namespace {
bool same_or_nan(float a, float b) { return f32_bits(a) == f32_bits(b) || (std::isnan(a) && std::isnan(b)); }
}  // namespace

TEST(ErrorFeedback, OnebitDeferredMemoryMatchesTheEagerFormOverSteps) {
  // worker_compress and server_compress keep their memories deferred (the last input and
  // its scales); over several steps their signs, scales and resolved residuals must be the
  // bits of the eager form (x = g + e; per chunk sign_compress(x, ..., e)), the input must
  // be left as it was, and residual + decoded must give x back. 777 elements over 3 chunks
  // of 288 (the last one short, not a multiple of 16); steps with zeros, cancellations,
  // negatives, and a NaN and an inf in chunk 1 at step 3 (chunk 1's scale and memory turn
  // NaN from then on, as the eager form's do; chunks 0 and 2 stay finite). Where several
  // NaNs meet, which one survives (payload, sign) is the compiler's operand order in both.
  const std::size_t n = 777;
  const int p = 3;
  const OnebitCompressor::Layout lay(n, p);
  EXPECT_EQ(lay.chunk % 32, 0u);
  EXPECT_EQ(lay.begin(p - 1) + lay.length(p - 1), n);
  const std::size_t cb = lay.chunk_bytes();
  const auto hk = gradsync::make_host_bucket_kernels();  // the host memory kind's kernels
  std::vector<float> want_err(n, 0.f), last(n, 0.f), scales(p, 0.f);
  // server of chunk 1: its own memory, the same checks
  const int r = 1;
  std::vector<float> want_server_err(lay.length(r), 0.f), server_last(lay.length(r), 0.f);
  float server_scale = 0.f;
  for (int step = 0; step < 5; ++step) {
    auto g = gaussian(n, 6 + static_cast<std::uint32_t>(step));
    if (step == 1)
      for (std::size_t i = 0; i < n; i += 5) g[i] = (i % 2) ? -0.f : -want_err[i];  // -0, and x = 0 exactly
    if (step == 2) std::fill(g.begin(), g.begin() + 300, 0.f);
    if (step == 3) {
      g[lay.begin(1) + 7] = NAN;
      g[lay.begin(1) + 9] = -INFINITY;
    }
    const auto g_in = g;
    std::vector<std::uint8_t> signs(cb * p, 0xab);
    OnebitCompressor::worker_compress(*hk, g.data(), lay, last.data(), signs.data(), scales.data());
    auto want_x = g_in;
    gradsync::kernels::add_inplace(want_x.data(), want_err.data(), n);
    for (int j = 0; j < p; ++j) {
      std::vector<std::uint8_t> want_signs(cb, 0);
      const float s = gradsync::kernels::sign_compress(want_x.data() + lay.begin(j), lay.length(j), want_signs.data(),
                                                       want_err.data() + lay.begin(j));
      ASSERT_TRUE(same_or_nan(scales[j], s)) << "step " << step << " chunk " << j;
      for (std::size_t b = 0; b < cb; ++b)
        ASSERT_EQ(signs[j * cb + b], want_signs[b]) << "step " << step << " chunk " << j << " byte " << b;
      std::vector<float> res(lay.length(j));
      gradsync::kernels::sign_residual(last.data() + lay.begin(j), scales[j], lay.length(j), res.data());
      std::vector<float> decoded(n);
      OnebitCompressor::decode_chunk(*hk, signs.data() + j * cb, &scales[j], lay, j, decoded.data());
      for (std::size_t k = 0; k < lay.length(j); ++k) {
        const std::size_t i = lay.begin(j) + k;
        ASSERT_EQ(f32_bits(g[i]), f32_bits(g_in[i])) << "gradient written, step " << step << " i=" << i;
        ASSERT_TRUE(same_or_nan(last[i], want_x[i])) << "memory, step " << step << " i=" << i;
        ASSERT_TRUE(same_or_nan(res[k], want_err[i])) << "residual, step " << step << " i=" << i;
        if (std::isfinite(scales[j])) {
          // e = fl(x - d): e + d equals x up to one rounding of the subtraction
          EXPECT_NEAR(res[k] + decoded[i], want_x[i], 1e-6f * (std::fabs(want_x[i]) + std::fabs(decoded[i]))) << i;
        }
      }
      EXPECT_EQ(std::isfinite(scales[j]), j != 1 || step < 3) << "step " << step << " chunk " << j;
    }
    // server: y = the worker's decoded chunk r (any data will do) + e_s
    std::vector<float> work(lay.length(r));
    for (std::size_t k = 0; k < work.size(); ++k) work[k] = g_in[k] * 0.5f;  // finite: chunk 0's values
    const auto work_in = work;
    std::vector<std::uint8_t> out(cb, 0xab), want_out(cb, 0);
    OnebitCompressor::server_compress(*hk, work.data(), lay, r, server_last.data(), &server_scale, out.data());
    auto y = work_in;
    gradsync::kernels::add_inplace(y.data(), want_server_err.data(), y.size());
    const float s = gradsync::kernels::sign_compress(y.data(), y.size(), want_out.data(), want_server_err.data());
    ASSERT_EQ(f32_bits(server_scale), f32_bits(s)) << "server, step " << step;
    ASSERT_EQ(out, want_out) << "server, step " << step;
    std::vector<float> res(y.size());
    gradsync::kernels::sign_residual(server_last.data(), server_scale, res.size(), res.data());
    for (std::size_t k = 0; k < y.size(); ++k) {
      ASSERT_EQ(f32_bits(work[k]), f32_bits(work_in[k])) << "server input written, step " << step;
      ASSERT_EQ(f32_bits(server_last[k]), f32_bits(y[k])) << "server memory, step " << step << " k=" << k;
      ASSERT_EQ(f32_bits(res[k]), f32_bits(want_server_err[k])) << "server residual, step " << step << " k=" << k;
    }
  }
}

TEST(ErrorFeedback, PowerSgdMemoryPlusApproximationIsInput) {
  BucketView b;
  b.index = 0;
  b.count = 40 * 30 + 30;
  b.tensors = {{"w", {40, 30}, 0, 1200}, {"b", {30}, 1200, 30}};
  std::vector<float> g = gaussian(b.count, 7);
  b.data = g.data();
  PowerSgdOptions o;
  o.rank = 2;
  o.start = 0;
  PowerSgdCompressor c(o, 1);
  const std::vector<float> input = g;  // memory is zero at the first step
  c.compute_p(b, 0);
  c.compute_q(b);
  c.decompress(b, 1);
  // The memory is internal; run a zero gradient next: the step input is then the memory.
  std::vector<float> zero(b.count, 0.f);
  b.data = zero.data();
  c.compute_p(b, 1);  // adds memory to the (zero) bucket
  for (std::size_t i = 0; i < b.count; ++i)
    EXPECT_NEAR(zero[i] + g[i], input[i], 1e-5f * (1 + std::fabs(input[i]))) << i;  // memory + approx = input
}

// ---- PowerSGD ----------------------------------------------------------------------------------------

namespace {

BucketView resnet_like_bucket(int index) {
  BucketView b;
  b.index = index;
  // conv 16x8x3x3 (16 x 72), bias 16, linear 10x64 (10 x 64), tiny 4x4 (not compressed at
  // rank 2: (4+4)*2*2 >= 16), bn weight 64, plus 5 trailing elements no tensor covers.
  b.tensors = {{"conv.weight", {16, 8, 3, 3}, 0, 1152},
               {"conv.bias", {16}, 1152, 16},
               {"fc.weight", {10, 64}, 1168, 640},
               {"tiny.weight", {4, 4}, 1808, 16},
               {"bn.weight", {64}, 1824, 64}};
  b.count = 1824 + 64 + 5;
  return b;
}

}  // namespace

TEST(PowerSgd, PlanFollowsTheHooksRule) {
  const BucketView b = resnet_like_bucket(0);
  const auto plan = PowerSgdCompressor::make_plan(b, 2, 2.0);
  ASSERT_EQ(plan.matrices.size(), 2u);
  EXPECT_EQ(plan.matrices[0].rows, 16);
  EXPECT_EQ(plan.matrices[0].cols, 72);
  EXPECT_EQ(plan.matrices[1].rows, 10);
  EXPECT_EQ(plan.matrices[1].cols, 64);
  EXPECT_EQ(plan.p_size, 16u * 2 + 10u * 2);
  EXPECT_EQ(plan.q_size, 72u * 2 + 64u * 2);
  EXPECT_EQ(plan.plain_size, 16u + 16 + 64 + 5);
  // rank larger than a dimension is capped: min(n, m, R)
  const auto big = PowerSgdCompressor::make_plan(b, 100, 0.01);
  for (const auto& m : big.matrices) EXPECT_LE(m.rank, std::min(m.rows, m.cols));
}

TEST(PowerSgd, ExactForLowRankMatricesAfterWarmStart) {
  for (int R : {1, 2, 4}) {
    BucketView b;
    b.index = 3;
    b.tensors = {{"a", {48, 40}, 0, 1920}, {"bias", {40}, 1920, 40}, {"b", {32, 6, 10}, 1960, 1920}};
    b.count = 1960 + 1920;
    PowerSgdOptions o;
    o.rank = R;
    o.start = 2;
    PowerSgdCompressor c(o, 77);
    std::mt19937 rng(R);
    std::normal_distribution<float> d;
    // Each matrix is c_t * U S V^T: orthonormal U (n x R), V (m x R) fixed, singular values
    // S = 1, 0.8, 0.6, 0.5 (well conditioned), and a scale c_t drawn anew at every step.
    using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    std::vector<RowMat> base;
    for (const auto& t : b.tensors) {
      if (t.shape.size() < 2) {
        base.emplace_back();
        continue;
      }
      const std::int64_t n = t.shape[0], m = static_cast<std::int64_t>(t.count) / n;
      const Eigen::MatrixXf U =
          Eigen::MatrixXf(Eigen::MatrixXf::NullaryExpr(n, R, [&] { return d(rng); })).householderQr().householderQ() *
          Eigen::MatrixXf::Identity(n, R);
      const Eigen::MatrixXf V =
          Eigen::MatrixXf(Eigen::MatrixXf::NullaryExpr(m, R, [&] { return d(rng); })).householderQr().householderQ() *
          Eigen::MatrixXf::Identity(m, R);
      Eigen::VectorXf S(R);
      for (int i = 0; i < R; ++i) S[i] = std::vector<float>{1.f, 0.8f, 0.6f, 0.5f}[static_cast<std::size_t>(i)];
      base.emplace_back(U * S.asDiagonal() * V.transpose());
    }
    for (std::int64_t step = 0; step < 6; ++step) {
      std::vector<float> g(b.count);
      for (std::size_t ti = 0; ti < b.tensors.size(); ++ti) {
        const auto& t = b.tensors[ti];
        if (t.shape.size() < 2) {
          for (std::size_t i = 0; i < t.count; ++i) g[t.offset + i] = d(rng);
          continue;
        }
        const float c = 0.5f + std::fabs(d(rng));
        const RowMat M = c * base[ti];
        std::copy(M.data(), M.data() + t.count, g.begin() + static_cast<std::ptrdiff_t>(t.offset));
      }
      const std::vector<float> want = g;
      b.data = g.data();
      if (step < o.start) continue;  // plain steps are all-reduces (covered by the MPI test)
      c.compute_p(b, step);
      c.compute_q(b);
      c.decompress(b, 1);
      double maxerr = 0, maxabs = 0;
      for (std::size_t i = 0; i < b.count; ++i) {
        maxerr = std::max(maxerr, static_cast<double>(std::fabs(g[i] - want[i])));
        maxabs = std::max(maxabs, static_cast<double>(std::fabs(want[i])));
      }
      EXPECT_LE(maxerr, 1e-4 * maxabs) << "R=" << R << " step=" << step;
    }
  }
}

TEST(PowerSgd, MatchesNaiveReferenceOnSimulatedRanks) {
  // p ranks simulated through the phase API: the collectives are sums done here.
  for (int p : {1, 3}) {
    const BucketView layout = resnet_like_bucket(1);
    PowerSgdOptions o;
    o.rank = 2;
    o.start = 1;
    std::vector<PowerSgdCompressor> ranks;
    for (int r = 0; r < p; ++r) ranks.emplace_back(o, 2024);
    reference::PowerSgdReference ref(p, o.rank, o.start, o.min_rate, 2024, layout);
    EXPECT_EQ(ref.compressed_matrices(), 2u);
    for (std::int64_t step = 0; step < 5; ++step) {
      reference::Grads grads;
      for (int r = 0; r < p; ++r) grads.push_back(gaussian(layout.count, static_cast<std::uint32_t>(100 * step + r)));
      const auto want = ref.step(grads, step);
      if (step < o.start) continue;
      std::vector<BucketView> views(static_cast<std::size_t>(p), layout);
      std::vector<std::vector<float>> data = grads;
      auto sum_over_ranks = [&](auto getter) {
        const std::span<float> first = getter(ranks[0]);
        for (int r = 1; r < p; ++r) {
          const std::span<float> v = getter(ranks[static_cast<std::size_t>(r)]);
          for (std::size_t i = 0; i < first.size(); ++i) first[i] += v[i];
        }
        for (int r = 1; r < p; ++r) std::ranges::copy(first, getter(ranks[static_cast<std::size_t>(r)]).begin());
      };
      for (int r = 0; r < p; ++r) {
        views[static_cast<std::size_t>(r)].data = data[static_cast<std::size_t>(r)].data();
        ranks[static_cast<std::size_t>(r)].compute_p(views[static_cast<std::size_t>(r)], step);
      }
      sum_over_ranks([&](PowerSgdCompressor& c) -> std::span<float> { return c.p_buffer(1); });
      sum_over_ranks([&](PowerSgdCompressor& c) -> std::span<float> { return c.plain_buffer(1); });
      for (int r = 0; r < p; ++r) ranks[static_cast<std::size_t>(r)].compute_q(views[static_cast<std::size_t>(r)]);
      sum_over_ranks([&](PowerSgdCompressor& c) -> std::span<float> { return c.q_buffer(1); });
      for (int r = 0; r < p; ++r) ranks[static_cast<std::size_t>(r)].decompress(views[static_cast<std::size_t>(r)], p);
      double maxabs = 0;
      for (double v : want) maxabs = std::max(maxabs, std::fabs(v));
      for (int r = 0; r < p; ++r)
        for (std::size_t i = 0; i < layout.count; ++i)
          ASSERT_NEAR(data[static_cast<std::size_t>(r)][i], want[i], 2e-5 * maxabs)
              << "p=" << p << " step=" << step << " rank=" << r << " i=" << i;
    }
  }
}

TEST(PowerSgd, SplitBalancesMatricesByElements) {
  PowerSgdCompressor::Plan plan;
  for (std::int64_t rows : {64, 512, 64, 1000, 2048, 64}) plan.matrices.push_back({0, rows, 100, 4, 0, 0});
  EXPECT_EQ(PowerSgdCompressor::split_matrices(plan, 1), (std::vector<std::size_t>{0, 6}));
  // 3752 rows in all: the first run ends where the middle of a matrix passes 1876.
  EXPECT_EQ(PowerSgdCompressor::split_matrices(plan, 2), (std::vector<std::size_t>{0, 4, 6}));
  const auto many = PowerSgdCompressor::split_matrices(plan, 8);  // more threads than matrices: empty runs
  ASSERT_EQ(many.size(), 9u);
  EXPECT_EQ(many.front(), 0u);
  EXPECT_EQ(many.back(), 6u);
  EXPECT_TRUE(std::is_sorted(many.begin(), many.end()));
  EXPECT_EQ(PowerSgdCompressor::split_matrices(PowerSgdCompressor::Plan{}, 2), (std::vector<std::size_t>{0, 0, 0}));
}

TEST(PowerSgd, ThreadsGiveTheSameBits) {
  // Every phase at threads=1, 2, 3 on simulated ranks: same P, Q, bucket and memory bits.
  const int p = 2;
  const BucketView layout = resnet_like_bucket(4);
  std::vector<std::vector<std::vector<float>>> outs;  // [threads][step * p + rank]
  for (int threads : {1, 2, 3}) {
    PowerSgdOptions o;
    o.rank = 2;
    o.start = 0;
    o.threads = threads;
    std::vector<PowerSgdCompressor> ranks;
    for (int r = 0; r < p; ++r) ranks.emplace_back(o, 5);
    std::vector<std::vector<float>> out;
    for (std::int64_t step = 0; step < 4; ++step) {
      std::vector<std::vector<float>> data;
      std::vector<BucketView> views(p, layout);
      for (int r = 0; r < p; ++r) data.push_back(gaussian(layout.count, static_cast<std::uint32_t>(10 * step + r)));
      auto sum = [&](auto getter) {
        std::vector<float> total(getter(ranks[0]).size(), 0.f);
        for (auto& c : ranks)
          for (std::size_t i = 0; i < total.size(); ++i) total[i] += getter(c)[i];
        for (auto& c : ranks) std::ranges::copy(total, getter(c).begin());
      };
      for (int r = 0; r < p; ++r) {
        views[static_cast<std::size_t>(r)].data = data[static_cast<std::size_t>(r)].data();
        ranks[static_cast<std::size_t>(r)].compute_p(views[static_cast<std::size_t>(r)], step);
      }
      sum([](PowerSgdCompressor& c) -> std::span<float> { return c.p_buffer(4); });
      sum([](PowerSgdCompressor& c) -> std::span<float> { return c.plain_buffer(4); });
      for (int r = 0; r < p; ++r) ranks[static_cast<std::size_t>(r)].compute_q(views[static_cast<std::size_t>(r)]);
      sum([](PowerSgdCompressor& c) -> std::span<float> { return c.q_buffer(4); });
      for (int r = 0; r < p; ++r) ranks[static_cast<std::size_t>(r)].decompress(views[static_cast<std::size_t>(r)], p);
      for (int r = 0; r < p; ++r) {
        out.push_back(data[static_cast<std::size_t>(r)]);
        const std::span<float> q = ranks[static_cast<std::size_t>(r)].q_buffer(4);
        out.emplace_back(q.begin(), q.end());
      }
    }
    outs.push_back(std::move(out));
  }
  for (std::size_t t = 1; t < outs.size(); ++t) EXPECT_EQ(outs[t], outs[0]) << "threads index " << t;
}

TEST(PowerSgd, RandomQIsStandardNormalAndSeeded) {
  std::vector<float> a(20000), b(20000), c(20000);
  PowerSgdCompressor::random_q(1, 0, 0, a.data(), a.size());
  PowerSgdCompressor::random_q(1, 0, 0, b.data(), b.size());
  PowerSgdCompressor::random_q(2, 0, 0, c.data(), c.size());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  double s = 0, s2 = 0;
  for (float v : a) {
    ASSERT_TRUE(std::isfinite(v));
    s += v;
    s2 += static_cast<double>(v) * v;
  }
  EXPECT_NEAR(s / a.size(), 0.0, 0.03);
  EXPECT_NEAR(s2 / a.size(), 1.0, 0.04);
}

TEST(PowerSgd, OrthogonalizeGivesOrthonormalColumns) {
  auto p = gaussian(50 * 4, 9);
  PowerSgdCompressor::orthogonalize(p.data(), 50, 4);
  Eigen::Map<Eigen::MatrixXf> P(p.data(), 50, 4);
  const Eigen::MatrixXf G = P.transpose() * P;
  EXPECT_LE((G - Eigen::MatrixXf::Identity(4, 4)).cwiseAbs().maxCoeff(), 1e-5f);
  std::vector<float> z(30, 0.f);  // a zero column stays zero (no NaN)
  PowerSgdCompressor::orthogonalize(z.data(), 10, 3);
  for (float v : z) EXPECT_EQ(v, 0.f);
}

// ---- top-k ------------------------------------------------------------------------------------

TEST(Topk, KIsCeilOfRatioTimesN) {
  EXPECT_EQ(TopkCompressor::k_for(0.01, 300), 3u);
  EXPECT_EQ(TopkCompressor::k_for(0.01, 301), 4u);
  EXPECT_EQ(TopkCompressor::k_for(0.001, 10), 1u);
  EXPECT_EQ(TopkCompressor::k_for(1.0, 10), 10u);
  EXPECT_EQ(TopkCompressor::k_for(0.1, 0), 0u);
}

TEST(Topk, SelectsTheTrueLargestMagnitudes) {
  std::vector<float> x = {0.5f, -3.f, 2.f, 0.f, -2.f, 7.f, -0.1f, 2.f};
  std::vector<float> memory(x.size(), 0.f);
  std::vector<std::int32_t> idx(4);
  std::vector<float> vals(4);
  TopkCompressor::encode(x.data(), x.size(), 4, memory.data(), idx.data(), vals.data());
  // |x| = .5 3 2 0 2 7 .1 2: the 4 largest are 7, 3 and the first two 2's (index order)
  EXPECT_EQ(idx, (std::vector<std::int32_t>{1, 2, 4, 5}));
  EXPECT_EQ(vals, (std::vector<float>{-3.f, 2.f, -2.f, 7.f}));
  EXPECT_EQ(memory, (std::vector<float>{0.5f, 0.f, 0.f, 0.f, 0.f, 0.f, -0.1f, 2.f}));
}

// ---- casts -----------------------------------------------------------------------------------------

TEST(Cast, RoundTrip) {
  const auto x = gaussian(5000, 12, 10.f);
  for (DType t : {DType::F16, DType::BF16}) {
    CastCompressor c(t);
    std::vector<std::uint16_t> h(x.size());
    std::vector<float> y(x.size());
    c.encode(x.data(), x.size(), 1.f, h.data());
    c.decode(h.data(), h.size(), y.data());
    const float rel = t == DType::F16 ? 0x1p-11f : 0x1p-8f;
    for (std::size_t i = 0; i < x.size(); ++i)
      if (std::fabs(x[i]) > 1e-3f) {
        ASSERT_LE(std::fabs(y[i] - x[i]), rel * std::fabs(x[i])) << i;
      }
    // exactly representable values come back bit for bit; the pre-scale is applied first
    std::vector<float> e = {1.f, -2.5f, 0.f, 1024.f, 0.125f};
    std::vector<std::uint16_t> he(e.size());
    std::vector<float> ye(e.size());
    c.encode(e.data(), e.size(), 0.5f, he.data());
    c.decode(he.data(), he.size(), ye.data());
    EXPECT_EQ(ye, (std::vector<float>{0.5f, -1.25f, 0.f, 512.f, 0.0625f}));
  }
}
