// Tests of the model zoo and compute profiles: published parameter counts, tensor shapes,
// FLOPs, and the profile TOML format (round trip, errors that name file, line and key).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "core/error.hpp"
#include "models/compute_profile.hpp"
#include "models/zoo.hpp"

namespace gm = gradsync::models;

namespace {

const gm::TensorSpec* find_tensor(const gm::ModelSpec& m, const std::string& name) {
  for (const auto& l : m.layers)
    for (const auto& t : l.params)
      if (t.name == name) return &t;
  return nullptr;
}

const gm::LayerSpec* find_layer(const gm::ModelSpec& m, const std::string& name) {
  for (const auto& l : m.layers)
    if (l.name == name) return &l;
  return nullptr;
}

std::vector<int64_t> shape_of(const gm::ModelSpec& m, const std::string& name) {
  const auto* t = find_tensor(m, name);
  EXPECT_NE(t, nullptr) << m.name << " has no tensor " << name;
  return t ? t->shape : std::vector<int64_t>{};
}

// A temp file removed at scope exit.
class TempFile {
 public:
  explicit TempFile(const std::string& tag)
      : path_((std::filesystem::temp_directory_path() /
               ("gradsync_test_models_" + std::to_string(::getpid()) + "_" + tag + ".toml"))
                  .string()) {}
  ~TempFile() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  const std::string& path() const { return path_; }
  void write(const std::string& text) const { std::ofstream(path_) << text; }

 private:
  std::string path_;
};

// The message of the UsageError that load_profile throws for this file text.
std::string load_error(const std::string& tag, const std::string& text) {
  TempFile f(tag);
  f.write(text);
  try {
    gm::load_profile(f.path());
  } catch (const gradsync::UsageError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(f.path()), std::string::npos) << "error does not name the file: " << msg;
    return msg;
  }
  ADD_FAILURE() << "no UsageError for:\n" << text;
  return "";
}

const char* kGoodHeader =
    "name = \"t\"\n"
    "device = \"d\"\n"
    "source = \"s\"\n"
    "peak_flops = 1e12\n"
    "peak_flops_half = 2e12\n";

}  // namespace

// ---- zoo ---------------------------------------------------------------------------------------

TEST(Zoo, PublishedParameterCounts) {
  const std::map<std::string, int64_t> expected = {
      {"resnet18-cifar", 11173962}, {"resnet50", 25557032}, {"vgg16", 138357544},
      {"bert-base", 109482240},     {"gpt2", 124439808},    {"gpt2-medium", 354823168}};
  ASSERT_EQ(gm::zoo_names().size(), expected.size());
  for (const auto& name : gm::zoo_names()) {
    SCOPED_TRACE(name);
    const auto m = gm::zoo_model(name);
    EXPECT_EQ(m.name, name);
    EXPECT_EQ(m.num_parameters(), expected.at(name));
    EXPECT_EQ(m.grad_bytes(), 4 * expected.at(name));
    EXPECT_EQ(m.grad_bytes(2), 2 * expected.at(name));
    EXPECT_GT(m.samples_per_epoch, 0);
    EXPECT_FALSE(m.input_shape.empty());
    EXPECT_FALSE(m.dataset.empty());
  }
}

TEST(Zoo, TensorsAreUniqueAndInForwardOrder) {
  for (const auto& name : gm::zoo_names()) {
    SCOPED_TRACE(name);
    const auto m = gm::zoo_model(name);
    const auto ts = m.tensors();
    EXPECT_EQ(static_cast<int64_t>(ts.size()), m.num_tensors());
    std::set<std::string> names;
    int64_t total = 0;
    for (const auto& t : ts) {
      EXPECT_TRUE(names.insert(t.name).second) << "duplicate tensor " << t.name;
      EXPECT_GT(t.numel(), 0);
      total += t.numel();
    }
    EXPECT_EQ(total, m.num_parameters());
    for (const auto& l : m.layers) {
      EXPECT_GT(l.fwd_flops, 0) << l.name;
      EXPECT_GT(l.bwd_flops, 0) << l.name;
      for (const auto& t : l.params) EXPECT_EQ(t.name.rfind(l.name + ".", 0), 0u) << t.name;
    }
  }
}

