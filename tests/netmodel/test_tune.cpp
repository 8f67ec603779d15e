// Tests of `gradsync-model tune` (netmodel/tune.hpp): the search respects fixed knobs, its
// winner is the minimum of an independent re-prediction of every candidate, the default
// configuration is gradsync-train's, the compressor crossover follows the fabric, and the
// option handling refuses lists on non-knobs.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "netmodel/grid.hpp"
#include "netmodel/predict.hpp"
#include "netmodel/tune.hpp"

using namespace gradsync;
using namespace gradsync::netmodel;

namespace {

PredictConfig base_config(const std::string& fabric, int nodes, int rpn, int64_t batch) {
  PredictConfig c;
  c.model = "resnet50";
  c.fabric = fabric;
  c.nodes = nodes;
  c.ranks_per_node = rpn;
  c.batch_per_rank = batch;
  return c;
}

// One command-line option as apply_tune_axes takes it: numbers, or strings.
Axis number_axis(const std::string& name, std::vector<double> values) {
  Axis a;
  a.name = name;
  a.numbers = std::move(values);
  return a;
}
Axis string_axis(const std::string& name, std::vector<std::string> values) {
  Axis a;
  a.name = name;
  a.strings = std::move(values);
  return a;
}

TuneSpace small_space() {
  TuneSpace s;
  s.bucket_mb = {25, 5, 100};
  s.first_bucket_mb = {1, 5};
  s.algo = {"ring", "rabenseifner", "rd"};
  s.chunk_bytes = {32768, 4194304};
  s.channels = {1, 2};
  s.compress = {"none", "powersgd:rank=4"};
  s.precision = {"fp32"};
  return s;
}

}  // namespace

TEST(Tune, EveryKnobFixedEvaluatesExactlyThatConfiguration) {
  Predictor p;
  TuneSpace s;
  s.bucket_mb = {10};
  s.first_bucket_mb = {2};
  s.algo = {"rabenseifner"};
  s.chunk_bytes = {65536};
  s.channels = {1};
  s.compress = {"fp16"};
  s.precision = {"fp32"};
  const PredictConfig base = base_config("seed-tcp", 4, 1, 32);
  const TuneReport r = tune(base, s, p, 5);
  EXPECT_EQ(r.evaluated, 1u);
  EXPECT_EQ(r.best.config.bucket_mb, 10);
  EXPECT_EQ(r.best.config.first_bucket_mb, 2);
  EXPECT_EQ(r.best.config.algo, "rabenseifner");
  EXPECT_EQ(r.best.config.compress, "fp16");
  PredictConfig again = r.best.config;
  EXPECT_DOUBLE_EQ(p.predict(again, false).step_time_s, r.best.step_time_s);
}

TEST(Tune, WinnerIsTheMinimumOverAnIndependentRePrediction) {
  Predictor p;
  const PredictConfig base = base_config("seed-tcp", 4, 1, 32);
  const TuneSpace s = small_space();
  const TuneReport r = tune(base, s, p, 5);
  // rd and rabenseifner take no chunk or channels: 3 x 2 x 2 x (2 x 2 ring + 1 + 1).
  EXPECT_EQ(r.evaluated, 3u * 2 * 2 * (4 + 1 + 1));
  Predictor fresh;
  double best = 1e300;
  for (double b : s.bucket_mb)
    for (double f : s.first_bucket_mb)
      for (const auto& a : s.algo)
        for (double ch : s.chunk_bytes)
          for (int k : s.channels)
            for (const auto& comp : s.compress) {
              PredictConfig c = base;
              c.bucket_mb = b;
              c.first_bucket_mb = f;
              c.algo = a;
              c.chunk_bytes = ch;
              c.channels = k;
              c.compress = comp;
              best = std::min(best, fresh.predict(c, false).step_time_s);
            }
  EXPECT_DOUBLE_EQ(r.best.step_time_s, best);
  ASSERT_FALSE(r.top.empty());
  EXPECT_DOUBLE_EQ(r.top.front().step_time_s, r.best.step_time_s);
  for (std::size_t i = 1; i < r.top.size(); ++i) EXPECT_LE(r.top[i - 1].step_time_s, r.top[i].step_time_s);
  ASSERT_EQ(r.best_per_compressor.size(), 2u);
  EXPECT_EQ(r.best_per_compressor[0].config.compress, "none");
  EXPECT_EQ(r.best_per_compressor[1].config.compress, "powersgd:rank=4");
}

