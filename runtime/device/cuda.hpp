// gradsync/device/cuda.hpp — the CUDA side of the device seam (device.hpp): gradients and
// parameters in GPU memory, gradient production on one compute stream with one event per
// bucket, the communication thread's kernels on a stream of its own, pinned host mirrors
// for staged buckets, the CUDA optimizers and emulated gradient kernels
// (train/gpu_kernels.hpp), GpuMlp for real compute, NcclCommunicator for --backend nccl.
// GRADSYNC_WITH_CUDA=ON builds only; thin: every decision is the shared code's.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "comm/communicator.hpp"
#include "device/device.hpp"

namespace gradsync::device {

// Collective over `world`: throws NoCudaDeviceError on every rank when some rank has no
// usable GPU; the message ("no CUDA device found (<where>: <why>)") is set on the lowest
// such rank only and empty elsewhere, so one line is printed.
void require_cuda_on_all_ranks(Communicator& world);

// This rank's GPU chosen by node-local rank (cuda/device.hpp's select_cuda_device).
std::unique_ptr<Device> make_cuda_device(int local_rank);

// The compressors' kernels on the current GPU (compress/bucket_kernels.hpp), launched on
// `stream` (benchmarks: gradsync-gpu-kernels-bench's PowerSGD case). The device's own
// (Device::bucket_kernels) follow the calling thread's stream instead.
std::unique_ptr<BucketKernels> make_cuda_bucket_kernels(cudaStream_t stream);

}  // namespace gradsync::device