TEST(Zoo, TensorCounts) {
  EXPECT_EQ(gm::zoo_model("resnet50").num_tensors(), 161);
  EXPECT_EQ(gm::zoo_model("vgg16").num_tensors(), 32);
  EXPECT_EQ(gm::zoo_model("resnet18-cifar").num_tensors(), 62);
  EXPECT_EQ(gm::zoo_model("bert-base").num_tensors(), 5 + 12 * 16 + 2);
  EXPECT_EQ(gm::zoo_model("gpt2").num_tensors(), 2 + 12 * 12 + 2);
  EXPECT_EQ(gm::zoo_model("gpt2-medium").num_tensors(), 2 + 24 * 12 + 2);
}

TEST(Zoo, NamedShapes) {
  using S = std::vector<int64_t>;
  const auto r50 = gm::zoo_model("resnet50");
  EXPECT_EQ(shape_of(r50, "conv1.weight"), (S{64, 3, 7, 7}));
  EXPECT_EQ(shape_of(r50, "fc.weight"), (S{1000, 2048}));
  EXPECT_EQ(shape_of(r50, "fc.bias"), (S{1000}));
  EXPECT_EQ(shape_of(r50, "layer1.0.downsample.0.weight"), (S{256, 64, 1, 1}));
  EXPECT_EQ(shape_of(r50, "layer3.5.conv2.weight"), (S{256, 256, 3, 3}));
  EXPECT_EQ(shape_of(r50, "layer4.2.bn3.bias"), (S{2048}));
  EXPECT_EQ(r50.tensors().front().name, "conv1.weight");
  EXPECT_EQ(r50.tensors().back().name, "fc.bias");
  EXPECT_EQ(find_tensor(r50, "bn1.running_mean"), nullptr);  // a buffer, not a parameter

  const auto r18 = gm::zoo_model("resnet18-cifar");
  EXPECT_EQ(shape_of(r18, "conv1.weight"), (S{64, 3, 3, 3}));
  EXPECT_EQ(find_tensor(r18, "conv1.bias"), nullptr);
  EXPECT_EQ(shape_of(r18, "layer2.0.shortcut.0.weight"), (S{128, 64, 1, 1}));
  EXPECT_EQ(find_tensor(r18, "layer1.0.shortcut.0.weight"), nullptr);
  EXPECT_EQ(shape_of(r18, "linear.weight"), (S{10, 512}));

  const auto vgg = gm::zoo_model("vgg16");
  EXPECT_EQ(shape_of(vgg, "features.0.weight"), (S{64, 3, 3, 3}));
  EXPECT_EQ(shape_of(vgg, "features.28.weight"), (S{512, 512, 3, 3}));
  EXPECT_EQ(shape_of(vgg, "classifier.0.weight"), (S{4096, 25088}));
  EXPECT_EQ(shape_of(vgg, "classifier.6.bias"), (S{1000}));

  const auto bert = gm::zoo_model("bert-base");
  EXPECT_EQ(shape_of(bert, "embeddings.word_embeddings.weight"), (S{30522, 768}));
  EXPECT_EQ(shape_of(bert, "embeddings.position_embeddings.weight"), (S{512, 768}));
  EXPECT_EQ(shape_of(bert, "encoder.layer.11.intermediate.dense.weight"), (S{3072, 768}));
  EXPECT_EQ(shape_of(bert, "pooler.dense.weight"), (S{768, 768}));

  const auto gpt2 = gm::zoo_model("gpt2");
  EXPECT_EQ(shape_of(gpt2, "transformer.wte.weight"), (S{50257, 768}));
  EXPECT_EQ(shape_of(gpt2, "transformer.wpe.weight"), (S{1024, 768}));
  EXPECT_EQ(shape_of(gpt2, "transformer.h.0.attn.c_attn.weight"), (S{768, 2304}));
  EXPECT_EQ(shape_of(gpt2, "transformer.h.11.mlp.c_proj.weight"), (S{3072, 768}));
  EXPECT_EQ(shape_of(gpt2, "transformer.ln_f.bias"), (S{768}));

  const auto med = gm::zoo_model("gpt2-medium");
  EXPECT_EQ(shape_of(med, "transformer.h.23.attn.c_attn.weight"), (S{1024, 3072}));
}

