// gradsync/train/network.cpp — what all trainable networks share: binding, init, factory.
#include "train/network.hpp"

#include <cmath>
#include <functional>
#include <numeric>

#include "core/error.hpp"
#include "train/cnn.hpp"
#include "train/mlp.hpp"
#include "train/precision.hpp"
#include "train/rng.hpp"

namespace gradsync::train {

template <typename T>
std::int64_t Network<T>::input_size() const {
  const auto s = input_shape();
  return std::accumulate(s.begin(), s.end(), std::int64_t{1}, std::multiplies<std::int64_t>());
}

template <typename T>
void Network<T>::bind(std::vector<T*> params, std::vector<T*> grads) {
  const std::size_t n = static_cast<std::size_t>(spec().num_tensors());
  GS_CHECK(params.size() == n && grads.size() == n, "bind: ", spec().name, " has ", n, " tensors, got ",
           params.size(), " parameter and ", grads.size(), " gradient views");
  params_ = std::move(params);
  grads_ = std::move(grads);
}

template <typename T>
void Network<T>::init_params(std::uint64_t seed) {
  const auto ts = tensors();
  GS_CHECK(params_.size() == ts.size(), "init_params before bind()");
  for (std::size_t i = 0; i < ts.size(); ++i) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in(i)));
    SplitMix64 rng(mix64(seed, 0x1417ULL, i));  // one stream per tensor: layout-independent
    T* p = params_[i];
    const std::int64_t n = ts[i].numel();
    for (std::int64_t j = 0; j < n; ++j) p[j] = static_cast<T>((2.0 * rng.uniform() - 1.0) * bound);
  }
}

template <typename T>
void Network<T>::cast_params() {
  if (compute_ == DType::F32) return;
  const auto ts = tensors();
  cast_.resize(ts.size());
  for (std::size_t i = 0; i < ts.size(); ++i) {
    const auto n = static_cast<std::size_t>(ts[i].numel());
    cast_[i].assign(params_[i], params_[i] + n);
    round_to(compute_, cast_[i].data(), n);
  }
}

const std::vector<std::string>& trainable_names() {
  static const std::vector<std::string> names = {"mlp", "cnn"};
  return names;
}

bool is_trainable(const std::string& name) {
  for (const auto& n : trainable_names())
    if (n == name) return true;
  return false;
}

template <typename T>
std::unique_ptr<Network<T>> make_network(const std::string& name) {
  if (name == "mlp") return std::make_unique<Mlp<T>>();
  if (name == "cnn") return std::make_unique<Cnn<T>>();
  throw UsageError("unknown trainable model '" + name + "' (known: mlp, cnn)");
}

template <typename T>
T Network<T>::forward(const T* x, const std::int32_t* labels, std::int64_t batch) {
  GS_CHECK(batch > 0, spec().name, " forward: empty batch");
  const ops::MatR<T>& logits = forward_logits(x, batch);
  labels_.assign(labels, labels + batch);
  return ops::softmax_xent(logits, labels_.data(), probs_);
}

template <typename T>
void Network<T>::predict(const T* x, std::int64_t batch, std::int32_t* out) {
  const ops::MatR<T>& logits = forward_logits(x, batch);
  for (std::int64_t i = 0; i < batch; ++i) {
    Eigen::Index arg = 0;
    logits.row(i).maxCoeff(&arg);
    out[i] = static_cast<std::int32_t>(arg);
  }
}

template class Network<float>;
template class Network<double>;
template std::unique_ptr<Network<float>> make_network<float>(const std::string&);
template std::unique_ptr<Network<double>> make_network<double>(const std::string&);

}  // namespace gradsync::train
