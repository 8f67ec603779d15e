// gradsync/train/workload.cpp — the real-compute workload: a Network<float> on the CPU.
#include "train/workload.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace gradsync::train {

namespace {

class RealWorkload final : public Workload {
 public:
  RealWorkload(const std::string& model, const SyntheticDataset& data, DType precision)
      : net_(make_network<float>(model)), data_(data) {
    net_->set_compute_type(precision);
    GS_CHECK(data_.sample_size() == net_->input_size(), "data set samples have ", data_.sample_size(),
             " values but ", model, " takes ", net_->input_size());
  }
  const models::ModelSpec& spec() const override { return net_->spec(); }
  bool real() const override { return true; }
  void bind(std::vector<float*> params, std::vector<float*> grads) override {
    net_->bind(std::move(params), std::move(grads));
  }
  void init_params(std::uint64_t seed) override { net_->init_params(seed); }
  double forward(const Batch& b) override {
    return net_->forward(b.x.data(), b.y.data(), static_cast<std::int64_t>(b.y.size()));
  }
  void backward(std::int64_t, float scale, bool accumulate, const GradReadyFn& ready) override {
    net_->backward(scale, accumulate, ready);
  }
  std::int64_t evaluate(std::int64_t first, std::int64_t stride) override {
    constexpr std::int64_t kChunk = 256;
    const std::int64_t n = data_.size(Split::Eval), d = data_.sample_size();
    std::vector<float> x(static_cast<std::size_t>(kChunk * d));
    std::vector<std::int32_t> y(kChunk), pred(kChunk);
    std::int64_t correct = 0;
    for (std::int64_t pos = first; pos < n;) {
      std::int64_t m = 0;
      for (; m < kChunk && pos < n; ++m, pos += stride)
        y[static_cast<std::size_t>(m)] = data_.sample(Split::Eval, pos, x.data() + m * d);
      net_->predict(x.data(), m, pred.data());
      for (std::int64_t i = 0; i < m; ++i) correct += pred[static_cast<std::size_t>(i)] == y[static_cast<std::size_t>(i)];
    }
    return correct;
  }

 private:
  std::unique_ptr<Network<float>> net_;
  const SyntheticDataset& data_;
};

}  // namespace

std::unique_ptr<Workload> make_real_workload(const std::string& model, const SyntheticDataset& dataset,
                                             DType precision) {
  return std::make_unique<RealWorkload>(model, dataset, precision);
}

}  // namespace gradsync::train
