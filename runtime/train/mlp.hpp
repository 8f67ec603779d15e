// gradsync/train/mlp.hpp — "mlp": a classifier with two hidden layers.
//
//   x[64] -> fc1 (64->256) -> ReLU -> fc2 (256->256) -> ReLU -> fc3 (256->10) -> softmax CE
//
// Parameters (PyTorch names/shapes, forward order): fc1.weight {256,64}, fc1.bias {256},
// fc2.weight {256,256}, fc2.bias {256}, fc3.weight {10,256}, fc3.bias {10} — 85,002 in all.
// Backward marks gradients ready in reverse order: fc3.bias, fc3.weight, fc2.bias, ...
#pragma once

#include "train/network.hpp"
#include "train/nn_ops.hpp"

namespace gradsync::train {

template <typename T>
class Mlp final : public Network<T> {
 public:
  static constexpr std::int64_t kIn = 64, kHidden = 256, kClasses = 10;

  Mlp();
  const models::ModelSpec& spec() const override { return spec_; }
  std::vector<std::int64_t> input_shape() const override { return {kIn}; }
  int num_classes() const override { return static_cast<int>(kClasses); }

  void backward(T scale, bool accumulate, const GradReadyFn& ready) override;

 private:
  std::int64_t fan_in(std::size_t i) const override;
  const ops::MatR<T>& forward_logits(const T* x, std::int64_t batch) override;

  models::ModelSpec spec_;
  // Activations of the last forward (owned): input, hidden outputs after ReLU, logits, softmax.
  ops::MatR<T> x_, h1_, h2_, logits_;
  // Scratch for backward.
  ops::MatR<T> d3_, d2_, d1_;
};

}  // namespace gradsync::train
