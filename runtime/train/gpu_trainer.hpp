// gradsync/train/gpu_trainer.hpp — gradsync-train --device cuda: data-parallel training with
// gradients in GPU memory (GRADSYNC_WITH_CUDA=ON builds only; target gradsync_train_cuda).
//
// What runs where (one GPU per rank, chosen by node-local rank, cuda/device.hpp):
//   * compute, emulated (every model; the profile's layer times, as emulated.hpp): forward
//     sleeps its total on the host; backward walks the layers in reverse, sleeps until each
//     layer's deadline on the host, then launches a gradient-generation kernel per tensor of
//     the layer on the *compute stream* (gpu_kernels.hpp).
//   * compute, real (mlp only; gpu_mlp.hpp): cuBLAS GEMMs in fp32/fp16/bf16 with fp32
//     accumulation and small kernels, fp32 master weights on the device, initialised by the
//     host network's init_params (the CPU run's initial weights); the batch goes through
//     pinned memory. forward_s includes the GPU's forward (the loss is read back); backward_s
//     is the host's launch time only (the GPU's backward ends up in comm_exposed_s). The
//     held-out set is evaluated after each epoch on the host with a copy of the weights.
//     --device cuda --compute real for cnn is refused (exit 2, options.cpp).
//   * gradients: one fp32 DeviceBuffer per bucket (the CPU reducer's layout: plan::assign_buckets,
//     tensors in gradient-ready order); parameters and optimizer state use the same layout,
//     so the optimizer is one kernel per bucket.
//   * readiness: when the last tensor of a bucket has had its kernel launched, a CUDA event
//     `ready[b]` is recorded on the compute stream. Buckets launch in bucket order (b+1
//     never before b), during backward (overlap) or after it (--no-overlap).
//   * --backend nccl: the launch enqueues, on the NcclCommunicator's own stream,
//     cudaStreamWaitEvent(ready[b]), event start[b], [cast to half], one ncclGroupStart/
//     ncclAllReduce/ncclGroupEnd (ncclAvg in fp32; ncclSum of pre-divided halves, as the CPU
//     cast compressor), [widen back], [unscale + inf/nan check], event end[b]. The host does
//     not wait: all of it is ordered on the GPU.
//   * --backend mpi: a communication thread (as the CPU reducer's) waits for ready[b]
//     (cudaEventSynchronize), then runs HostStagedAllreduce with the user's --algo (device ->
//     pinned host, the host algorithm over MPI, back), casts and unscaling on its own stream.
//   * mixed precision: gradients are generated with the loss scale folded in and rounded to
//     the half type in the kernel; with --compress none the wire type is the precision's
//     half type; unscaling after the reduce sets a device flag (found_inf), copied to the host
//     after the step's buckets are done; the ranks agree on it (max-allreduce) and the
//     existing LossScaler decides (skip + backoff / growth), as on the CPU.
//   * optimizer: sgd (momentum 0.9) or adam as device kernels on the compute stream.
//   * compressors: none, fp16, bf16 only; the others run on host buffers only and are
//     refused with --device cuda (exit 2).
//
// Timing (results.hpp /buckets): ready_s, start_s, end_s are seconds from the step's start
// event (recorded on the compute stream when the step begins; the stream is idle then, so
// it marks the host's t0 to within microseconds). nccl: all three from cudaEventElapsedTime.
// mpi: ready_s from the events, start_s/end_s from the communication thread's host clock,
// from the host t0; ready_s is clamped to start_s (the clocks agree to the launch latency).
// Step columns as on the CPU; comm_exposed_s is host time from the end of backward's
// launches to the last bucket's end event complete; encode_s/decode_s/unscale_s are 0 (inside
// [start, end] on the GPU).
//
// Not supported yet on cuda: real compute of cnn, compressors other than none/fp16/bf16
// (they run on host buffers only), the GRADSYNC_TEST_INJECT_INF test hook (ignored). With
// --backend nccl, --algo/--chunk-bytes/--channels are recorded but NCCL picks its own
// algorithm.
#pragma once

#include <memory>

#include "comm/communicator.hpp"
#include "train/options.hpp"
#include "train/trainer.hpp"

namespace gradsync::train {

// Collective over `world`: throws NoCudaDeviceError on every rank when some rank has no
// usable GPU; the message ("no CUDA device found (<where>: <why>)") is set on the lowest
// such rank only and empty elsewhere, so one line is printed.
void require_cuda_on_all_ranks(Communicator& world);

class GpuTrainer {
 public:
  // Collective over `world` (as Trainer): selects this rank's GPU, builds the workload,
  // buckets, communicators and optimizer, checks the fingerprint and bucket layout match.
  GpuTrainer(const TrainOptions& opts, Communicator& world);
  ~GpuTrainer();
  GpuTrainer(const GpuTrainer&) = delete;
  GpuTrainer& operator=(const GpuTrainer&) = delete;
  RunResult run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gradsync::train
