// gradsync/train/trainer.hpp — the data-parallel training loop of gradsync-train.
//
// Construction (collective over `world`): builds the workload (real or emulated), the flat
// parameter buffer, the reducer on a communicator of its own (world.split), the algorithm,
// compressor, optimizer, sampler and loader; then, before the first step, checks that the
// bucket layout and the run-configuration fingerprint are the same on every rank
// (check_same_on_all_ranks: a mismatch throws on every rank, naming the ranks).
//
// One optimizer step (per rank), with K = --accumulate micro-steps and S the loss scale
// (1 in fp32):
//   t0 = now
//   repeat K times:   batch = loader.next()                      -> data_s
//                     loss = forward(batch)                      -> forward_s
//                     backward(scale S/K, accumulate = not first) -> backward_s
//                       (the last micro-step syncs: buckets all-reduce during backward,
//                        and with fp16/bf16 are unscaled and checked for inf/nan)
//                     reducer.finish_backward()                  -> comm_exposed_s (sync step)
//   fp16/bf16: found_inf = max over ranks of the reducer's flag  -> comm_exposed_s too
//              scaler.update(found_inf); on inf/nan the step is skipped
//   optimizer.step() unless skipped                              -> optimizer_s
//   step_time_s = now - t0
// Loss is the mean over the local batch and gradients are averaged over ranks (Avg), so
// N ranks with batch B compute the same update as 1 rank with batch N*B.
// At the end of each epoch (real compute) the held-out set is evaluated, split over ranks.
// Mixed precision (--precision, --loss-scale): see precision.hpp.
//
// Test hook: GRADSYNC_TEST_INJECT_INF=s1,s2,... (optimizer steps from 0) makes rank 0 write
// +inf into the first gradient its backward produces in the syncing micro-step of those
// steps, to exercise loss scaling end to end (tests/train/check_train.py). Read once, here
// only (inject_inf_steps in trainer.cpp); not a tuning knob. With fp32 nothing catches the
// inf (there is no loss scaler), so it is meant for --precision fp16/bf16.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "compress/loss_scaler.hpp"
#include "core/dtype.hpp"
#include "core/netif.hpp"
#include "device/device.hpp"
#include "train/loader.hpp"
#include "train/options.hpp"
#include "train/reducer.hpp"
#include "train/workload.hpp"

