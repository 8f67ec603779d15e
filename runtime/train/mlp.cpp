// gradsync/train/mlp.cpp — the MLP's forward and backward (see mlp.hpp).
#include "train/mlp.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace gradsync::train {

namespace {

// Tensor indices in forward order.
enum : std::size_t { kW1, kB1, kW2, kB2, kW3, kB3 };

models::LayerSpec linear_layer(const std::string& name, std::int64_t in, std::int64_t out, bool first) {
  models::LayerSpec l;
  l.name = name;
  l.kind = "linear";
  l.params = {{name + ".weight", {out, in}}, {name + ".bias", {out}}};
  l.fwd_flops = 2.0 * static_cast<double>(in * out) + static_cast<double>(out) + static_cast<double>(out);  // + ReLU
  l.bwd_flops = first ? l.fwd_flops : 2.0 * l.fwd_flops;
  return l;
}

}  // namespace

template <typename T>
Mlp<T>::Mlp() {
  spec_.name = "mlp";
  spec_.description = "2-hidden-layer MLP classifier (64-256-256-10, ReLU), trainable on the CPU";
  spec_.dataset = "synthetic Gaussian mixture, 10 classes in 64 dims (gradsync-train)";
  spec_.samples_per_epoch = 8192;
  spec_.input_shape = {kIn};
  spec_.layers = {linear_layer("fc1", kIn, kHidden, true), linear_layer("fc2", kHidden, kHidden, false),
                  linear_layer("fc3", kHidden, kClasses, false)};
}

template <typename T>
std::int64_t Mlp<T>::fan_in(std::size_t i) const {
  switch (i) {
    case kW1: case kB1: return kIn;
    case kW2: case kB2: return kHidden;
    default: return kHidden;
  }
}

template <typename T>
const ops::MatR<T>& Mlp<T>::forward_logits(const T* x, std::int64_t batch) {
  // With a half compute type: half weights, inputs and GEMM outputs (network.hpp); ReLU is
  // exact on half values.
  this->cast_params();
  x_ = ops::CMapR<T>(x, batch, kIn);
  this->round(x_);
  ops::linear_forward(x_, this->wparam(kW1), this->wparam(kB1), kHidden, h1_);
  this->round(h1_);
  ops::relu_forward(h1_);
  ops::linear_forward(h1_, this->wparam(kW2), this->wparam(kB2), kHidden, h2_);
  this->round(h2_);
  ops::relu_forward(h2_);
  ops::linear_forward(h2_, this->wparam(kW3), this->wparam(kB3), kClasses, logits_);
  this->round(logits_);
  return logits_;
}

template <typename T>
void Mlp<T>::backward(T scale, bool accumulate, const GradReadyFn& ready) {
  GS_CHECK(!this->labels_.empty(), "mlp backward without forward");
  const DType ct = this->compute_type();
  ops::softmax_xent_backward(this->probs_, this->labels_.data(), scale, d3_);  // fp32, then to the compute type
  this->round(d3_);
  ops::linear_backward(h2_, d3_, this->wparam(kW3), this->grad(kW3), this->grad(kB3), accumulate, &d2_, ct);
  ready(kB3);
  ready(kW3);
  this->round(d2_);
  ops::relu_backward(h2_, d2_);
  ops::linear_backward(h1_, d2_, this->wparam(kW2), this->grad(kW2), this->grad(kB2), accumulate, &d1_, ct);
  ready(kB2);
  ready(kW2);
  this->round(d1_);
  ops::relu_backward(h1_, d1_);
  ops::linear_backward<T>(x_, d1_, this->wparam(kW1), this->grad(kW1), this->grad(kB1), accumulate, nullptr, ct);
  ready(kB1);
  ready(kW1);
}

template class Mlp<float>;
template class Mlp<double>;

}  // namespace gradsync::train
