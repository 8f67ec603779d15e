// gradsync/train/cnn.hpp — "cnn": a small convolutional classifier for 1x16x16 images.
//
//   x[1,16,16] -> conv1 (1->16, 3x3, pad 1) -> ReLU -> maxpool 2x2   -> [16,8,8]
//              -> conv2 (16->32, 3x3, pad 1) -> ReLU -> maxpool 2x2  -> [32,4,4]
//              -> flatten -> fc (512->10) -> softmax CE
//
// Convolutions are im2col + GEMM (Eigen), per sample. No BatchNorm: it would make a
// rank's forward depend on its local batch and break N x B == 1 x N*B equivalence.
// Parameters: conv1.weight {16,1,3,3}, conv1.bias {16}, conv2.weight {32,16,3,3},
// conv2.bias {32}, fc.weight {10,512}, fc.bias {10} — 9,930 in all.
#pragma once

#include "train/network.hpp"
#include "train/nn_ops.hpp"

namespace gradsync::train {

template <typename T>
class Cnn final : public Network<T> {
 public:
  static constexpr std::int64_t kSide = 16, kC1 = 16, kC2 = 32, kClasses = 10;

  Cnn();
  const models::ModelSpec& spec() const override { return spec_; }
  std::vector<std::int64_t> input_shape() const override { return {1, kSide, kSide}; }
  int num_classes() const override { return static_cast<int>(kClasses); }

  void backward(T scale, bool accumulate, const GradReadyFn& ready) override;

 private:
  std::int64_t fan_in(std::size_t i) const override;
  const ops::MatR<T>& forward_logits(const T* x, std::int64_t batch) override;

  models::ModelSpec spec_;
  ops::ConvShape s1_, s2_;
  // Activations of the last forward (owned).
  ops::MatR<T> x_, a1_, p1_, a2_, p2_, logits_;
  std::vector<T> cols1_, cols2_;
  std::vector<std::int32_t> arg1_, arg2_;
  // Scratch for backward.
  ops::MatR<T> dlogits_, dp2_, da2_, dp1_, da1_;
};

}  // namespace gradsync::train