TEST(Tune, AlgorithmsPredictedAlikeAreOneAlternative) {
  // topk sends all-gathers only: its configurations differ in nothing but the name of the
  // all-reduce algorithm, so the list shows each once, naming the others.
  Predictor p;
  TuneSpace s = small_space();
  s.compress = {"topk:ratio=0.01"};
  const TuneReport r = tune(base_config("seed-tcp", 4, 1, 32), s, p, 4);
  ASSERT_EQ(r.top.size(), 4u);
  // The winner (5 MiB buckets, chunk 32 KiB) is what ring, rd and rabenseifner all give.
  EXPECT_EQ(r.top[0].config.bucket_mb, 5);
  EXPECT_EQ(r.top[0].same_algos.size(), 2u);
  for (std::size_t i = 0; i < r.top.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j)
      EXPECT_FALSE(r.top[i].config.bucket_mb == r.top[j].config.bucket_mb &&
                   r.top[i].config.first_bucket_mb == r.top[j].config.first_bucket_mb &&
                   r.top[i].step_time_s == r.top[j].step_time_s)
          << "alternatives " << j << " and " << i << " differ only in collective knobs";
    for (const auto& a : r.top[i].same_algos) {
      PredictConfig c = r.top[i].config;
      c.algo = a;
      EXPECT_NEAR(p.predict(c, false).step_time_s, r.top[i].step_time_s, 1e-9 * r.top[i].step_time_s) << a;
    }
  }
  EXPECT_NE(tune_text(r).find("(predicted the same with --algo"), std::string::npos);
  // Without compression the algorithms cost differently: nothing is merged.
  s.compress = {"none"};
  const TuneReport plain = tune(base_config("seed-tcp", 4, 1, 32), s, p, 6);
  for (const auto& e : plain.top) EXPECT_TRUE(e.same_algos.empty()) << train_args(e.config);
}

TEST(Tune, DefaultIsTheTrainDefaultAndNeverBeatsTheWinner) {
  Predictor p;
  const PredictConfig base = base_config("seed-tcp", 4, 1, 32);
  const PredictConfig d = runtime_default_config(base);
  EXPECT_EQ(d.algo, "auto");
  EXPECT_EQ(d.bucket_mb, 25);
  EXPECT_EQ(d.first_bucket_mb, 1);
  EXPECT_EQ(d.chunk_bytes, 32768);  // between nodes: below the 64 KiB TCP eager limit
  EXPECT_EQ(runtime_default_config(base_config("shm-local", 1, 4, 32)).chunk_bytes, 4 << 20);
  const TuneReport r = tune(base, default_tune_space(4, 1), p, 3);
  EXPECT_LE(r.best.step_time_s, r.base.step_time_s);
  EXPECT_GT(r.evaluated, 10000u);
}

TEST(Tune, CompressionPaysOnSlowLinksNotOnFastOnes) {
  TuneSpace s = small_space();
  Predictor p;
  // 1 Gbit/s-class Ethernet, 8 nodes: the bandwidth term dominates, PowerSGD wins.
  const TuneReport slow = tune(base_config("seed-tcp", 8, 1, 32), s, p, 3);
  EXPECT_EQ(slow.best.config.compress, "powersgd:rank=4");
  // NVLink inside one node, a large batch: compute-bound, the codec is pure cost.
  const TuneReport fast = tune(base_config("nvlink-h100", 1, 8, 256), s, p, 3);
  EXPECT_EQ(fast.best.config.compress, "none");
  EXPECT_EQ(fast.bound.name, "compute");
}

