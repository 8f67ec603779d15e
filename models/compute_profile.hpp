// gradsync/models/compute_profile.hpp — how long a model's layers take to compute.
//
// A compute profile turns a ModelSpec and a batch size into per-layer forward and backward
// times, which the step simulator (netmodel/) uses to know when each gradient becomes
// ready, and which gradsync-train can replay (sleep/spin) instead of real compute.
//
// Model, per layer and per pass (forward or backward):
//   time = per_layer_overhead_s + batch * seconds_per_sample
//   seconds_per_sample = measured[layer] if the profile has a measurement for that layer,
//                        else flops_per_sample / (peak * efficiency) in forward and
//                        flops_per_sample / (peak * backward_efficiency) in backward,
//   peak = peak_flops_half when half_precision, else peak_flops.
// So times are affine in the batch size (exactly linear when the overhead is 0).
//
// TOML file format (load_profile / save_profile; also in models/README.md):
//
//   name = "a100-measured"                       # required, non-empty string
//   device = "NVIDIA A100-SXM4-80GB"             # required string
//   source = "nsys trace of resnet50, 2024-05"   # required string: where numbers come from
//   peak_flops = 19.5e12                         # FLOP/s fp32, > 0
//   peak_flops_half = 312e12                     # FLOP/s fp16/bf16, > 0
//   efficiency = 0.4                             # fraction of peak achieved, in (0, 1]
//   backward_efficiency = 0.3                    # optional, (0, 1]: backward's own fraction
//                                                # (default: efficiency)
//   per_layer_overhead_s = 2e-5                  # >= 0, added per layer per pass
//   optimizer_bytes_per_s = 1.4e12               # > 0, optimizer step = bytes / this
//
//   [measured]                                   # optional
//   "layer1.0.conv1" = [1.2e-5, 2.5e-5]          # [fwd_s, bwd_s] per SAMPLE, >= 0, used
//                                                # as-is for either precision
//
// Integers are accepted where floats are expected. Unknown keys are errors (they are
// usually typos). Every error names the file, and the line and key where there is one.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "models/zoo.hpp"

namespace gradsync::models {

struct ComputeProfile {
  std::string name, device, source;  // source: where the numbers come from
  double peak_flops = 0;             // FLOP/s, fp32
  double peak_flops_half = 0;        // FLOP/s, fp16/bf16 (tensor cores on GPUs)
  double efficiency = 0;             // fraction of peak achieved, (0, 1]
  // Backward's own fraction of peak when it differs from forward's (backward FLOPs are
  // already 2x forward's; this covers what FLOPs miss: gradient writes, framework hooks).
  // 0: as `efficiency`. Fitted by calibrate --compute when one rate cannot fit both passes.
  double backward_efficiency = 0;
  double per_layer_overhead_s = 0;   // kernel launch / framework overhead per layer per pass
  double optimizer_bytes_per_s = 0;  // optimizer step time = bytes touched / this
  // The DDP reducer's own work per synchronized step on the training thread (marking
  // gradients ready, launching and completing buckets): per_step + per_bucket x buckets.
  // Optional in files (default 0); fitted by gradsync-model calibrate --compute.
  double reducer_per_step_s = 0;
  double reducer_per_bucket_s = 0;
  // Ranks do not finish a step together (memory traffic, the OS, a busier core): the standard
  // deviation of one rank's step time around the ranks' mean, as a fraction of its compute
  // (forward + backward + optimizer). A synchronous step waits for the slowest of its p
  // ranks: E[max of p standard normals] x rank_jitter x compute longer than the mean rank
  // (0 for one rank; 0.56x for 2, 1.03x for 4, 1.42x for 8). Optional (default 0); fitted by
  // gradsync-model calibrate --compute from the runs' /ranks/step_time_s.
  double rank_jitter = 0;
  // Each bucket's collective starts when the slowest rank has encoded it: on a machine whose
  // ranks share cores, one of them gets its core later than the others for every bucket.
  // The wait per bucket with a codec, beyond the ranks' median codec, is E[max of p standard
  // normals] x (codec_wait_s + codec_wait_frac x the bucket's codec time): a fixed part (a
  // time slice of the scheduler) and a part that grows with the codec. Optional (default 0);
  // fitted by gradsync-model calibrate --compute from the runs' /buckets/by_rank/codec_s.
  double codec_wait_s = 0;
  double codec_wait_frac = 0;
  // Optional measured per-layer (fwd_s, bwd_s), in seconds PER SAMPLE (the overhead is
  // added on top), keyed by LayerSpec::name. Replaces the FLOP estimate for that layer.
  std::map<std::string, std::pair<double, double>> measured;
};

// Per-layer times for one step of `batch` samples, indexed like ModelSpec::layers.
struct LayerTimes {
  std::vector<double> fwd_s, bwd_s;
};

// Throws gradsync::UsageError naming the first field that is out of range.
void validate_profile(const ComputeProfile& p);

// Per-layer forward and backward times (see the model at the top). batch >= 1.
LayerTimes layer_times(const ModelSpec& model, const ComputeProfile& profile, int64_t batch,
                       bool half_precision);

// Optimizer step time: num_parameters * bytes_per_param / optimizer_bytes_per_s.
// bytes_per_param counts every byte read and written per parameter: SGD with momentum in
// fp32 reads param, grad, momentum and writes param, momentum = 20 (the default);
// Adam in fp32 = 28.
double optimizer_step_s(const ModelSpec& model, const ComputeProfile& profile,
                        double bytes_per_param = 20.0);

// Built-in profiles: "h200", "a100", "v100", "cpu".
const std::vector<std::string>& profile_names();

// Throws gradsync::UsageError listing the known names on unknown.
ComputeProfile builtin_profile(const std::string& name);

// A built-in name, or a path to a TOML file in the format above. Throws
// gradsync::UsageError when it is neither, or when the file is malformed.
ComputeProfile load_profile(const std::string& name_or_path);

// Writes the profile as TOML (atomically: temp file + rename). Validates it first.
void save_profile(const ComputeProfile& profile, const std::string& path);

}  // namespace gradsync::models
