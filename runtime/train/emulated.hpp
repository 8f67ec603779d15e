// gradsync/train/emulated.hpp — emulated compute: replay a model's per-layer times from a
// compute profile and write synthetic gradients, so communication, bucketing and overlap
// can be studied for networks far too large to train here (resnet50, bert-base, gpt2 ...).
//
// forward():  sleeps the sum of the layers' forward times.
// backward(): walks the layers in reverse; for each layer it generates the gradients of its
//             parameters straight into bucket storage, then sleeps until the layer's
//             deadline (backward start + the cumulated backward times so far), then marks
//             its tensors ready. Generating inside the layer's time slot means the cost of
//             generation is hidden as long as it is shorter than the modelled time; when it
//             is longer the layer is late. Deadlines are absolute (start + cumulated
//             times), so sleep overshoot and a late layer do not accumulate: later layers
//             with slack absorb the lag. replay_stats() counts the backward passes that
//             still ended late (by > max(0.5 ms, 2%)) and sums the excess.
//
// Gradient values (per tensor, viewed as rows = shape[0] x cols = numel / rows):
//     g[r][c] = s_t * (a[r] * b[c] + 0.5 * n[r][c])
//   s_t   per-tensor scale, fixed for the run: 1e-3 * exp(U(-1.5, 1.5)) from (seed, tensor)
//         (layers differ by up to ~20x, as real gradients do)
//   a, b  U(-1, 1) vectors from (seed, micro-step, tensor): a rank-1 "signal" shared by all
//         ranks, changing every step (what PowerSGD / top-k can exploit)
//   n     U(-1, 1) noise from a counter-based hash of (seed, micro-step, rank, tensor,
//         element): differs across ranks and steps, stateless and vectorisable.
// No std::normal_distribution per element: 0.6 ns per element on one core with AVX2
// (2.8 ns without), against 0.35 ns for merely storing the bytes.
//
// Parameters: the trainer's flat fp32 buffer (the optimizer step is real work on the true
// number of parameters); init_params fills it with small uniform values.
//
// Mixed precision (precision != F32): layer times use the profile's half-precision peak
// (layer_times(..., half_precision = true)), and each tensor's gradient, generated with the
// loss scale folded into `scale`, is rounded to the half type right after generation (with
// gradient accumulation the accumulated sum is rounded: a real half backward would round
// each micro-step's contribution instead — the values differ in the last bit, the traffic
// does not). The rounding pass runs inside the layer's time slot, like generation.
#pragma once

#include <cstdint>
#include <memory>

#include "train/workload.hpp"

namespace gradsync::device {
class GradientGenerator;
}

namespace gradsync::train {

// `gen` produces the values where the gradients live (device/device.hpp; not owned, must
// outlive the workload); null: the host generator (emulated_gradient + round_to below).
// The layer walk, deadlines and replay statistics are the same for every device.
std::unique_ptr<Workload> make_emulated_workload(models::ModelSpec model, const models::ComputeProfile& profile,
                                                 std::int64_t batch, std::uint64_t seed, int rank,
                                                 DType precision = DType::F32,
                                                 device::GradientGenerator* gen = nullptr);

// The generator on its own (tests, benchmarks): writes/adds tensor t's gradient.
void emulated_gradient(const models::TensorSpec& t, std::size_t tensor_index, std::uint64_t seed,
                       std::int64_t micro, int rank, float scale, bool accumulate, float* out);

}  // namespace gradsync::train