namespace gradsync::train {

// One step as one rank measured it.
struct StepRow {
  double loss = 0, step_time_s = 0, data_s = 0, forward_s = 0, backward_s = 0, comm_exposed_s = 0,
         optimizer_s = 0, bytes_sent = 0, comm_total_s = 0, encode_s = 0, decode_s = 0, reducer_s = 0,
         reducer_launch_wall_s = 0, unscale_s = 0, backward_sync_s = 0, cpu_s = 0;
  static constexpr int kFields = 16;  // the columns above, all averaged over ranks but step_time_s
  // The same on every rank (taken from rank 0): the loss scale this step's loss was
  // multiplied by (1 for fp32), and 1 when the step was skipped (inf/nan gradients).
  double loss_scale = 1;
  double skipped = 0;
};

struct EpochRow {
  std::int64_t epoch = 0;
  double epoch_time_s = 0, loss = 0, eval_accuracy = 0;
};

// A rank's bucket timeline: one row per bucket per synchronized step.
struct BucketRow {
  std::int64_t step = 0, bucket = 0;
  BucketRecord rec;
};

struct RunResult {
  // Per step over all ranks: step_time_s is the max over ranks (the step is as slow as its
  // slowest rank); every other column is the mean over ranks (loss: the mean of the ranks'
  // local means = the global-batch loss).
  std::vector<StepRow> steps;
  std::vector<std::vector<StepRow>> rank_steps;  // every rank's own rows, rank order (/ranks)
  // Every rank's bucket timeline, rank order: rank 0's is /buckets, all are /buckets/by_rank.
  std::vector<std::vector<BucketRow>> rank_buckets;
  std::vector<EpochRow> epochs;
  double final_param_norm = 0;
  double final_eval_accuracy = 0;  // NaN for emulated compute
  std::vector<std::int64_t> bucket_bytes;
  // The model's parameter tensors in forward (registration) order and the bucket each one
  // went to (plan::assign_buckets); written to /model (results.hpp).
  std::vector<models::TensorSpec> tensors;
  std::vector<std::int64_t> tensor_bucket;
  double compression_ratio = 1.0;  // uncompressed / compressed bytes over the run
  std::string compress_spec;       // canonical, as the user asked (--compress)
  std::string compress_effective;  // the compressor that ran: fp16/bf16 for none in half precision
  std::string precision = "fp32";
  std::string loss_scale_mode = "none";  // dynamic | static | none
  std::string loss_scale_spec;           // canonical (LossScaler::spec()); "" for fp32
  std::int64_t skipped_steps = 0;
  int nranks = 1, nnodes = 1, ranks_per_node = 1;
  std::vector<std::string> hostnames;
  std::vector<std::string> cpus;  // per rank: CPU lists (core/cpus.hpp)
  std::vector<std::string> machine_ids;  // per rank: the kernel it ran on (core/cpus.hpp machine_id)
  std::int64_t steps_run = 0, epochs_done = 0, samples_per_epoch = 0, steps_per_epoch = 0;
  ReplayStats replay;              // summed over ranks
  // Threads of a rank busy computing during backward, on average (the model's CPU share,
  // netmodel/fabric.hpp): real compute on the CPU 1; emulated compute the fraction of
  // backward spent generating gradients; 0 on a GPU.
  double compute_threads = 0;
  // Where it ran (results.hpp): "cpu" | "cuda"; "mpi" | "nccl"; rank 0's GPU name ("" on
  // cpu) and its device memory in use at the end of the run (cudaMemGetInfo, -1 on cpu).
  std::string device = "cpu";
  std::string backend = "mpi";
  // The chunk the host all-reduce pipelined with and why (AllreduceAlgorithm::chunk():
  // --chunk-bytes, or the transport-aware choice of `auto`; 0 and "" when it does not
  // pipeline), as gradsync-bench records it.
  std::int64_t chunk_bytes_used = 0;
  std::string chunk_reason;
  // Per bucket (launch order): the algorithm of its all-reduces in a compressed step, as the
  // all-reduce algorithm picked it at their sizes ("+"-joined where they differ; "" where the
  // compressor sends none; "nccl" on the NCCL backend).
  std::vector<std::string> bucket_algo_used;
  std::string buffers;  // the buckets: "shared" (registered in the node's shared memory) or "private"
  std::string gpu_name;
  std::int64_t gpu_memory_used_bytes = -1;
  // Bytes per rank and network interface during Trainer::run (group /net; set by main).
  NetTraffic net;
};

// The start of a run's result (collective: topology and
// host names): where it ran, the parameter tensors and the bucket each went to, the
// compressor (as asked and as it runs), precision and loss scaling (scaler: null in fp32).
void describe_run(Communicator& world, const std::vector<models::TensorSpec>& tensors,
                  const std::vector<std::vector<std::size_t>>& assignment, std::vector<std::int64_t> bucket_bytes,
                  const std::string& compress_spec, const std::string& compress_effective, DType precision,
                  const LossScaler* scaler, RunResult& res);

// What a run measured, at its end (collective). res.steps from
// every rank's rows (step_time_s the max over ranks; loss_scale and skipped this rank's,
// which all ranks agreed on; every other column the mean over ranks), res.epochs from those
// steps and the per-epoch evaluations, res.rank_buckets from every rank's my_buckets, and the
// run totals: steps and epochs done, skipped
// steps, final accuracy (the last epoch's, or evaluate() when the run did not end on an
// epoch), compression ratio, replay overruns summed over ranks. final_param_norm is the
// caller's (its parameters live on its device).
void finish_run(Communicator& world, const std::vector<StepRow>& mine, const std::vector<BucketRow>& my_buckets,
                const std::vector<double>& epoch_eval, std::int64_t steps, std::int64_t steps_per_epoch, const LossScaler* scaler, std::uint64_t uncompressed,
                std::uint64_t compressed, const ReplayStats& replay, const std::function<double()>& evaluate,
                RunResult& res);

// The loader settings of a run (one batch per micro-step: accumulate x steps in all).
LoaderOptions loader_options(const TrainOptions& o, std::int64_t steps_per_epoch, std::int64_t steps);

class Trainer {
 public:
  // On the host device (device/host.hpp).
  Trainer(const TrainOptions& opts, Communicator& world);
  // On `dev` (not owned; outlives the trainer): --device cuda passes a CUDA device
  // (device/cuda.hpp). Same loop, same results schema.
  Trainer(const TrainOptions& opts, Communicator& world, device::Device& dev);
  ~Trainer();
  RunResult run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gradsync::train