TEST(Zoo, Gpt2TiedHeadNotCounted) {
  const auto m = gm::zoo_model("gpt2");
  EXPECT_EQ(find_tensor(m, "lm_head.weight"), nullptr);
  const auto* head = find_layer(m, "lm_head");
  ASSERT_NE(head, nullptr);
  EXPECT_TRUE(head->params.empty());
  EXPECT_DOUBLE_EQ(head->fwd_flops, 2.0 * 768 * 50257 * 1024);
  // Without the head, the count is exactly the published 124,439,808 (with it: +38.6M).
  EXPECT_EQ(m.num_parameters(), 124439808);
}

TEST(Zoo, Resnet50FlopsMatchPublished) {
  // torchvision: 4.09 GMACs per 224x224 image = ~8.2 GFLOPs at 2 FLOPs per MAC.
  const auto m = gm::zoo_model("resnet50");
  EXPECT_NEAR(m.fwd_flops(), 8.2e9, 0.05 * 8.2e9);
}

TEST(Zoo, OtherFlopsMatchPublished) {
  // torchvision vgg16: 15.47 GMACs.
  EXPECT_NEAR(gm::zoo_model("vgg16").fwd_flops(), 2 * 15.47e9, 0.05 * 2 * 15.47e9);
  // CIFAR ResNet-18: 0.556 GMACs per 32x32 image.
  EXPECT_NEAR(gm::zoo_model("resnet18-cifar").fwd_flops(), 2 * 0.556e9, 0.05 * 2 * 0.556e9);
  // Transformers: 2 FLOPs per weight per token (the head uses wte) + 4*s^2*d per layer.
  const auto gpt2 = gm::zoo_model("gpt2");
  const double s = 1024, d = 768, L = 12;
  const double expect = 2.0 * 124439808 * s + 4 * s * s * d * L;
  EXPECT_NEAR(gpt2.fwd_flops(), expect, 0.05 * expect);
  const auto bert = gm::zoo_model("bert-base");
  const double sb = 128;
  const double bert_matmul = 2.0 * (85054464) * sb + 4 * sb * sb * d * L;  // encoder weights
  EXPECT_NEAR(bert.fwd_flops(), bert_matmul, 0.05 * bert_matmul);
}

TEST(Zoo, BackwardIsTwiceForwardExceptFirstLayer) {
  const auto m = gm::zoo_model("resnet50");
  EXPECT_DOUBLE_EQ(m.layers.front().bwd_flops, m.layers.front().fwd_flops);
  for (size_t i = 1; i < m.layers.size(); ++i)
    EXPECT_DOUBLE_EQ(m.layers[i].bwd_flops, 2 * m.layers[i].fwd_flops) << m.layers[i].name;
  const auto g = gm::zoo_model("gpt2");
  const double ratio = g.bwd_flops() / g.fwd_flops();
  EXPECT_GT(ratio, 1.95);
  EXPECT_LE(ratio, 2.0);
}

TEST(Zoo, UnknownNameListsKnownNames) {
  try {
    gm::zoo_model("resnet51");
    FAIL() << "no exception";
  } catch (const gradsync::UsageError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("resnet51"), std::string::npos) << msg;
    for (const auto& n : gm::zoo_names()) EXPECT_NE(msg.find(n), std::string::npos) << msg;
  }
}

