// gradsync/netmodel/train_file.hpp — the one place that reads gradsync-train's HDF5 schema.
//
// Schema (results/README.md, issue 4): /steps/{step, loss, step_time_s, data_s, forward_s,
// backward_s, comm_exposed_s, optimizer_s, bytes_sent[, encode_s, decode_s, loss_scale,
// backward_sync_s]},
// /buckets/{step, bucket, bytes, ready_s, start_s, end_s} (relative to the step start),
// /epochs/{epoch, epoch_time_s, loss, eval_accuracy}, optionally /model/{tensor_names,
// tensor_numel, tensor_ndim, tensor_shape, tensor_bucket}; root attributes (program =
// "gradsync-train"): model, compute, compute_profile, device, nranks, nnodes,
// ranks_per_node, batch_per_rank, bucket_mb, first_bucket_mb, overlap, accumulate, algo,
// chunk_bytes (chunk_bytes_used where > 0: what the all-reduce ran with), channels, compress,
// precision, loader_workers, prefetch, data_time_s,
// optimizer, lr, seed, steps, epochs, samples_per_epoch, warmup_steps, ...
// Statistics are medians over the steps after the first warmup_steps. The same steps are kept
// row by row too (TrainRun::rows) for compute=real replay (compare.cpp), with, where the file
// has them, the per-rank columns /ranks/{data_s, forward_s, backward_s, optimizer_s,
// reducer_s, encode_s, decode_s[, backward_sync_s]} ([steps, nranks]; files since 2026-12-02): /steps holds means over
// ranks, and a synchronous step waits for its slowest rank.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "netmodel/predict.hpp"

namespace gradsync::h5 {
class Reader;
}

