// gradsync/device/device.hpp — the device seam of gradsync-train: what differs between
// gradients in host memory (host.hpp) and in GPU memory (cuda.hpp). One Reducer
// (train/reducer.hpp) and one Trainer (train/trainer.hpp) sit above it; everything they do
// that does not depend on where the memory is — bucket layout, readiness, the
// communication loop, compression with error feedback, loss scaling, the optimizer
// protocol, timing and results — exists once, there, and is exercised by the host tests.
//
// The seam, as read from the two former training paths (2026-12-01):
//
//   Buffers. Gradients live in one flat fp32 array per bucket; parameters in one flat
//     array in forward order. host: std::vector<float> (zeroed). cuda: cudaMalloc'd device
//     memory (zeroed on the compute stream). Copies between the device and the host are
//     download()/upload(): blocking for the calling thread, a plain memcpy on the host.
//     A compressor that runs on host memory gets the bucket through a host *mirror*
//     (pinned on cuda) that the reducer fills with download() and writes back with
//     upload(), both inside the bucket's [start, end] (Reducer "staged" path).
//
//   Ordering. The training thread produces gradients; the reducer's communication thread
//     consumes a bucket once the training thread marks it complete. host: production is
//     synchronous, so marking is enough (bucket_produced / wait_produced do nothing).
//     cuda: production is asynchronous on the compute stream: bucket_produced(b) records
//     event b there (training thread) and wait_produced(b) synchronises with it
//     (communication thread) before any byte of the bucket is read. The communication
//     thread calls enter_comm_thread() once (cuda: cudaSetDevice; the current device is
//     per host thread). After the step's buckets are done the training thread calls
//     synchronize() before the optimizer touches the gradients (cuda: the compute stream
//     waits for nothing else; every comm-thread kernel is synchronised by the comm thread).
//
//   Kernels. The compressors (compress/*) encode/decode/cast/apply error feedback on host
//     memory with the CPU kernels (kernels/cpu_*.cpp) through one path per compressor:
//     bucket.kernels (compress/bucket_kernels.hpp), the host BucketKernels for host buckets
//     and bucket_kernels() here for device ones (CUDA: kernels/cuda_kernels.hpp, the same
//     bits). Every compressor accepts device memory and runs in place on cuda with
//     --backend nccl, its state (error-feedback memory, PowerSGD's P and Q, 1-bit's scales)
//     in device memory (BucketKernels::state): PowerSGD's products on cuBLAS and its
//     Gram-Schmidt as a kernel, 1-bit's scales read and written on the device
//     (2026-12-02; before, those two were staged).
//     The one kernel the reducer itself runs on device memory is the loss scaler's
//     unscale + inf/nan check (unscale_check_finite: host kernels::unscale_check_finite;
//     cuda kernels::cuda::unscale_check_finite and a flag read back). The optimizer
//     (make_optimizer) is host optimizer.cpp or the CUDA sgd/adam kernels
//     (train/gpu_kernels.hpp), same formulas.
//
//   Emulated gradients. The emulated workload (train/emulated.hpp) walks the layers and
//     their deadlines once for both devices; only the values are produced by the device's
//     GradientGenerator (host: emulated_gradient + round_to; cuda: the gradient kernel on
//     the compute stream, same form, different random bits). Real compute: host Network
//     (mlp, cnn) or, on cuda, GpuMlp (train/gpu_mlp.hpp) behind the same Workload.
//
//   Communicators. host: the reducer's MPI communicator carries every bucket. cuda with
//     --backend nccl: an NcclCommunicator over it (make_communicator) carries, in place on
//     device memory, the buckets of compressors that accept device memory
//     (Compressor::accepts_device_memory: all registered ones); a compressor that does not
//     would be staged and reduced on the MPI communicator. cuda with --backend mpi: every
//     bucket is staged.
//   Stream order: a compressor hands each collective the event of the kernels before it
//     (BucketKernels::ready -> the Communicator's i* `after`, AllreduceAlgorithm::start for
//     the library's own all-reduce), so NCCL follows the encode on the device without a
//     host wait; encode/decode times come from timing events (BucketKernels::mark), and the
//     compressor fences once, at the end of the bucket. The bucket's production is still
//     waited for on the host (wait_produced) before the compressor starts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "compress/bucket_kernels.hpp"
#include "core/dtype.hpp"
#include "train/optimizer.hpp"
#include "train/workload.hpp"