// ---- compute profiles -------------------------------------------------------------------------

TEST(Profile, BuiltinsAreValid) {
  EXPECT_EQ(gm::profile_names(), (std::vector<std::string>{"h200", "a100", "v100", "cpu"}));
  for (const auto& n : gm::profile_names()) {
    const auto p = gm::builtin_profile(n);
    EXPECT_EQ(p.name, n);
    EXPECT_FALSE(p.source.empty());
    EXPECT_NO_THROW(gm::validate_profile(p));
    EXPECT_EQ(gm::load_profile(n).peak_flops, p.peak_flops);
  }
  EXPECT_DOUBLE_EQ(gm::builtin_profile("h200").peak_flops_half, 989e12);
  EXPECT_DOUBLE_EQ(gm::builtin_profile("a100").peak_flops, 19.5e12);
  EXPECT_THROW(gm::builtin_profile("h100"), gradsync::UsageError);
  try {
    gm::load_profile("no-such-profile");
    FAIL() << "no exception";
  } catch (const gradsync::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("a100"), std::string::npos) << e.what();
  }
}

TEST(Profile, SaveLoadRoundTrip) {
  gm::ComputeProfile p = gm::builtin_profile("a100");
  p.name = "a100 \"measured\" \\ run";
  p.source = "line one\nline two\ttab";
  p.efficiency = 1.0 / 3.0;
  p.per_layer_overhead_s = 0;
  p.peak_flops = 19500000000000;  // prints without a decimal point: must stay a float
  p.measured["layer1.0.conv1"] = {1.2345678901234567e-5, 2.5e-5};
  p.measured["fc"] = {0, 1e-7};
  TempFile f("roundtrip");
  gm::save_profile(p, f.path());
  const auto q = gm::load_profile(f.path());
  EXPECT_EQ(q.name, p.name);
  EXPECT_EQ(q.device, p.device);
  EXPECT_EQ(q.source, p.source);
  EXPECT_EQ(q.peak_flops, p.peak_flops);
  EXPECT_EQ(q.peak_flops_half, p.peak_flops_half);
  EXPECT_EQ(q.efficiency, p.efficiency);
  EXPECT_EQ(q.per_layer_overhead_s, p.per_layer_overhead_s);
  EXPECT_EQ(q.optimizer_bytes_per_s, p.optimizer_bytes_per_s);
  EXPECT_EQ(q.measured, p.measured);
}

TEST(Profile, IntegersAcceptedForFloats) {
  TempFile f("ints");
  f.write(std::string(kGoodHeader) +
          "efficiency = 1\nper_layer_overhead_s = 0\noptimizer_bytes_per_s = 1000000000\n");
  const auto p = gm::load_profile(f.path());
  EXPECT_EQ(p.efficiency, 1.0);
  EXPECT_EQ(p.optimizer_bytes_per_s, 1e9);
}

TEST(Profile, SyntaxErrorNamesLine) {
  const std::string msg = load_error(
      "syntax", "name = \"t\"\ndevice = \"d\"\nsource = = \"oops\"\npeak_flops = 1e12\n");
  EXPECT_NE(msg.find(":3:"), std::string::npos) << msg;
}

