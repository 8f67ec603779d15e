// gradsync/train/workload.hpp — what the training loop runs between data and optimizer:
// real compute (a trainable Network on the CPU) or emulated compute (a zoo model replayed
// from a compute profile). Both present the same protocol to the trainer:
//
//   bind(params, grads)                   views: params in the trainer's flat buffer,
//                                         grads in the reducer's buckets (not owned)
//   init_params(seed)
//   loss = forward(batch)                 local mean loss (NaN when emulated)
//   backward(micro, scale, accumulate, ready)
//                                         writes (accumulate=false) or adds every gradient,
//                                         scaled, calling ready(i) once per tensor in
//                                         backward order; `micro` numbers micro-steps;
//                                         `scale` includes the loss scale (mixed precision)
//   evaluate(split positions) -> correct  (real only)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "models/compute_profile.hpp"
#include "models/zoo.hpp"
#include "train/dataset.hpp"
#include "train/loader.hpp"
#include "train/network.hpp"

namespace gradsync::train {

// Emulated compute only: how often gradient generation could not keep up with the
// modelled layer times.
struct ReplayStats {
  std::int64_t overruns = 0;  // backward passes longer than modelled by > max(0.5 ms, 2%)
  double overrun_s = 0;       // sum over backward passes of (actual - modelled), when > 0
  double busy_s = 0;          // time the training thread spent generating gradients in backward
  double backward_s = 0;      // time it spent in backward (generating + sleeping)
};

class Workload {
 public:
  virtual ~Workload() = default;
  virtual const models::ModelSpec& spec() const = 0;
  virtual bool real() const = 0;
  virtual void bind(std::vector<float*> params, std::vector<float*> grads) = 0;
  virtual void init_params(std::uint64_t seed) = 0;
  virtual double forward(const Batch& batch) = 0;
  virtual void backward(std::int64_t micro, float scale, bool accumulate, const GradReadyFn& ready) = 0;
  // Number of correctly classified eval samples among positions first, first+stride, ...
  // (< eval_samples). Real compute only.
  virtual std::int64_t evaluate(std::int64_t first, std::int64_t stride) = 0;
  virtual ReplayStats replay_stats() const { return {}; }
};

// Real compute: `model` is "mlp" or "cnn", trained on `dataset` (not owned); forward and
// backward compute in `precision` (F32, or F16/BF16 emulated by rounding: network.hpp).
std::unique_ptr<Workload> make_real_workload(const std::string& model, const SyntheticDataset& dataset,
                                             DType precision = DType::F32);

}  // namespace gradsync::train
