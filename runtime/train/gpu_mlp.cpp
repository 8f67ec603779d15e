// gradsync/train/gpu_mlp.cpp — see gpu_mlp.hpp.
#include "train/gpu_mlp.hpp"

#include <library_types.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/error.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/cuda_kernels.hpp"
#include "train/gpu_kernels.hpp"

namespace gradsync::train {

void cublas_fail(cublasStatus_t st, const char* call, const char* file, int line) {
  throw Error(where() + ": " + call + " failed: " + cublasGetStatusName(st) + " (" + cublasGetStatusString(st) +
              ") at " + file + ":" + std::to_string(line));
}

namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::F16: return CUDA_R_16F;
    case DType::BF16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

}  // namespace

GpuMlp::GpuMlp(const std::vector<models::TensorSpec>& tensors, std::int64_t batch, DType compute, cudaStream_t stream)
    : max_batch_(batch), compute_(compute), stream_(stream) {
  GS_CHECK(tensors.size() >= 2 && tensors.size() % 2 == 0, "gpu mlp: want (weight, bias) pairs, got ",
           tensors.size(), " tensors");
  for (std::size_t i = 0; i < tensors.size(); i += 2) {
    const auto& w = tensors[i];
    const auto& b = tensors[i + 1];
    GS_CHECK(w.shape.size() == 2 && b.shape.size() == 1 && b.shape[0] == w.shape[0], "gpu mlp: tensor ", w.name,
             " / ", b.name, " is not a Linear layer's weight {out, in} and bias {out}");
    Layer l;
    l.out = w.shape[0];
    l.in = w.shape[1];
    l.weight = i;
    l.bias = i + 1;
    GS_CHECK(layers_.empty() || layers_.back().out == l.in, "gpu mlp: layer ", w.name, " takes ", l.in,
             " inputs after a layer of ", layers_.back().out, " outputs");
    layers_.push_back(l);
  }
  classes_ = layers_.back().out;
  const auto fb = [&](std::int64_t n) { return static_cast<std::size_t>(max_batch_ * n) * sizeof(float); };
  const bool half = compute_ != DType::F32;
  std::int64_t widest = 0;
  for (const Layer& l : layers_) {
    act_.emplace_back(fb(l.in));
    act_half_.emplace_back(half ? fb(l.in) / 2 : 0);
    w_half_.emplace_back(half ? static_cast<std::size_t>(l.in * l.out) * sizeof(std::uint16_t) : 0);
    widest = std::max({widest, l.in, l.out});
  }
  act_.emplace_back(fb(classes_));  // logits
  probs_.reserve(fb(classes_));
  dz_.reserve(fb(widest));
  da_.reserve(fb(widest));
  if (half) dz_half_.reserve(fb(widest) / 2);
  labels_.reserve(static_cast<std::size_t>(max_batch_) * sizeof(std::int32_t));
  loss_.reserve(fb(1));
  host_x_.reserve(fb(layers_.front().in));
  host_y_.reserve(static_cast<std::size_t>(max_batch_) * sizeof(std::int32_t));
  host_loss_.reserve(fb(1));
  GS_CUBLAS(cublasCreate(&handle_));
  GS_CUBLAS(cublasSetStream(handle_, stream_));
}

GpuMlp::~GpuMlp() {
  if (handle_) cublasDestroy(handle_);
}

void GpuMlp::bind(std::vector<float*> params, std::vector<float*> grads) {
  GS_CHECK(params.size() == 2 * layers_.size() && grads.size() == params.size(), "gpu mlp bind: want ",
           2 * layers_.size(), " tensors");
  params_ = std::move(params);
  grads_ = std::move(grads);
}