TEST(Profile, BadValuesNameLineAndKey) {
  const std::string tail_ok = "per_layer_overhead_s = 1e-5\noptimizer_bytes_per_s = 1e11\n";
  {  // non-positive value, line 6
    const auto msg = load_error("neg", std::string(kGoodHeader) + "efficiency = -0.5\n" + tail_ok);
    EXPECT_NE(msg.find(":6:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'efficiency'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("-0.5"), std::string::npos) << msg;
  }
  {  // wrong type, line 6
    const auto msg =
        load_error("type", std::string(kGoodHeader) + "efficiency = \"high\"\n" + tail_ok);
    EXPECT_NE(msg.find(":6:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'efficiency'"), std::string::npos) << msg;
  }
  {  // missing key
    const auto msg = load_error("missing", std::string(kGoodHeader) + tail_ok);
    EXPECT_NE(msg.find("'efficiency'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("missing"), std::string::npos) << msg;
  }
  {  // typo'd key, line 7
    const auto msg = load_error(
        "typo", std::string(kGoodHeader) + "efficiency = 0.5\nefficency = 0.5\n" + tail_ok);
    EXPECT_NE(msg.find(":7:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'efficency'"), std::string::npos) << msg;
  }
  {  // bad measurement, line 10
    const auto msg = load_error("measured", std::string(kGoodHeader) + "efficiency = 0.5\n" +
                                                tail_ok + "[measured]\n\"fc\" = [1e-6]\n");
    EXPECT_NE(msg.find(":10:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'measured.fc'"), std::string::npos) << msg;
  }
  {  // negative measurement, line 10
    const auto msg =
        load_error("measured_neg", std::string(kGoodHeader) + "efficiency = 0.5\n" + tail_ok +
                                       "[measured]\n\"fc\" = [1e-6, -1e-6]\n");
    EXPECT_NE(msg.find(":10:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'measured.fc'"), std::string::npos) << msg;
  }
}

TEST(Profile, LayerTimesScaleLinearlyWithBatch) {
  const auto m = gm::zoo_model("resnet50");
  auto p = gm::builtin_profile("a100");
  p.per_layer_overhead_s = 0;
  const auto t1 = gm::layer_times(m, p, 1, false);
  const auto t32 = gm::layer_times(m, p, 32, false);
  ASSERT_EQ(t1.fwd_s.size(), m.layers.size());
  ASSERT_EQ(t1.bwd_s.size(), m.layers.size());
  double s1 = 0, s32 = 0;
  for (size_t i = 0; i < m.layers.size(); ++i) {
    EXPECT_NEAR(t32.fwd_s[i], 32 * t1.fwd_s[i], 1e-12 * t32.fwd_s[i]);
    EXPECT_NEAR(t32.bwd_s[i], 32 * t1.bwd_s[i], 1e-12 * t32.bwd_s[i]);
    s1 += t1.fwd_s[i] + t1.bwd_s[i];
    s32 += t32.fwd_s[i] + t32.bwd_s[i];
  }
  EXPECT_NEAR(s32, 32 * s1, 1e-9 * s32);
  // Sum matches FLOPs / (peak * efficiency).
  EXPECT_NEAR(s1, (m.fwd_flops() + m.bwd_flops()) / (p.peak_flops * p.efficiency), 1e-9 * s1);

  // With a per-layer overhead the times are affine: t(b) = overhead + b * slope.
  p.per_layer_overhead_s = 1e-5;
  const auto a1 = gm::layer_times(m, p, 1, false);
  const auto a2 = gm::layer_times(m, p, 2, false);
  const auto a5 = gm::layer_times(m, p, 5, false);
  for (size_t i = 0; i < m.layers.size(); ++i) {
    EXPECT_NEAR(a5.fwd_s[i] - a1.fwd_s[i], 4 * (a2.fwd_s[i] - a1.fwd_s[i]), 1e-12);
    EXPECT_NEAR(a1.bwd_s[i] - (a2.bwd_s[i] - a1.bwd_s[i]), 1e-5, 1e-12);
  }
}

TEST(Profile, HalfPrecisionAndMeasuredOverride) {
  const auto m = gm::zoo_model("resnet18-cifar");
  auto p = gm::builtin_profile("h200");
  const auto full = gm::layer_times(m, p, 64, false);
  const auto half = gm::layer_times(m, p, 64, true);
  for (size_t i = 0; i < m.layers.size(); ++i) EXPECT_LT(half.fwd_s[i], full.fwd_s[i]);

  p.measured["linear"] = {1e-6, 3e-6};
  const auto t = gm::layer_times(m, p, 10, false);
  EXPECT_DOUBLE_EQ(t.fwd_s.back(), p.per_layer_overhead_s + 10 * 1e-6);
  EXPECT_DOUBLE_EQ(t.bwd_s.back(), p.per_layer_overhead_s + 10 * 3e-6);

  EXPECT_THROW(gm::layer_times(m, p, 0, false), gradsync::UsageError);
  p.efficiency = 0;
  EXPECT_THROW(gm::layer_times(m, p, 1, false), gradsync::UsageError);
}

TEST(Profile, OptimizerStep) {
  const auto m = gm::zoo_model("resnet50");
  const auto p = gm::builtin_profile("a100");
  EXPECT_DOUBLE_EQ(gm::optimizer_step_s(m, p), 25557032.0 * 20 / p.optimizer_bytes_per_s);
  EXPECT_DOUBLE_EQ(gm::optimizer_step_s(m, p, 28), 25557032.0 * 28 / p.optimizer_bytes_per_s);
}

TEST(ComputeProfile, ReducerCostIsOptionalAndRoundTrips) {
  auto p = gradsync::models::builtin_profile("cpu");
  EXPECT_EQ(p.reducer_per_step_s, 0.0);
  p.reducer_per_step_s = 3e-5;
  p.reducer_per_bucket_s = 1e-5;
  const std::string path = ::testing::TempDir() + "/reducer_profile.toml";
  gradsync::models::save_profile(p, path);
  const auto q = gradsync::models::load_profile(path);
  EXPECT_DOUBLE_EQ(q.reducer_per_step_s, 3e-5);
  EXPECT_DOUBLE_EQ(q.reducer_per_bucket_s, 1e-5);
  p.reducer_per_bucket_s = -1;
  EXPECT_THROW(gradsync::models::validate_profile(p), gradsync::UsageError);
}

TEST(ComputeProfile, CodecWaitIsOptionalAndRoundTrips) {
  auto p = gradsync::models::builtin_profile("cpu");
  EXPECT_EQ(p.codec_wait_s, 0.0);
  EXPECT_EQ(p.codec_wait_frac, 0.0);
  p.codec_wait_s = 1.5e-3;
  p.codec_wait_frac = 0.25;
  const std::string path = ::testing::TempDir() + "/codec_wait_profile.toml";
  gradsync::models::save_profile(p, path);
  const auto q = gradsync::models::load_profile(path);
  EXPECT_DOUBLE_EQ(q.codec_wait_s, 1.5e-3);
  EXPECT_DOUBLE_EQ(q.codec_wait_frac, 0.25);
  for (int k = 0; k < 2; ++k) {
    auto bad = p;
    (k == 0 ? bad.codec_wait_s : bad.codec_wait_frac) = -0.1;
    try {
      gradsync::models::validate_profile(bad);
      ADD_FAILURE() << "a negative codec wait was accepted";
    } catch (const gradsync::UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(k == 0 ? "codec_wait_s" : "codec_wait_frac"), std::string::npos) << e.what();
    }
  }
}

TEST(ComputeProfile, RankJitterIsOptionalAndRoundTrips) {
  auto p = gradsync::models::builtin_profile("cpu");
  EXPECT_EQ(p.rank_jitter, 0.0);
  p.rank_jitter = 0.025;
  const std::string path = ::testing::TempDir() + "/jitter_profile.toml";
  gradsync::models::save_profile(p, path);
  EXPECT_DOUBLE_EQ(gradsync::models::load_profile(path).rank_jitter, 0.025);
  p.rank_jitter = -0.01;
  try {
    gradsync::models::validate_profile(p);
    ADD_FAILURE() << "a negative rank_jitter was accepted";
  } catch (const gradsync::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("rank_jitter"), std::string::npos) << e.what();
  }
}
