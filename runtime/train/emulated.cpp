// gradsync/train/emulated.cpp — see emulated.hpp.
#include "train/emulated.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <thread>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "core/error.hpp"
#include "device/host.hpp"
#include "core/timer.hpp"
#include "kernels/cpu_kernels.hpp"
#include "train/precision.hpp"
#include "train/rng.hpp"

namespace gradsync::train {

namespace {

// Sleep until a deadline on the now_s() clock (steady_clock).
void sleep_until_s(double deadline) {
  const double left = deadline - now_s();
  if (left > 0) std::this_thread::sleep_for(std::chrono::duration<double>(left));
}

// The inner loop: out[c] (=|+=) s_a * b[c] + s_noise * noise(key, c). Branch- and call-free
// so it vectorises; the 32-bit multiplies of the hash want AVX2 (vpmulld): on x86-64 the
// body is compiled twice, for AVX2 and the baseline, and the kernels' run-time dispatch
// (kernels::cpu_isa(), computed once on first use) picks the AVX2 one where the CPU has it
// (0.6 ns per element here vs 2.8 ns for the SSE2 baseline; a plain store of the same
// bytes is ~0.35 ns, so the AVX2 path is close to memory bound). Not GCC's target_clones:
// its IFUNC resolver runs while the program loads, before ThreadSanitizer's runtime is up,
// and crashed every TSan build of gradsync-train.
template <bool Accumulate>
inline __attribute__((always_inline)) void fill_row_body(float* __restrict out, const float* __restrict b,
                                                         std::int64_t cols, float s_a, float s_noise,
                                                         std::uint32_t key) {
  for (std::int64_t c = 0; c < cols; ++c) {
    const float v = s_a * b[c] + s_noise * hash_uniform_pm1(key, static_cast<std::uint32_t>(c));
    if constexpr (Accumulate) out[c] += v;
    else out[c] = v;
  }
}

template <bool Accumulate>
void fill_row_baseline(float* __restrict out, const float* __restrict b, std::int64_t cols, float s_a,
                       float s_noise, std::uint32_t key) {
  fill_row_body<Accumulate>(out, b, cols, s_a, s_noise, key);
}

#if defined(__x86_64__) && defined(__GNUC__)
template <bool Accumulate>
__attribute__((target("avx2"))) void fill_row_avx2(float* __restrict out, const float* __restrict b,
                                                   std::int64_t cols, float s_a, float s_noise, std::uint32_t key) {
  fill_row_body<Accumulate>(out, b, cols, s_a, s_noise, key);
}
#endif

template <bool Accumulate>
void fill_row(float* out, const float* b, std::int64_t cols, float s_a, float s_noise, std::uint32_t key) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (kernels::cpu_isa() != kernels::Isa::Scalar) return fill_row_avx2<Accumulate>(out, b, cols, s_a, s_noise, key);
#endif
  fill_row_baseline<Accumulate>(out, b, cols, s_a, s_noise, key);
}

}  // namespace

void emulated_gradient(const models::TensorSpec& t, std::size_t tensor_index, std::uint64_t seed, std::int64_t micro,
                       int rank, float scale, bool accumulate, float* out) {
  const std::int64_t n = t.numel();
  const std::int64_t rows = t.shape.size() >= 2 ? t.shape[0] : 1;
  const std::int64_t cols = n / rows;
  // Per-tensor scale, fixed over the run.
  SplitMix64 fixed(mix64(seed, 0x9a1eULL, tensor_index));
  const float s_t = scale * 1e-3f * static_cast<float>(std::exp(3.0 * fixed.uniform() - 1.5));
  // Rank-1 signal shared by all ranks, new every micro-step.
  SplitMix64 sig(mix64(seed, 0x5e9ULL, static_cast<std::uint64_t>(micro), tensor_index));
  std::vector<float> b(static_cast<std::size_t>(cols));
  for (auto& v : b) v = static_cast<float>(2.0 * sig.uniform() - 1.0);
  // Per-rank noise stream (32-bit counter; large tensors fold the row into the key).
  const std::uint64_t nk = mix64(seed, 0x4015eULL, static_cast<std::uint64_t>(micro), static_cast<std::uint64_t>(rank),
                                 tensor_index);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float a = static_cast<float>(2.0 * sig.uniform() - 1.0);
    const auto key = static_cast<std::uint32_t>(fmix64(nk + static_cast<std::uint64_t>(r)));
    float* row = out + r * cols;
    if (accumulate) fill_row<true>(row, b.data(), cols, s_t * a, 0.5f * s_t, key);
    else fill_row<false>(row, b.data(), cols, s_t * a, 0.5f * s_t, key);
  }
}