void GpuMlp::gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* a, int lda,
                  const void* b, int ldb, float* c, int ldc, float beta) {
  const float alpha = 1.0f;
  const cudaDataType_t t = cuda_type(compute_);
  GS_CUBLAS(cublasGemmEx(handle_, ta, tb, m, n, k, &alpha, a, t, lda, b, t, ldb, &beta, c, CUDA_R_32F, ldc,
                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

const void* GpuMlp::gemm_input(const float* x, DeviceBuffer& half, std::size_t n) {
  if (compute_ == DType::F32) return x;
  kernels::cuda::cast_to_half(compute_, x, half.as<std::uint16_t>(), n, 1.0f, stream_);
  return half.get();
}

double GpuMlp::forward(const Batch& batch) {
  const auto B = static_cast<std::int64_t>(batch.y.size());
  GS_CHECK(B > 0 && B <= max_batch_, "gpu mlp: batch of ", B, " samples (at most ", max_batch_, ")");
  const std::int64_t in0 = layers_.front().in;
  GS_CHECK(static_cast<std::int64_t>(batch.x.size()) == B * in0, "gpu mlp: batch has ", batch.x.size(),
           " inputs, want ", B * in0);
  batch_ = B;
  // Host -> pinned -> device on the compute stream (the pinned copy must not change before
  // the transfer ran: forward synchronises below, so the next forward cannot overwrite it early).
  std::memcpy(host_x_.get(), batch.x.data(), batch.x.size() * sizeof(float));
  std::memcpy(host_y_.get(), batch.y.data(), batch.y.size() * sizeof(std::int32_t));
  GS_CUDA(cudaMemcpyAsync(act_[0].get(), host_x_.get(), batch.x.size() * sizeof(float), cudaMemcpyHostToDevice,
                          stream_));
  GS_CUDA(cudaMemcpyAsync(labels_.get(), host_y_.get(), batch.y.size() * sizeof(std::int32_t),
                          cudaMemcpyHostToDevice, stream_));
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    const void* w = gemm_input(params_[L.weight], w_half_[l], static_cast<std::size_t>(L.in * L.out));
    const void* x = gemm_input(act_[l].as<float>(), act_half_[l], static_cast<std::size_t>(B * L.in));
    gemm(CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(L.out), static_cast<int>(B), static_cast<int>(L.in), w,
         static_cast<int>(L.in), x, static_cast<int>(L.in), act_[l + 1].as<float>(), static_cast<int>(L.out), 0.0f);
    gpu::bias_act(act_[l + 1].as<float>(), params_[L.bias], B, L.out, /*relu=*/l + 1 < layers_.size(), compute_,
                  stream_);
  }
  gpu::softmax_xent(act_.back().as<float>(), labels_.as<std::int32_t>(), B, classes_, probs_.as<float>(),
                    loss_.as<float>(), stream_);
  GS_CUDA(cudaMemcpyAsync(host_loss_.get(), loss_.get(), static_cast<std::size_t>(B) * sizeof(float),
                          cudaMemcpyDeviceToHost, stream_));
  GS_CUDA(cudaStreamSynchronize(stream_));
  double sum = 0;
  for (std::int64_t i = 0; i < B; ++i) sum += host_loss_.as<float>()[i];
  return sum / static_cast<double>(B);
}

void GpuMlp::backward(float scale, bool accumulate, const GradReadyFn& ready) {
  const std::int64_t B = batch_;
  GS_CHECK(B > 0, "gpu mlp: backward without forward");
  // dz = d(scale x mean loss)/d(logits), rounded to the compute type.
  gpu::softmax_xent_backward(probs_.as<float>(), labels_.as<std::int32_t>(), B, classes_,
                             scale / static_cast<float>(B), dz_.as<float>(), compute_, stream_);
  float* dz = dz_.as<float>();
  float* da = da_.as<float>();
  for (std::size_t l = layers_.size(); l-- > 0;) {
    const Layer& L = layers_[l];
    gpu::bias_grad(dz, B, L.out, grads_[L.bias], accumulate, stream_);
    const void* dzin = gemm_input(dz, dz_half_, static_cast<std::size_t>(B * L.out));
    // act_half_[l] still holds the forward's half copy of this layer's input.
    const void* x = compute_ == DType::F32 ? static_cast<const void*>(act_[l].get()) : act_half_[l].get();
    gemm(CUBLAS_OP_N, CUBLAS_OP_T, static_cast<int>(L.in), static_cast<int>(L.out), static_cast<int>(B), x,
         static_cast<int>(L.in), dzin, static_cast<int>(L.out), grads_[L.weight], static_cast<int>(L.in),
         accumulate ? 1.0f : 0.0f);
    ready(L.bias);
    ready(L.weight);
    if (l > 0) {
      const void* w = compute_ == DType::F32 ? static_cast<const void*>(params_[L.weight]) : w_half_[l].get();
      gemm(CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(L.in), static_cast<int>(B), static_cast<int>(L.out), w,
           static_cast<int>(L.in), dzin, static_cast<int>(L.out), da, static_cast<int>(L.in), 0.0f);
      // act_[l] is the previous layer's ReLU output: its mask.
      gpu::relu_backward(da, act_[l].as<float>(), static_cast<std::size_t>(B * L.in), compute_, stream_);
    }
    std::swap(dz, da);
  }
}

namespace {

class GpuRealWorkload final : public Workload {
 public:
  GpuRealWorkload(const std::string& model, const SyntheticDataset& dataset, std::int64_t batch, DType precision,
                  cudaStream_t stream)
      : host_(make_real_workload(model, dataset, precision)), stream_(stream) {
    GS_USAGE_CHECK(model == "mlp", "option --device cuda: real compute on the GPU exists for mlp only; '", model,
                   "' runs with --compute emulated or --device cpu");
    tensors_ = host_->spec().tensors();
    mlp_ = std::make_unique<GpuMlp>(tensors_, batch, precision, stream_);
    std::size_t total = 0;
    for (const auto& t : tensors_) total += static_cast<std::size_t>(t.numel());
    host_params_.assign(total, 0.0f);
    host_grads_.assign(total, 0.0f);
    std::vector<float*> hp, hg;
    std::size_t off = 0;
    for (const auto& t : tensors_) {
      hp.push_back(host_params_.data() + off);
      hg.push_back(host_grads_.data() + off);
      off += static_cast<std::size_t>(t.numel());
    }
    host_->bind(hp, hg);
    host_p_ = hp;
  }
  const models::ModelSpec& spec() const override { return host_->spec(); }
  bool real() const override { return true; }
  void bind(std::vector<float*> params, std::vector<float*> grads) override {
    params_ = params;
    mlp_->bind(std::move(params), std::move(grads));
  }
  void init_params(std::uint64_t seed) override {
    host_->init_params(seed);
    for (std::size_t t = 0; t < tensors_.size(); ++t)
      GS_CUDA(cudaMemcpyAsync(params_[t], host_p_[t], static_cast<std::size_t>(tensors_[t].numel()) * sizeof(float),
                              cudaMemcpyHostToDevice, stream_));
    GS_CUDA(cudaStreamSynchronize(stream_));
  }
  double forward(const Batch& b) override { return mlp_->forward(b); }
  void backward(std::int64_t, float scale, bool accumulate, const GradReadyFn& ready) override {
    mlp_->backward(scale, accumulate, ready);
  }
  std::int64_t evaluate(std::int64_t first, std::int64_t stride) override {
    GS_CUDA(cudaStreamSynchronize(stream_));
    for (std::size_t t = 0; t < tensors_.size(); ++t)
      GS_CUDA(cudaMemcpy(host_p_[t], params_[t], static_cast<std::size_t>(tensors_[t].numel()) * sizeof(float),
                         cudaMemcpyDeviceToHost));
    return host_->evaluate(first, stride);
  }

 private:
  std::unique_ptr<Workload> host_;  // init and evaluation on host copies
  cudaStream_t stream_;
  std::vector<models::TensorSpec> tensors_;
  std::unique_ptr<GpuMlp> mlp_;
  std::vector<float> host_params_, host_grads_;
  std::vector<float*> host_p_, params_;
};

}  // namespace

std::unique_ptr<Workload> make_gpu_real_workload(const std::string& model, const SyntheticDataset& dataset,
                                                 std::int64_t batch, DType precision, cudaStream_t stream) {
  return std::make_unique<GpuRealWorkload>(model, dataset, batch, precision, stream);
}

}  // namespace gradsync::train