namespace gradsync::train {
struct TrainOptions;
class SyntheticDataset;
}  // namespace gradsync::train

namespace gradsync::device {

// An array of floats in a device's memory, zero when made. Owned (RAII); never copied.
class Array {
 public:
  virtual ~Array() = default;
  float* data() const { return data_; }
  std::size_t count() const { return count_; }

 protected:
  float* data_ = nullptr;
  std::size_t count_ = 0;
};

// Where and how the emulated workload produces a tensor's values (emulated.hpp).
class GradientGenerator {
 public:
  virtual ~GradientGenerator() = default;
  // p[j] = 0.01 * U(-1,1)(key, j): emulated.cpp's init, bit for bit on both devices.
  virtual void init_param(float* p, std::size_t n, std::uint32_t key) = 0;
  // Tensor t's gradient (=|+=), rounded to `round_to` (F32: not rounded).
  virtual void gradient(const models::TensorSpec& t, std::size_t tensor_index, std::uint64_t seed, std::int64_t micro,
                        int rank, float scale, bool accumulate, DType round_to, float* out) = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;  // "cpu" | "cuda" (results: /attrs device)
  virtual bool host_memory() const = 0;  // true: data() pointers are host pointers
  virtual std::string gpu_name() const { return ""; }
  virtual std::int64_t memory_used_bytes() const { return -1; }

  // ---- buffers ------------------------------------------------------------------------
  virtual std::unique_ptr<Array> zeros(std::size_t count) = 0;
  // A host array for staging this device's buckets (pinned on cuda).
  virtual std::unique_ptr<Array> host_mirror(std::size_t count) = 0;
  // Blocking copies for the calling thread (any thread).
  virtual void download(const float* src, float* host_dst, std::size_t count) = 0;
  virtual void upload(const float* host_src, float* dst, std::size_t count) = 0;
  // x[at] = v, ordered after the gradient production launched so far (test hooks only).
  virtual void set_value(float* x, float v) = 0;

  // ---- ordering ----------------------------------------------------------------------------
  virtual void prepare_buckets(std::size_t nbuckets) = 0;  // once, before any bucket_produced
  virtual void bucket_produced(std::size_t b) = 0;         // training thread
  virtual void wait_produced(std::size_t b) = 0;           // communication thread
  virtual void enter_comm_thread() = 0;                    // communication thread, once
  virtual void synchronize() = 0;                          // training thread

  // ---- kernels ---------------------------------------------------------------------------
  // x *= inv_scale (communication thread); false when any input was inf or nan.
  virtual bool unscale_check_finite(float* x, std::size_t n, float inv_scale) = 0;
  virtual void fill_zero(float* x, std::size_t n) = 0;  // communication thread
  virtual std::unique_ptr<train::Optimizer> make_optimizer(const std::string& name,
                                                           const train::OptimizerOptions& opts) = 0;
  virtual GradientGenerator& generator() = 0;
  // The compressors' kernels on this device's memory (compress/bucket_kernels.hpp), used by
  // the communication thread for buckets reduced in place; null on the host.
  virtual BucketKernels* bucket_kernels() { return nullptr; }
  // Real compute on this device: `model` on `dataset` (not owned) in `precision`.
  virtual std::unique_ptr<train::Workload> make_real_workload(const std::string& model,
                                                              const train::SyntheticDataset& dataset,
                                                              std::int64_t batch, DType precision) = 0;

  // ---- communicators -------------------------------------------------------------------------
  // The communicator that reduces buckets in place in this device's memory, built over the
  // reducer's host communicator `host` for `backend` ("mpi" | "nccl"); null when buckets are
  // reduced on `host` (host memory, or staged). Collective over `host`.
  virtual std::unique_ptr<Communicator> make_communicator(Communicator& host, const std::string& backend) = 0;
};

// The sum of squares of a device array, in double (fixed order; downloads in chunks).
double norm2(Device& dev, const float* x, std::size_t count);

}  // namespace gradsync::device
