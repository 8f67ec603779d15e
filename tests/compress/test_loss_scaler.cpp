// Tests of the loss scaler (runtime/compress/loss_scaler.*): GradScaler's sequence of
// scales on injected infs, the static mode, unscaling, and spec errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "compress/loss_scaler.hpp"
#include "core/error.hpp"

using gradsync::LossScaler;
using gradsync::LossScalerOptions;
using gradsync::parse_loss_scale;

TEST(LossScaler, DefaultsAreGradScalers) {
  const LossScalerOptions o = parse_loss_scale("dynamic");
  EXPECT_TRUE(o.dynamic);
  EXPECT_EQ(o.init_scale, 65536.f);
  EXPECT_EQ(o.growth_factor, 2.f);
  EXPECT_EQ(o.backoff_factor, 0.5f);
  EXPECT_EQ(o.growth_interval, 2000);
  EXPECT_EQ(LossScaler(o).spec(), "dynamic:backoff=0.5,growth=2,init=65536,interval=2000");
}

TEST(LossScaler, GrowsAfter2000GoodStepsAndBacksOffOnInf) {
  LossScaler s(parse_loss_scale("dynamic"));
  for (int i = 0; i < 1999; ++i) {
    const auto u = s.update(false);
    ASSERT_FALSE(u.skipped);
    ASSERT_EQ(u.new_scale, 65536.f) << i;
  }
  EXPECT_EQ(s.growth_tracker(), 1999);
  auto u = s.update(false);  // the 2000th consecutive good step
  EXPECT_EQ(u.old_scale, 65536.f);
  EXPECT_EQ(u.new_scale, 131072.f);
  EXPECT_EQ(s.growth_tracker(), 0);
  u = s.update(true);
  EXPECT_TRUE(u.skipped);
  EXPECT_EQ(u.new_scale, 65536.f);
  EXPECT_EQ(s.skipped_steps(), 1);
}

TEST(LossScaler, SequenceOnInjectedInfs) {
  // interval 3: scale doubles after 3 consecutive good steps, halves (and the step is
  // skipped) on every step with an inf, and an inf restarts the count.
  LossScaler s(parse_loss_scale("dynamic:init=1024,interval=3"));
  const std::vector<bool> inf = {false, false, false, false, true, true, false, false, false, false, false, true};
  const std::vector<float> scale_after = {1024, 1024, 2048, 2048, 1024, 512, 512, 512, 1024, 1024, 1024, 512};
  for (std::size_t i = 0; i < inf.size(); ++i) {
    std::vector<float> g = {1.f, 2.f, 3.f};
    if (inf[i]) g[1] = (i % 2) ? INFINITY : NAN;
    const float scale = s.scale();
    EXPECT_EQ(s.unscale(g.data(), g.size()), inf[i]) << "step " << i;
    EXPECT_EQ(s.pending_found_inf(), inf[i]);
    EXPECT_EQ(g[0], 1.f / scale);
    const auto u = s.update(s.pending_found_inf());
    EXPECT_EQ(u.skipped, inf[i]) << "step " << i;
    EXPECT_EQ(u.old_scale, scale);
    EXPECT_EQ(u.new_scale, scale_after[i]) << "step " << i;
    EXPECT_FALSE(s.pending_found_inf());
  }
  EXPECT_EQ(s.skipped_steps(), 3);
}

TEST(LossScaler, DoesNotGrowToInfinity) {
  LossScaler s(parse_loss_scale("dynamic:init=3e38,interval=1"));
  const auto u = s.update(false);
  EXPECT_EQ(u.new_scale, 3e38f);  // 6e38 is not finite in fp32: kept
  EXPECT_EQ(s.growth_tracker(), 0);
}

TEST(LossScaler, StaticNeverChangesButSkipsInfSteps) {
  LossScaler s(parse_loss_scale("static:128"));
  EXPECT_EQ(s.spec(), "static:128");
  for (int i = 0; i < 5000; ++i) {
    const bool bad = i % 7 == 3;
    const auto u = s.update(bad);
    ASSERT_EQ(u.skipped, bad);
    ASSERT_EQ(u.new_scale, 128.f);
  }
  EXPECT_EQ(parse_loss_scale("none").init_scale, 1.f);
  EXPECT_FALSE(parse_loss_scale("none").dynamic);
}

TEST(LossScaler, UnscaleUsesTheFp32ReciprocalOfTheScale) {
  LossScaler s(parse_loss_scale("static:3"));
  EXPECT_EQ(s.inv_scale(), static_cast<float>(1.0 / 3.0));
  std::vector<float> g = {3.f, 6.f};
  EXPECT_FALSE(s.unscale(g.data(), g.size()));
  EXPECT_EQ(g[0], 3.f * static_cast<float>(1.0 / 3.0));
}

TEST(LossScaler, BadSpecsAreRefused) {
  for (const char* bad :
       {"static:0", "static:-1", "static:x", "static:", "dynamic:init=0", "dynamic:growth=1", "dynamic:backoff=1",
        "dynamic:backoff=0", "dynamic:interval=0", "dynamic:foo=1", "auto", "static:1e39"}) {
    EXPECT_THROW(parse_loss_scale(bad), gradsync::UsageError) << bad;
  }
  try {
    parse_loss_scale("dynamic:foo=1");
  } catch (const gradsync::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("foo"), std::string::npos) << e.what();
  }
}
