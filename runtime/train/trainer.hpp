// gradsync/train/trainer.hpp — the data-parallel training loop of gradsync-train.
//
// Construction (collective over `world`): builds the workload (real or emulated), the flat
// parameter buffer, the reducer on a communicator of its own (world.split), the algorithm,
// compressor, optimizer, sampler and loader; then, before the first step, checks that the
// bucket layout and the run-configuration fingerprint are the same on every rank
// (check_same_on_all_ranks: a mismatch throws on every rank, naming the ranks).
//
// One optimizer step (per rank), with K = --accumulate micro-steps:
//   t0 = now
//   repeat K times:   batch = loader.next()                      -> data_s
//                     loss = forward(batch)                      -> forward_s
//                     backward(scale 1/K, accumulate = not first) -> backward_s
//                       (the last micro-step syncs: buckets all-reduce during backward)
//                     reducer.finish_backward()                  -> comm_exposed_s (sync step)
//   optimizer.step()                                             -> optimizer_s
//   step_time_s = now - t0
// Loss is the mean over the local batch and gradients are averaged over ranks (Avg), so
// N ranks with batch B compute the same update as 1 rank with batch N*B.
// At the end of each epoch (real compute) the held-out set is evaluated, split over ranks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "train/options.hpp"
#include "train/reducer.hpp"
#include "train/workload.hpp"

namespace gradsync::train {

// One step as one rank measured it.
struct StepRow {
  double loss = 0, step_time_s = 0, data_s = 0, forward_s = 0, backward_s = 0, comm_exposed_s = 0,
         optimizer_s = 0, bytes_sent = 0, comm_total_s = 0, encode_s = 0, decode_s = 0, reducer_s = 0,
         reducer_launch_wall_s = 0;
  static constexpr int kFields = 13;
};

struct EpochRow {
  std::int64_t epoch = 0;
  double epoch_time_s = 0, loss = 0, eval_accuracy = 0;
};

// Rank 0's bucket timeline: one row per bucket per step.
struct BucketRow {
  std::int64_t step = 0, bucket = 0;
  BucketRecord rec;
};

struct RunResult {
  // Per step over all ranks: step_time_s is the max over ranks (the step is as slow as its
  // slowest rank); every other column is the mean over ranks (loss: the mean of the ranks'
  // local means = the global-batch loss).
  std::vector<StepRow> steps;
  std::vector<BucketRow> buckets;
  std::vector<EpochRow> epochs;
  double final_param_norm = 0;
  double final_eval_accuracy = 0;  // NaN for emulated compute
  std::vector<std::int64_t> bucket_bytes;
  double compression_ratio = 1.0;  // uncompressed / compressed bytes over the run
  std::string compress_spec;       // canonical
  int nranks = 1, nnodes = 1, ranks_per_node = 1;
  std::vector<std::string> hostnames;
  std::int64_t steps_run = 0, epochs_done = 0, samples_per_epoch = 0, steps_per_epoch = 0;
  ReplayStats replay;              // summed over ranks
};

class Trainer {
 public:
  Trainer(const TrainOptions& opts, Communicator& world);
  ~Trainer();
  RunResult run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gradsync::train
