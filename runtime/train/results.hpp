// gradsync/train/results.hpp — gradsync-train's HDF5 result file (rank 0 writes it).
//
// Layout (see write_train_results for the exact attribute list):
//   /                 provenance (write_provenance) + the run's configuration attributes
//   /steps/{step, loss, step_time_s, data_s, forward_s, backward_s, comm_exposed_s,
//           optimizer_s, bytes_sent, comm_total_s, encode_s, decode_s,
//           reducer_s, reducer_launch_wall_s, unscale_s, backward_sync_s, cpu_s, loss_scale,
//           skipped}
//                     one row per optimizer step; step_time_s = max over ranks, loss_scale
//                     and skipped are the same on every rank, all other columns the mean
//                     over ranks. Definitions (per rank, per step):
//       loss            mean over the micro-steps of the local batch's mean loss (NaN emulated)
//       step_time_s     start of the step's first loader.next() to the end of optimizer.step()
//       data_s          time waiting for batches (all micro-steps)
//       forward_s       forward passes (emulated: the profile's sleep)
//       backward_s      backward passes incl. gradient hooks and bucket launches
//       backward_sync_s the synchronized micro-step's backward alone (the last of the
//                       step's --accumulate K; = backward_s for K = 1): the one whose buckets
//                       are communicated, so the only one with communication beside it
//       comm_exposed_s  end of the last backward to all buckets reduced (not hidden); with
//                       fp16/bf16 also the ranks' agreement on found_inf (one max-allreduce)
//       optimizer_s     optimizer step
//       bytes_sent      bytes this rank sent (the compressor's wire_bytes: estimated for
//                       plain all-reduce, 2(p-1)/p x bucket bytes for ring-like algorithms;
//                       fp16/bf16 with --compress none: 2-byte elements, half of fp32's)
//       comm_total_s    sum over buckets of (end - start) on the communication thread
//       encode_s, decode_s  compressor encode/decode time (0 for "none")
//       reducer_s       reducer bookkeeping (see StepComm::overhead_s)
//       reducer_launch_wall_s  wall time of bucket launches (incl. preemption when
//                       oversubscribed)
//       unscale_s       fp16/bf16: unscaling and inf/nan checks of the buckets (on the
//                       communication thread, inside comm_total_s); 0 for fp32
//       loss_scale      the loss scale this step's loss was multiplied by (1 for fp32 and
//                       --loss-scale none); dynamic: halves after an inf/nan step, doubles
//                       after `interval` good steps (compress/loss_scaler.hpp)
//       skipped         1 when the step found inf/nan gradients and was not applied
//       cpu_s           CPU time the rank's process used during the step, all its threads
//                       (CLOCK_PROCESS_CPUTIME_ID): above the step's wall time when threads
//                       ran at once; what the ranks that share a machine's cores need of them
//                       (provenance.hpp machine_ranks/machine_cores; the model's CPU floor)
// Root attributes added by mixed precision: precision (fp32|fp16|bf16), loss_scale_mode
// (dynamic|static|none), loss_scale_spec (canonical, "" for fp32), skipped_steps, and
// compress_effective (the compressor that ran: "fp16"/"bf16" for --compress none in half
// precision; "compress" keeps the user's spec). compression_ratio = fp32 payload bytes /
// payload bytes sent, so fp16/bf16 with --compress none gives 2.0 (as the fp16 compressor).
// Root attributes of the device (--device, --backend; device/device.hpp):
//   device                 "cpu" | "cuda"
//   backend                "mpi" (host memory; on cuda staged through pinned host buffers)
//                          | "nccl" (device buffers, cuda only)
//   gpu_name               rank 0's GPU (cudaGetDeviceProperties name, e.g. "NVIDIA H200");
//                          "" on cpu
//   gpu_memory_used_bytes  device memory in use on rank 0's GPU at the end of the run, after
//                          the last step (cudaMemGetInfo total - free: the whole device, so
//                          it includes the CUDA context, NCCL's buffers and any other process
//                          on that GPU); -1 on cpu
// With --device cuda the /buckets times are host clock times, as on the cpu: ready_s when
// the training thread launched the bucket's last gradient kernel (its CUDA event is recorded
// then), start_s once the communication thread has waited for that event, end_s after the
// bucket's result is back in device memory (staged buckets: download, compressor, upload).
//   /buckets/{step, bucket, bytes, ready_s, start_s, end_s}
//                     rank 0's timeline, one row per bucket per step, seconds from the
//                     step's start
//   /epochs/{epoch, epoch_time_s, loss, eval_accuracy}
//                     one row per completed epoch (eval_accuracy NaN for emulated compute)
//   /model/{tensor_names, tensor_numel, tensor_ndim, tensor_shape, tensor_bucket}
//                     the model's parameter tensors (real and emulated), one row per tensor
//                     in forward (registration) order: PyTorch-style name, element count,
//                     rank (0 for a scalar), and the bucket (index as in /buckets/bucket)
//                     the reducer assigned it to; tensor_shape holds the shapes
//                     concatenated (sum of tensor_ndim entries). gradsync-model compare
//                     uses them to plan compressors (PowerSGD's matrix view) on real shapes.
#pragma once

#include <string>
#include <vector>

#include "core/h5io.hpp"
#include "train/options.hpp"
#include "train/trainer.hpp"

namespace gradsync::train {

// Writes atomically (h5::Writer: temp file + publish) and returns the path written:
// `path` itself, or with unique_name (a default name) the next free "<stem>-N.h5" if
// another run took `path` meanwhile. An explicit path taken meanwhile throws (h5::Writer).
// `at_start`: the path's state when the run began (h5::check_output_path), so only a file
// that was there then may be replaced.
std::string write_train_results(const std::string& path, const TrainOptions& o, const RunResult& r,
                                const std::vector<std::string>& argv, bool unique_name = false,
                                const h5::PathState* at_start = nullptr);

// results/train-<model>-<UTC yyyymmddThhmmssZ>.h5 (the folder is created if missing).
std::string default_result_path(const std::string& model);

// The algorithm the run records and reports: "nccl" on the NCCL backend (NCCL picks its
// own), else --algo as given.
std::string run_algo(const TrainOptions& o, const RunResult& r);

}  // namespace gradsync::train
