// gradsync/netmodel/compare.hpp — predicted vs measured, run by run.
//
// Each gradsync-train file is predicted with exactly its own configuration (train_file.hpp)
// on the given fabric. Zoo models run with compute=emulated take their compute from the
// compute profile: the fitted one given (calibrate --compute, which carries the measured
// optimizer rate), else the file's own compute_profile attribute. Encode/decode costs come
// from `kernels` (calibrate --kernels) when given, else from the profile's rates. Runs with
// compute=real (the small trainable "mlp"/"cnn", not in the zoo) take the measured medians
// of forward_s, backward_s and optimizer_s as the compute and the measured bucket sizes and
// ready times, so only communication and overlap are modelled for them.
// Measured step time: median of /steps/step_time_s after warmup_steps (and, for PowerSGD,
// after its start=K uncompressed steps when the run has steps after them).
#pragma once

#include <string>
#include <vector>

#include "core/json.hpp"
#include "netmodel/train_file.hpp"

namespace gradsync::netmodel {

struct CompareRow {
  TrainRun run;
  bool compute_measured = false;  // compute=real: compute taken from the measurement
  StepResult predicted;
  double step_error_pct = 0;   // (predicted - measured) / measured x 100
  double epoch_error_pct = 0;  // NaN when the file has no epochs
  // The run's own spread: the 10th and 90th percentiles of its step times after warmup (the
  // steps the measured median is taken over; NaN without per-step rows). A prediction
  // between them is as close as the run's own steps are to its median.
  double measured_p10_s = 0, measured_p90_s = 0;
  bool inside_spread() const {
    return predicted.step_time_s >= measured_p10_s && predicted.step_time_s <= measured_p90_s;
  }
};

struct CompareReport {
  std::string fabric;
  std::string compute_from;  // compare --compute-from: the run whose compute every run was predicted with
  std::vector<CompareRow> rows;
  double median_abs_error_pct = 0;
  double p90_abs_error_pct = 0;
  int inside_spread = 0;  // runs whose prediction lies inside their own steps' p10..p90
};

// compute_from (compare --compute-from FILE): every run is predicted with that recorded run's
// compute (its steps, and each tensor's gradient ready time by /model name) under its own
// buckets, compressor, algorithm and shape; the same model, on any nodes x ranks per node
// (replay.hpp: a shape other than FILE's is a what-if, checked against the run).
CompareReport compare_runs(const std::vector<std::string>& files, const std::string& fabric, const std::string& intra,
                           const std::string& compute_profile_override, const std::string& kernels = "",
                           const std::string& compute_from = "");

Json compare_json(const CompareReport& r);

// A predicted step's buckets as a JSON array (times from the step start): predict --json's
// "buckets" and compare --json's "predicted_buckets".
Json bucket_timings_json(const std::vector<BucketTiming>& buckets);
std::string compare_table(const CompareReport& r);
void write_compare(const CompareReport& r, const std::string& path, const std::vector<std::string>& argv);

}  // namespace gradsync::netmodel
