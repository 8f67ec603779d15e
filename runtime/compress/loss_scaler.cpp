// gradsync/compress/loss_scaler.cpp — GradScaler-style dynamic / static loss scaling
// (semantics in loss_scaler.hpp; the update rule is torch's _amp_update_scale_).
#include "compress/loss_scaler.hpp"

#include <cmath>
#include <sstream>

#include "core/error.hpp"
#include "core/spec.hpp"
#include "core/units.hpp"
#include "kernels/cpu_kernels.hpp"

namespace gradsync {

namespace {

std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

LossScalerOptions parse_loss_scale(const std::string& text) {
  const std::string opt = "--loss-scale";
  LossScalerOptions o;
  if (text == "none") {
    o.dynamic = false;
    o.init_scale = 1.f;
    return o;
  }
  if (text.rfind("static:", 0) == 0) {  // "static:V" is not key=value: parsed here
    const double v = parse_double(text.substr(7), opt + " static");
    GS_USAGE_CHECK(v > 0 && v <= 3.4e38, "option ", opt, ": '", text, "': the static scale must be positive and ",
                   "finite in fp32");
    o.dynamic = false;
    o.init_scale = static_cast<float>(v);
    return o;
  }
  const Spec spec = parse_spec(text, opt);
  GS_USAGE_CHECK(spec.name == "dynamic", "option ", opt, ": unknown mode '", spec.name, "' in '", text,
                 "' (known: dynamic[:init=S,growth=F,backoff=F,interval=N], static:V, none)");
  try {
    spec.allow_only({"init", "growth", "backoff", "interval"});
  } catch (const UsageError& e) {
    throw UsageError("option " + opt + ": " + e.what());
  }
  const double init = spec.get_double("init", o.init_scale);
  const double growth = spec.get_double("growth", o.growth_factor);
  const double backoff = spec.get_double("backoff", o.backoff_factor);
  const long long interval = spec.get_int("interval", o.growth_interval);
  GS_USAGE_CHECK(init > 0 && init <= 3.4e38, "option ", opt, ": '", text,
                 "': init must be positive and finite in fp32");
  GS_USAGE_CHECK(growth > 1, "option ", opt, ": '", text, "': growth must be > 1, got ", growth);
  GS_USAGE_CHECK(backoff > 0 && backoff < 1, "option ", opt, ": '", text, "': backoff must be in (0, 1), got ",
                 backoff);
  GS_USAGE_CHECK(interval >= 1, "option ", opt, ": '", text, "': interval must be >= 1, got ", interval);
  o.init_scale = static_cast<float>(init);
  o.growth_factor = static_cast<float>(growth);
  o.backoff_factor = static_cast<float>(backoff);
  o.growth_interval = interval;
  return o;
}

LossScaler::LossScaler(const LossScalerOptions& opts) : opts_(opts), scale_(opts.init_scale) {
  GS_CHECK(opts.init_scale > 0, "loss scale must be positive");
}

float LossScaler::inv_scale() const { return static_cast<float>(1.0 / static_cast<double>(scale_)); }

bool LossScaler::unscale(float* grads, std::size_t n) {
  const bool bad = !kernels::unscale_check_finite(grads, n, inv_scale());
  pending_found_inf_ = pending_found_inf_ || bad;
  return bad;
}

LossScaleUpdate LossScaler::update(bool found_inf) {
  LossScaleUpdate u;
  u.old_scale = scale_;
  u.skipped = found_inf;
  pending_found_inf_ = false;
  if (found_inf) ++skipped_;
  if (opts_.dynamic) {
    if (found_inf) {
      scale_ *= opts_.backoff_factor;
      growth_tracker_ = 0;
    } else if (growth_tracker_ + 1 == opts_.growth_interval) {
      const float grown = scale_ * opts_.growth_factor;
      if (std::isfinite(grown)) scale_ = grown;
      growth_tracker_ = 0;
    } else {
      ++growth_tracker_;
    }
  }
  u.new_scale = scale_;
  return u;
}

std::string LossScaler::spec() const {
  if (!opts_.dynamic) return "static:" + num(opts_.init_scale);
  return Spec{"dynamic",
              {{"init", num(opts_.init_scale)},
               {"growth", num(opts_.growth_factor)},
               {"backoff", num(opts_.backoff_factor)},
               {"interval", std::to_string(opts_.growth_interval)}}}
      .str();
}

}  // namespace gradsync
