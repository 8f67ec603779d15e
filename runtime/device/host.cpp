// gradsync/device/host.cpp — see host.hpp.
#include "device/host.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu_kernels.hpp"
#include "train/emulated.hpp"
#include "train/precision.hpp"
#include "train/rng.hpp"

namespace gradsync::device {

namespace {

class HostArray final : public Array {
 public:
  explicit HostArray(std::size_t count) : storage_(count, 0.0f) {
    data_ = storage_.data();
    count_ = count;
  }

 private:
  std::vector<float> storage_;
};

class HostGenerator final : public GradientGenerator {
 public:
  void init_param(float* p, std::size_t n, std::uint32_t key) override {
    for (std::size_t j = 0; j < n; ++j) p[j] = 0.01f * train::hash_uniform_pm1(key, static_cast<std::uint32_t>(j));
  }
  void gradient(const models::TensorSpec& t, std::size_t tensor_index, std::uint64_t seed, std::int64_t micro, int rank,
                float scale, bool accumulate, DType round_to, float* out) override {
    train::emulated_gradient(t, tensor_index, seed, micro, rank, scale, accumulate, out);
    train::round_to(round_to, out, static_cast<std::size_t>(t.numel()));
  }
};

class HostDevice final : public Device {
 public:
  std::string name() const override { return "cpu"; }
  bool host_memory() const override { return true; }

  std::unique_ptr<Array> zeros(std::size_t count) override { return std::make_unique<HostArray>(count); }
  std::unique_ptr<Array> host_mirror(std::size_t count) override { return std::make_unique<HostArray>(count); }
  void download(const float* src, float* dst, std::size_t count) override {
    if (src != dst && count > 0) std::memcpy(dst, src, count * sizeof(float));
  }
  void upload(const float* src, float* dst, std::size_t count) override { download(src, dst, count); }
  void set_value(float* x, float v) override { *x = v; }

  // Gradients are produced synchronously by the training thread: marking is ordering.
  void prepare_buckets(std::size_t) override {}
  void bucket_produced(std::size_t) override {}
  void wait_produced(std::size_t) override {}
  void enter_comm_thread() override {}
  void synchronize() override {}

  bool unscale_check_finite(float* x, std::size_t n, float inv_scale) override {
    return kernels::unscale_check_finite(x, n, inv_scale);
  }
  void fill_zero(float* x, std::size_t n) override { std::fill(x, x + n, 0.0f); }
  std::unique_ptr<train::Optimizer> make_optimizer(const std::string& name,
                                                   const train::OptimizerOptions& opts) override {
    return train::make_optimizer(name, opts);
  }
  GradientGenerator& generator() override { return generator_; }
  std::unique_ptr<train::Workload> make_real_workload(const std::string& model, const train::SyntheticDataset& dataset,
                                                      std::int64_t /*batch*/, DType precision) override {
    return train::make_real_workload(model, dataset, precision);
  }
  std::unique_ptr<Communicator> make_communicator(Communicator&, const std::string&) override { return nullptr; }

 private:
  HostGenerator generator_;
};

}  // namespace

std::unique_ptr<Device> make_host_device() { return std::make_unique<HostDevice>(); }

Device& host_device() {
  static HostDevice dev;
  return dev;
}

double norm2(Device& dev, const float* x, std::size_t count) {
  constexpr std::size_t kChunk = 1 << 20;
  std::vector<float> host;
  double s = 0;
  for (std::size_t off = 0; off < count; off += kChunk) {
    const std::size_t n = std::min(kChunk, count - off);
    const float* h = x + off;
    if (!dev.host_memory()) {
      host.resize(n);
      dev.download(x + off, host.data(), n);
      h = host.data();
    }
    for (std::size_t j = 0; j < n; ++j) s += static_cast<double>(h[j]) * static_cast<double>(h[j]);
  }
  return s;
}

}  // namespace gradsync::device
