// gradsync/train/optimizer.cpp — see optimizer.hpp.
#include "train/optimizer.hpp"

#include <cmath>

#include "core/error.hpp"

namespace gradsync::train {

namespace {

// Allocates per-slot state on the first step; checks the slots stay the same afterwards.
class SlotState {
 public:
  void ensure(const std::vector<ParamSlot>& slots, int buffers_per_slot) {
    if (state_.empty()) {
      state_.resize(slots.size() * static_cast<std::size_t>(buffers_per_slot));
      for (std::size_t i = 0; i < slots.size(); ++i)
        for (int b = 0; b < buffers_per_slot; ++b)
          state_[i * static_cast<std::size_t>(buffers_per_slot) + static_cast<std::size_t>(b)].assign(
              static_cast<std::size_t>(slots[i].count), 0.0f);
      per_ = buffers_per_slot;
      return;
    }
    GS_CHECK(state_.size() == slots.size() * static_cast<std::size_t>(per_), "optimizer: slots changed between steps");
  }
  float* buf(std::size_t slot, int b) { return state_[slot * static_cast<std::size_t>(per_) + static_cast<std::size_t>(b)].data(); }

 private:
  std::vector<std::vector<float>> state_;
  int per_ = 0;
};

class Sgd final : public Optimizer {
 public:
  explicit Sgd(const OptimizerOptions& o) : lr_(static_cast<float>(o.lr)), mu_(static_cast<float>(o.momentum)) {}
  std::string name() const override { return "sgd"; }
  double bytes_per_param() const override { return 20.0; }
  void step(const std::vector<ParamSlot>& slots) override {
    state_.ensure(slots, 1);
    for (std::size_t s = 0; s < slots.size(); ++s) {
      float* __restrict p = slots[s].param;
      const float* __restrict g = slots[s].grad;
      float* __restrict v = state_.buf(s, 0);
      const std::int64_t n = slots[s].count;
      for (std::int64_t i = 0; i < n; ++i) {
        v[i] = mu_ * v[i] + g[i];
        p[i] -= lr_ * v[i];
      }
    }
  }

 private:
  float lr_, mu_;
  SlotState state_;
};

class Adam final : public Optimizer {
 public:
  explicit Adam(const OptimizerOptions& o) : o_(o) {}
  std::string name() const override { return "adam"; }
  double bytes_per_param() const override { return 28.0; }
  void step(const std::vector<ParamSlot>& slots) override {
    state_.ensure(slots, 2);
    ++t_;
    const float b1 = static_cast<float>(o_.beta1), b2 = static_cast<float>(o_.beta2);
    const float c1 = static_cast<float>(1.0 / (1.0 - std::pow(o_.beta1, static_cast<double>(t_))));
    const float c2 = static_cast<float>(1.0 / (1.0 - std::pow(o_.beta2, static_cast<double>(t_))));
    const float lr = static_cast<float>(o_.lr), eps = static_cast<float>(o_.eps);
    for (std::size_t s = 0; s < slots.size(); ++s) {
      float* __restrict p = slots[s].param;
      const float* __restrict g = slots[s].grad;
      float* __restrict m = state_.buf(s, 0);
      float* __restrict v = state_.buf(s, 1);
      const std::int64_t n = slots[s].count;
      for (std::int64_t i = 0; i < n; ++i) {
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        p[i] -= lr * (m[i] * c1) / (std::sqrt(v[i] * c2) + eps);
      }
    }
  }

 private:
  OptimizerOptions o_;
  std::int64_t t_ = 0;
  SlotState state_;
};

}  // namespace

const std::vector<std::string>& optimizer_names() {
  static const std::vector<std::string> names = {"sgd", "adam"};
  return names;
}

void check_optimizer_name(const std::string& name) {
  for (const auto& n : optimizer_names())
    if (n == name) return;
  throw UsageError("option --optimizer: unknown optimizer '" + name + "' (known: sgd, adam)");
}

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, const OptimizerOptions& opts) {
  check_optimizer_name(name);
  GS_USAGE_CHECK(opts.lr > 0 && std::isfinite(opts.lr), "option --lr: must be a positive number, got ", opts.lr);
  if (name == "sgd") return std::make_unique<Sgd>(opts);
  return std::make_unique<Adam>(opts);
}

}  // namespace gradsync::train