namespace gradsync::netmodel {

// The chunk a gradsync result file's collectives ran with (gradsync-train and gradsync-bench
// write both): chunk_bytes_used where > 0, else chunk_bytes (0 for the transport-aware
// default, or in files before 2026-12-02; 0 also for algorithms that do not pipeline).
double recorded_chunk_bytes(const h5::Reader& r);
// Whether a gradsync result file's buffers were registered shared buffers (`buffers` =
// "shared", written by gradsync-train and gradsync-bench since 2026-12-06); files without
// it (older ones, PyTorch-recorded runs) ran on private buffers.
bool recorded_shared_buffers(const h5::Reader& r);

// One parameter tensor from /model (forward order).
struct TrainTensor {
  std::string name;
  int64_t numel = 0;
  std::vector<int64_t> shape;  // empty for a scalar
  int64_t bucket = -1;         // /model/tensor_bucket (-1 when absent)
  // /model/tensor_ready_s: rank 0's median over the steps after warmup of the moment its
  // gradient was ready, from the step's start (as /buckets/ready_s); NaN when absent (the
  // PyTorch recorder writes it since 2026-12-05; gradsync-train does not).
  double ready_s = std::numeric_limits<double>::quiet_NaN();
};

// One step after warmup, as recorded (NaN where a column is absent).
struct TrainStepRow {
  double step_time_s = 0, data_s = 0, forward_s = 0, backward_s = 0, optimizer_s = 0, reducer_s = 0;
  double encode_s = 0, decode_s = 0;
  // The synchronized micro-step's backward alone (/steps/backward_sync_s; NaN in files
  // without it): backward_s less it is the accumulate - 1 no_sync() micro-steps'.
  double backward_sync_s = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> bucket_ready_s;  // per bucket index, rank 0's (NaN where the step has no row)
  // Rank 0's codec time this step: /buckets/codec_s summed over its buckets (NaN when the
  // file has no such column or a bucket's codec was not measured).
  double codec_s = std::numeric_limits<double>::quiet_NaN();
  // From /ranks (empty without it): per rank, data + forward + backward of this step (what
  // comes before its last bucket is handed over), optimizer + reducer of this step and of
  // the step before (what follows the communication; the previous step's delays this
  // step's start), and backward alone (so pre - backward is where a rank's backward starts).
  std::vector<double> rank_pre_s, rank_post_s, rank_prev_post_s, rank_backward_s;
  // Per rank, the synchronized micro-step's backward (/ranks/backward_sync_s; empty without
  // it, NaN where a rank's is missing).
  std::vector<double> rank_backward_sync_s;
  // The slowest rank's encode_s and decode_s this step (NaN where /ranks lacks them or a
  // rank did not measure them).
  double rank_max_encode_s = std::numeric_limits<double>::quiet_NaN();
  double rank_max_decode_s = std::numeric_limits<double>::quiet_NaN();
  // The slowest rank's /ranks/step_time_s less the ranks' mean (NaN with one rank, without
  // the column, or when a rank's time is missing).
  double rank_spread_s = std::numeric_limits<double>::quiet_NaN();
};

// A machine's CPUs counted as saturated: its ranks used this share of them over a step
// (TrainRun::machine_saturated).
inline constexpr double kSaturatedCpu = 0.9;

struct TrainRun {
  std::string path;
  PredictConfig config;          // the run's configuration (fabric left at the default)
  std::string compute = "emulated";  // "real" | "emulated"
  std::string device;
  int64_t warmup_steps = 0;
  int64_t steps_used = 0;        // steps after warmup
  std::vector<std::string> missing;  // attributes that were absent (defaults used)
  // Medians over steps after warmup (NaN when the column is absent).
  double step_time_s = 0, data_s = 0, forward_s = 0, backward_s = 0, comm_exposed_s = 0, optimizer_s = 0;
  double comm_total_s = 0, encode_s = 0, decode_s = 0, bytes_sent = 0;  // NaN when absent (older files)
  double reducer_s = 0;  // the reducer's own bookkeeping per step (NaN when absent)
  double backward_sync_s = 0;  // the synchronized micro-step's backward (NaN when absent)
  // How much later the slowest rank ends a step than the ranks' mean: the median of the
  // rows' rank_spread_s (NaN without /ranks/step_time_s or with one rank).
  double rank_spread_s = std::numeric_limits<double>::quiet_NaN();
  int cores_per_node = 0;  // the CPUs a node gave its ranks (0 when absent)
  // The ranks that shared one machine's CPUs and those CPUs (file attributes machine_ranks,
  // machine_cores; 0 when absent), and a rank's process CPU time per step (median of
  // /steps/cpu_s, the mean over ranks; NaN when absent).
  int machine_ranks = 0, machine_cores = 0;
  double cpu_s = 0;
  // The share of the machine's CPUs its ranks kept busy over a step: machine_ranks x cpu_s /
  // (machine_cores x step_time_s); NaN without those.
  double machine_cpu_busy() const;
  // More ranks than cores, and they used kSaturatedCpu of them or more: the ranks competed for
  // the cores (CPU-bound), which the model does not price (compare says so).
  bool machine_saturated() const;
  int64_t compress_start = 0;  // PowerSGD start=K: steps before K run uncompressed (excluded when possible)
  int64_t steps_total = 0;
  double epoch_time_s = 0;  // median of /epochs/epoch_time_s, NaN if absent
  // Per bucket index, medians over steps after warmup.
  std::vector<double> bucket_bytes, bucket_ready_s, bucket_start_s, bucket_end_s;
  std::vector<double> bucket_comm_s;  // median over steps of end - start (not end median - start median)
  // Median over steps of the bucket's codec time inside [start, end] (/buckets/codec_s: the
  // compressor's encode + decode; 0 for none). NaN per bucket when absent (older files) or
  // not measured (a PyTorch hook whose collectives the recorder could not attribute).
  std::vector<double> bucket_codec_s;
  // Per bucket index, from every rank's codec time (/buckets/by_rank/codec_s, two or more
  // ranks): the median over steps of the ranks' median codec, and of how much longer the
  // slowest rank's took than that median (the bucket's collective waits for it). Empty when
  // the file has no by_rank group or one rank.
  std::vector<double> bucket_codec_mid_s, bucket_codec_wait_s;
  // /model (files written since the group was added; empty for older files): the model's
  // parameter tensors in forward order, with the bucket each went to.
  std::vector<TrainTensor> tensors;
  std::vector<TrainStepRow> rows;  // the steps after warmup, in order
};

// Throws UsageError when the file is not a gradsync-train file or lacks /steps/step_time_s.
TrainRun read_train_file(const std::string& path);

// A recorded step's backward sum over `acc` micro-steps as {the synchronized one's, each
// earlier one's}: the recorded synchronized part (/steps/backward_sync_s) where it is one
// that fits (finite, 0..all), else equal shares.
std::pair<double, double> split_backward(double all, double sync, int acc);

double median(std::vector<double> v);  // NaN for empty
double percentile(std::vector<double> v, double q);  // nearest-rank-interpolated, q in [0,1]

}  // namespace gradsync::netmodel
