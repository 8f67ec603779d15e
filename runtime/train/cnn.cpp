// gradsync/train/cnn.cpp — the CNN's forward and backward (see cnn.hpp).
#include "train/cnn.hpp"

#include "core/error.hpp"

namespace gradsync::train {

namespace {

enum : std::size_t { kConv1W, kConv1B, kConv2W, kConv2B, kFcW, kFcB };

models::LayerSpec conv_layer(const std::string& name, const ops::ConvShape& s, bool first) {
  models::LayerSpec l;
  l.name = name;
  l.kind = "conv";
  l.params = {{name + ".weight", {s.cout, s.cin, s.k, s.k}}, {name + ".bias", {s.cout}}};
  const double out_elems = static_cast<double>(s.cout * s.pixels());
  // GEMM + bias, plus ReLU (1/elem) and the 2x2 max pool (one compare per input element).
  l.fwd_flops = 2.0 * static_cast<double>(s.col_rows()) * out_elems + out_elems + 2.0 * out_elems;
  l.bwd_flops = first ? l.fwd_flops : 2.0 * l.fwd_flops;
  return l;
}

}  // namespace

template <typename T>
Cnn<T>::Cnn() : s1_{1, kC1, kSide, kSide, 3}, s2_{kC1, kC2, kSide / 2, kSide / 2, 3} {
  spec_.name = "cnn";
  spec_.description = "2-conv-block CNN (conv3x3-ReLU-maxpool x2, linear head) on 1x16x16 images, trainable on the CPU";
  spec_.dataset = "synthetic shifted class prototypes, 10 classes, 1x16x16 (gradsync-train)";
  spec_.samples_per_epoch = 8192;
  spec_.input_shape = {1, kSide, kSide};
  models::LayerSpec fc;
  fc.name = "fc";
  fc.kind = "linear";
  const std::int64_t flat = kC2 * (kSide / 4) * (kSide / 4);
  fc.params = {{"fc.weight", {kClasses, flat}}, {"fc.bias", {kClasses}}};
  fc.fwd_flops = 2.0 * static_cast<double>(flat * kClasses) + static_cast<double>(kClasses);
  fc.bwd_flops = 2.0 * fc.fwd_flops;
  spec_.layers = {conv_layer("conv1", s1_, true), conv_layer("conv2", s2_, false), fc};
}

template <typename T>
std::int64_t Cnn<T>::fan_in(std::size_t i) const {
  switch (i) {
    case kConv1W: case kConv1B: return s1_.col_rows();
    case kConv2W: case kConv2B: return s2_.col_rows();
    default: return kC2 * (kSide / 4) * (kSide / 4);
  }
}

template <typename T>
const ops::MatR<T>& Cnn<T>::forward_logits(const T* x, std::int64_t batch) {
  // With a half compute type: half weights, inputs and GEMM outputs (network.hpp); ReLU,
  // max pooling and im2col are exact on half values.
  this->cast_params();
  x_ = ops::CMapR<T>(x, batch, kSide * kSide);
  this->round(x_);
  ops::conv_forward(x_, s1_, this->wparam(kConv1W), this->wparam(kConv1B), cols1_, a1_);
  this->round(a1_);
  ops::relu_forward(a1_);
  ops::maxpool2_forward(a1_, kC1, kSide, kSide, p1_, arg1_);
  ops::conv_forward(p1_, s2_, this->wparam(kConv2W), this->wparam(kConv2B), cols2_, a2_);
  this->round(a2_);
  ops::relu_forward(a2_);
  ops::maxpool2_forward(a2_, kC2, kSide / 2, kSide / 2, p2_, arg2_);
  ops::linear_forward(p2_, this->wparam(kFcW), this->wparam(kFcB), kClasses, logits_);
  this->round(logits_);
  return logits_;
}

template <typename T>
void Cnn<T>::backward(T scale, bool accumulate, const GradReadyFn& ready) {
  GS_CHECK(!this->labels_.empty(), "cnn backward without forward");
  const DType ct = this->compute_type();
  ops::softmax_xent_backward(this->probs_, this->labels_.data(), scale, dlogits_);  // fp32, then to the compute type
  this->round(dlogits_);
  ops::linear_backward(p2_, dlogits_, this->wparam(kFcW), this->grad(kFcW), this->grad(kFcB), accumulate, &dp2_,
                       ct);
  ready(kFcB);
  ready(kFcW);
  this->round(dp2_);
  ops::maxpool2_backward(dp2_, arg2_, a2_.cols(), da2_);  // exact: non-overlapping windows
  ops::relu_backward(a2_, da2_);
  ops::conv_backward(cols2_, da2_, s2_, this->wparam(kConv2W), this->grad(kConv2W), this->grad(kConv2B), accumulate,
                     &dp1_, ct);
  ready(kConv2B);
  ready(kConv2W);
  this->round(dp1_);
  ops::maxpool2_backward(dp1_, arg1_, a1_.cols(), da1_);
  ops::relu_backward(a1_, da1_);
  ops::conv_backward<T>(cols1_, da1_, s1_, this->wparam(kConv1W), this->grad(kConv1W), this->grad(kConv1B),
                        accumulate, nullptr, ct);
  ready(kConv1B);
  ready(kConv1W);
}

template class Cnn<float>;
template class Cnn<double>;

}  // namespace gradsync::train