TEST(Tune, DefaultSpaceFollowsThePlacement) {
  auto has = [](const TuneSpace& s, const char* a) { return std::find(s.algo.begin(), s.algo.end(), a) != s.algo.end(); };
  EXPECT_TRUE(has(default_tune_space(1, 4), "shm"));
  EXPECT_FALSE(has(default_tune_space(1, 4), "hier"));
  EXPECT_TRUE(has(default_tune_space(2, 4), "hier"));
  EXPECT_FALSE(has(default_tune_space(2, 4), "shm"));
  EXPECT_FALSE(has(default_tune_space(4, 1), "hier"));
}

TEST(Tune, OptionsFixKnobsAndRefuseListsElsewhere) {
  std::vector<Axis> given = {number_axis("nodes", {2}), string_axis("algo", {"ring", "rd"}),
                              string_axis("fabric", {"seed-tcp", "seed-roce"})};
  PredictConfig base;
  TuneSpace s;
  apply_tune_axes(given, base, s);
  EXPECT_EQ(base.nodes, 2);
  EXPECT_EQ(s.algo, (std::vector<std::string>{"ring", "rd"}));
  EXPECT_EQ(s.fabric.size(), 2u);
  EXPECT_EQ(base.fabric, "seed-tcp");
  EXPECT_EQ(s.bucket_mb, default_tune_space(2, 1).bucket_mb);  // not given: searched
  given[0].numbers = {2, 4};
  EXPECT_THROW(apply_tune_axes(given, base, s), UsageError);
}

TEST(Tune, RanksSharingAMachinesCoresPriceTheCodecsAtTheirShare) {
  // 3 hosts on one machine's 2 cores (the namespace testbed): predict --machine-ranks 3
  // --machine-cores 2, and what gradsync-train --tune passes from its own placement.
  const std::vector<Axis> given = {number_axis("nodes", {3}), number_axis("machine-ranks", {3}),
                                    number_axis("machine-cores", {2}),
                                    string_axis("compress", {"none", "powersgd:rank=4"})};
  PredictConfig shared;
  TuneSpace s;
  apply_tune_axes(given, shared, s);
  EXPECT_EQ(shared.machine_ranks, 3);
  EXPECT_EQ(shared.machine_cores, 2);
  shared.fabric = "seed-tcp";
  shared.model = "resnet50";
  Predictor p;
  PredictConfig alone = shared;
  alone.machine_ranks = alone.machine_cores = 0;
  // A compressed step's codecs take ceil(3 / 2) = 2x their time alone; a plain all-reduce
  // has none, so it is priced the same.
  shared.compress = alone.compress = "powersgd:rank=4";
  const StepResult a = p.predict(alone), b = p.predict(shared);
  double codec_a = 0, codec_b = 0;
  for (const auto& k : a.buckets) codec_a += k.codec_s;
  for (const auto& k : b.buckets) codec_b += k.codec_s;
  ASSERT_GT(codec_a, 0);
  EXPECT_NEAR(codec_b, 2 * codec_a, 1e-9 * codec_a);
  EXPECT_GT(b.step_time_s, a.step_time_s);
  shared.compress = alone.compress = "none";
  EXPECT_DOUBLE_EQ(p.predict(shared).step_time_s, p.predict(alone).step_time_s);
  // The tuner prices every candidate so, the default configuration included.
  s.bucket_mb = {25};
  s.first_bucket_mb = {1};
  s.algo = {"ring"};
  s.chunk_bytes = {32768};
  s.channels = {1};
  s.precision = {"fp32"};
  shared.compress = "none";
  const TuneReport r = tune(shared, s, p, 2);
  EXPECT_EQ(r.best.config.machine_ranks, 3);
  EXPECT_EQ(r.base.config.machine_cores, 2);
  for (const auto& e : r.best_per_compressor) {
    PredictConfig again = e.config;
    EXPECT_DOUBLE_EQ(p.predict(again).step_time_s, e.step_time_s) << e.config.compress;
  }
  // One without the other is refused, naming both options.
  PredictConfig half = shared;
  half.machine_cores = 0;
  try {
    (void)p.predict(half);
    ADD_FAILURE() << "predict accepted --machine-ranks without --machine-cores";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--machine-ranks and --machine-cores"), std::string::npos) << e.what();
  }
}