namespace {

class EmulatedWorkload final : public Workload {
 public:
  EmulatedWorkload(models::ModelSpec model, const models::ComputeProfile& profile, std::int64_t batch,
                   std::uint64_t seed, int rank, DType precision, device::GradientGenerator& gen)
      : spec_(std::move(model)), seed_(seed), rank_(rank), precision_(precision), gen_(gen) {
    times_ = models::layer_times(spec_, profile, batch, /*half_precision=*/precision_ != DType::F32);
    for (double f : times_.fwd_s) fwd_total_s_ += f;
    // Which tensors (forward indices) each layer owns.
    std::size_t i = 0;
    for (const auto& l : spec_.layers) {
      std::vector<std::size_t> idx;
      for (std::size_t k = 0; k < l.params.size(); ++k) idx.push_back(i++);
      layer_tensors_.push_back(std::move(idx));
    }
    tensors_ = spec_.tensors();
#ifdef __linux__
    // 1 us timer slack for this (the training) thread: the default 50 us would be added to
    // every per-layer sleep.
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
#endif
  }

  const models::ModelSpec& spec() const override { return spec_; }
  bool real() const override { return false; }

  void bind(std::vector<float*> params, std::vector<float*> grads) override {
    GS_CHECK(params.size() == tensors_.size() && grads.size() == tensors_.size(), "emulated bind: ", spec_.name,
             " has ", tensors_.size(), " tensors");
    params_ = std::move(params);
    grads_ = std::move(grads);
  }

  void init_params(std::uint64_t seed) override {
    for (std::size_t t = 0; t < tensors_.size(); ++t) {
      const auto key = static_cast<std::uint32_t>(mix64(seed, 0x1417ULL, t));
      gen_.init_param(params_[t], static_cast<std::size_t>(tensors_[t].numel()), key);
    }
  }

  double forward(const Batch&) override {
    sleep_until_s(now_s() + fwd_total_s_);
    return std::numeric_limits<double>::quiet_NaN();
  }

  void backward(std::int64_t micro, float scale, bool accumulate, const GradReadyFn& ready) override {
    // Absolute deadlines: layer l's gradients are ready at start + the backward times of
    // the layers after it (and itself), or when generated if that is later; later layers
    // with slack absorb a late one.
    const double start = now_s();
    double deadline = start;
    for (std::size_t l = spec_.layers.size(); l-- > 0;) {
      deadline += times_.bwd_s[l];
      const auto& idx = layer_tensors_[l];
      const double g0 = now_s();
      for (std::size_t k = idx.size(); k-- > 0;)
        gen_.gradient(tensors_[idx[k]], idx[k], seed_, micro, rank_, scale, accumulate, precision_, grads_[idx[k]]);
      stats_.busy_s += now_s() - g0;
      sleep_until_s(deadline);
      for (std::size_t k = idx.size(); k-- > 0;) ready(idx[k]);
    }
    const double end = now_s();
    const double modelled = deadline - start, excess = end - deadline;
    stats_.backward_s += end - start;
    if (excess > std::max(5e-4, 0.02 * modelled)) ++stats_.overruns;
    stats_.overrun_s += std::max(0.0, excess);
  }

  std::int64_t evaluate(std::int64_t, std::int64_t) override { return 0; }
  ReplayStats replay_stats() const override { return stats_; }

 private:
  models::ModelSpec spec_;
  std::uint64_t seed_;
  int rank_;
  DType precision_;
  device::GradientGenerator& gen_;
  models::LayerTimes times_;
  double fwd_total_s_ = 0;
  std::vector<std::vector<std::size_t>> layer_tensors_;
  std::vector<models::TensorSpec> tensors_;
  std::vector<float*> params_, grads_;
  ReplayStats stats_;
};

}  // namespace

std::unique_ptr<Workload> make_emulated_workload(models::ModelSpec model, const models::ComputeProfile& profile,
                                                 std::int64_t batch, std::uint64_t seed, int rank,
                                                 DType precision, device::GradientGenerator* gen) {
  return std::make_unique<EmulatedWorkload>(std::move(model), profile, batch, seed, rank, precision,
                                            gen ? *gen : device::host_device().generator());
}

}  // namespace gradsync::train
