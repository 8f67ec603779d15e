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
//
// Compute type (mixed precision, see precision.hpp): F32 by default. With a half type,
// every forward first casts the bound (fp32 master) parameters to half-rounded copies
// (wparam), which forward and backward use instead; inputs, GEMM/convolution outputs and
// activation gradients are rounded to the half type (round()); parameter gradients are
// produced as half values (the kernels' grad_type). Storage stays T: half values are held
// widened, exactly, so the reducer's fp32 buckets and the optimizer need no change.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "models/zoo.hpp"
#include "train/nn_ops.hpp"

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
  // Keeps the labels and the softmax (probs_) for backward.
  T forward(const T* x, const std::int32_t* labels, std::int64_t batch);
  virtual void backward(T scale, bool accumulate, const GradReadyFn& ready) = 0;
  // Arg-max class per sample (uses and overwrites the forward activations).
  void predict(const T* x, std::int64_t batch, std::int32_t* out);

  // F32 (default), F16 or BF16: the type forward and backward compute in (see above).
  void set_compute_type(DType t) { compute_ = t; }
  DType compute_type() const { return compute_; }

 protected:
  T* param(std::size_t i) const { return params_[i]; }
  T* grad(std::size_t i) const { return grads_[i]; }
  // The parameter as forward/backward use it: the master copy (F32) or its half-rounded
  // copy from the last cast_params().
  const T* wparam(std::size_t i) const { return compute_ == DType::F32 ? params_[i] : cast_[i].data(); }
  // Refresh the half copies (no-op for F32); the networks call it at the start of forward.
  void cast_params();
  // Round activations / activation gradients to the compute type (no-op for F32).
  void round(ops::MatR<T>& m) const { ops::round_to(compute_, m); }
  // fan_in of tensor i for the init bound (weights: prod(shape[1:]); biases: their weight's).
  virtual std::int64_t fan_in(std::size_t i) const = 0;
  // The network's forward pass up to its logits (batch x classes), kept until the next call.
  virtual const ops::MatR<T>& forward_logits(const T* x, std::int64_t batch) = 0;

  // Of the last forward(): its labels and softmax.
  std::vector<std::int32_t> labels_;
  ops::MatR<T> probs_;

 private:
  std::vector<T*> params_, grads_;
  DType compute_ = DType::F32;
  std::vector<std::vector<T>> cast_;  // half-rounded parameter copies (compute_ != F32)
};

// The trainable models: "mlp", "cnn".
const std::vector<std::string>& trainable_names();
bool is_trainable(const std::string& name);
// UsageError listing the names for an unknown one.
template <typename T>
std::unique_ptr<Network<T>> make_network(const std::string& name);

}  // namespace gradsync::train