TEST(Tune, InterfaceIsAKnobWhenSeveralFabricsAreOffered) {
  Predictor p;
  TuneSpace s = small_space();
  s.fabric = {"seed-tcp", "ib-hdr"};
  const TuneReport r = tune(base_config("seed-tcp", 4, 1, 32), s, p, 3);
  EXPECT_EQ(r.fabrics_searched, 2u);
  EXPECT_EQ(r.best.config.fabric, "ib-hdr");
  EXPECT_NE(tune_text(r).find("interface (fabric): ib-hdr"), std::string::npos);
}

TEST(Tune, TrainArgsNameOnlyTheKnobsTheAlgorithmTakes) {
  PredictConfig c;
  c.bucket_mb = 10;
  c.first_bucket_mb = 0.5;
  c.algo = "ring";
  c.chunk_bytes = 32768;
  c.channels = 2;
  c.compress = "powersgd:rank=4";
  c.precision = "bf16";
  EXPECT_EQ(train_args(c), "--bucket-mb 10 --first-bucket-mb 0.5 --algo ring --chunk-bytes 32768 --channels 2 "
                           "--compress powersgd:rank=4 --precision bf16");
  c.algo = "rd";
  EXPECT_EQ(train_args(c).find("--chunk-bytes"), std::string::npos);
  EXPECT_EQ(train_args(c).find("--channels"), std::string::npos);
}

TEST(Tune, FirstBucketCapsPredictedAlikeAreOneAlternative) {
  // ResNet-50 with PowerSGD rank 1 on 4 RoCE nodes of 8 GPUs: the first bucket's small
  // all-reduces hide behind backward at every cap, so the caps tie to the last digit. The
  // list shows the configuration once and names the other caps; a cap is named exactly when
  // changing only it predicts the same.
  Predictor p;
  PredictConfig base = base_config("roce-100g", 4, 8, 32);
  base.compute_profile = "a100";
  TuneSpace s;
  s.bucket_mb = {1, 5};
  s.first_bucket_mb = {0.25, 1, 5};
  s.algo = {"auto", "ring"};
  s.chunk_bytes = {32768};
  s.channels = {1};
  s.compress = {"powersgd:rank=1"};
  s.precision = {"bf16"};
  const TuneReport r = tune(base, s, p, 4);
  ASSERT_FALSE(r.top.empty());
  EXPECT_FALSE(r.top[0].same_first_bucket_mb.empty()) << tune_text(r);
  for (std::size_t i = 0; i < r.top.size(); ++i) {
    const TuneEntry& e = r.top[i];
    for (double f : s.first_bucket_mb) {
      if (f == e.config.first_bucket_mb) continue;
      PredictConfig c = e.config;
      c.first_bucket_mb = f;
      const bool same = std::abs(p.predict(c, false).step_time_s - e.step_time_s) <= 1e-9 * e.step_time_s;
      const bool listed = std::find(e.same_first_bucket_mb.begin(), e.same_first_bucket_mb.end(), f) !=
                          e.same_first_bucket_mb.end();
      EXPECT_EQ(same, listed) << train_args(e.config) << " with --first-bucket-mb " << f;
    }
    for (std::size_t j = 0; j < i; ++j)
      EXPECT_FALSE(r.top[i].config.bucket_mb == r.top[j].config.bucket_mb && r.top[i].step_time_s == r.top[j].step_time_s)
          << "alternatives " << j << " and " << i << " differ only in knobs that change nothing";
  }
  EXPECT_NE(tune_text(r).find("(predicted the same with --first-bucket-mb 1, 5)"), std::string::npos) << tune_text(r);
}
