// gradsync/train/network.hpp — the trainable networks (real forward/backward on the CPU).
//
// Ownership: a Network owns its *activations* only. Parameters and gradients are views
// bound from outside (bind()): the trainer keeps all parameters in one flat buffer, and
// the reducer owns the gradient storage — each parameter's gradient is a view into its
// bucket's flat buffer, so backward() writes gradients straight into bucket storage and
// nothing is copied before the all-reduce.
//
// Protocol of one (micro-)step:
//   loss = forward(x, labels, batch)      // keeps what backward needs
//   backward(scale, accumulate, ready)    // for each parameter, in backward order:
//                                         //   grad (=|+=) scale * dloss/dparam, then ready(i)
// `i` is the tensor's index in tensors() (forward order); ready(i) is called exactly once
// per tensor per backward, right after its gradient is final — the reducer's hook.
// accumulate=false overwrites the gradient (first micro-step), true adds to it (gradient
// accumulation), so the trainer never zeroes gradient buffers.
//
// Scalar type: float for training; double instantiations exist for the finite-difference
// gradient checks in the tests.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/zoo.hpp"

namespace gradsync::train {

using GradReadyFn = std::function<void(std::size_t tensor_index)>;

template <typename T>
class Network {
 public:
  virtual ~Network() = default;

  // Name, parameter tensors (PyTorch names and shapes, forward order), layers and FLOPs —
  // the same description the zoo gives for real networks (emulated replay, --list-models).
  virtual const models::ModelSpec& spec() const = 0;
  // Per-sample input shape ({D} or {C, H, W}) and number of classes.
  virtual std::vector<std::int64_t> input_shape() const = 0;
  virtual int num_classes() const = 0;

  std::int64_t input_size() const;  // product of input_shape()
  std::vector<models::TensorSpec> tensors() const { return spec().tensors(); }

  // params[i], grads[i]: tensors()[i].numel() elements each, row-major in PyTorch's shape
  // order. Not owned; must outlive the network's use.
  void bind(std::vector<T*> params, std::vector<T*> grads);
  // PyTorch's default init for Linear/Conv2d: weight and bias ~ U(-1/sqrt(fan_in), +1/sqrt(fan_in))
  // (kaiming_uniform with a = sqrt(5)), each tensor from its own stream of `seed`.
  void init_params(std::uint64_t seed);

  // Mean softmax cross-entropy over the batch. x: batch * input_size(), labels in [0, K).
  virtual T forward(const T* x, const std::int32_t* labels, std::int64_t batch) = 0;
  virtual void backward(T scale, bool accumulate, const GradReadyFn& ready) = 0;
  // Arg-max class per sample (uses and overwrites the forward activations).
  virtual void predict(const T* x, std::int64_t batch, std::int32_t* out) = 0;

 protected:
  T* param(std::size_t i) const { return params_[i]; }
  T* grad(std::size_t i) const { return grads_[i]; }
  // fan_in of tensor i for the init bound (weights: prod(shape[1:]); biases: their weight's).
  virtual std::int64_t fan_in(std::size_t i) const = 0;

 private:
  std::vector<T*> params_, grads_;
};

// The trainable models: "mlp", "cnn".
const std::vector<std::string>& trainable_names();
bool is_trainable(const std::string& name);
// UsageError listing the names for an unknown one.
template <typename T>
std::unique_ptr<Network<T>> make_network(const std::string& name);

}  // namespace gradsync::train
