// gradsync/train/optimizer.hpp — SGD with momentum and Adam, on fp32 parameter views.
//
// The optimizer sees the model as a list of slots (parameter view, gradient view, count):
// parameters live in the trainer's flat buffer, gradients in the reducer's buckets (already
// averaged over ranks). It owns its state (momentum / Adam moments), one buffer per slot,
// allocated at the first step(); every later step must pass the same slots.
//
//   sgd:  v = momentum * v + g;  p -= lr * v            (PyTorch SGD, dampening 0, no decay)
//   adam: m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//         p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)     (PyTorch Adam defaults)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gradsync::train {

struct ParamSlot {
  float* param = nullptr;
  const float* grad = nullptr;
  std::int64_t count = 0;
};

struct OptimizerOptions {
  double lr = 0.05;
  double momentum = 0.9;  // sgd
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adam
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;
  virtual void step(const std::vector<ParamSlot>& slots) = 0;
  // Bytes read + written per parameter per step (20 for SGD+momentum, 28 for Adam), as the
  // compute profiles' optimizer model counts them.
  virtual double bytes_per_param() const = 0;
};

const std::vector<std::string>& optimizer_names();  // "sgd", "adam"
void check_optimizer_name(const std::string& name);  // UsageError listing the names
std::unique_ptr<Optimizer> make_optimizer(const std::string& name, const OptimizerOptions& opts);

}  // namespace gradsync::train
