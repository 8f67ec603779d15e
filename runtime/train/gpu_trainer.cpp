// gradsync/train/gpu_trainer.cpp — see gpu_trainer.hpp.
#include "train/gpu_trainer.hpp"

#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <limits>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "algos/allreduce.hpp"
#include "comm/nccl_comm.hpp"
#include "comm/nccl_compat.hpp"
#include "compress/compressor.hpp"
#include "compress/loss_scaler.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/params.hpp"
#include "core/timer.hpp"
#include "cuda/device.hpp"
#include "cuda/host_staging.hpp"
#include "cuda/memory.hpp"
#include "cuda/stream.hpp"
#include "kernels/cuda_kernels.hpp"
#include "models/compute_profile.hpp"
#include "models/zoo.hpp"
#include "train/dataset.hpp"
#include "train/gpu_kernels.hpp"
#include "train/gpu_mlp.hpp"
#include "train/loader.hpp"
#include "train/network.hpp"
#include "train/optimizer.hpp"
#include "train/precision.hpp"
#include "train/reducer.hpp"
#include "train/rng.hpp"
#include "train/sampler.hpp"
#include "plan/buckets.hpp"

namespace gradsync::train {

void require_cuda_on_all_ranks(Communicator& world) {
  // Decide together: the lowest rank without a GPU speaks, every rank fails alike.
  std::string why;
  const bool have = cuda_device_count(&why) > 0;
  const std::int64_t first_missing = world.min_int64(have ? world.size() : world.rank());
  if (first_missing < world.size())
    throw NoCudaDeviceError(world.rank() == first_missing ? "no CUDA device found (" + where() + ": " + why + ")"
                                                         : std::string());
}

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

void sleep_until_s(double deadline) {
  const double left = deadline - now_s();
  if (left > 0) std::this_thread::sleep_for(std::chrono::duration<double>(left));
}

double event_s(const Event& from, const Event& to) { return 1e-3 * static_cast<double>(Event::elapsed_ms(from, to)); }

#if GS_NCCL_HAS_BF16
ncclDataType_t nccl_half(DType t) { return t == DType::F16 ? ncclFloat16 : ncclBfloat16; }
#else
ncclDataType_t nccl_half(DType t) {
  GS_CHECK(t == DType::F16, "bf16 all-reduce needs NCCL >= 2.10 (this build: ", nccl_compat::versions_text(), ")");
  return ncclFloat16;
}
#endif

// ---- the reducer on device buffers -------------------------------------------------------
//
// Same bucket layout as the CPU Reducer (plan::assign_buckets), same protocol for the trainer
// (begin_backward / mark_ready per tensor / finish_backward), but the readiness of a bucket
// is a CUDA event on the compute stream and the all-reduce is ordered after it on the GPU
// (nccl) or waited for by a communication thread (mpi, host staging). See gpu_trainer.hpp.
struct GpuReducerSetup {
  NcclCommunicator* nccl = nullptr;     // backend nccl
  AllreduceAlgorithm* staged = nullptr;  // backend mpi (HostStagedAllreduce)
  int device = 0;
  int nranks = 1;
  DType wire = DType::F32;  // F16/BF16: cast, all-reduce Sum in half, widen
  bool unscale = false;     // mixed precision: unscale + inf/nan check after the reduce
  bool overlap = true;
  std::int64_t bucket_bytes = 0, first_bucket_bytes = 0;
  cudaStream_t compute = nullptr;
};

class GpuReducer {
 public:
  GpuReducer(std::vector<models::TensorSpec> tensors, GpuReducerSetup s) : tensors_(std::move(tensors)), s_(s) {
    GS_CHECK(!tensors_.empty(), "reducer: the model has no parameters");
    GS_CHECK((s_.nccl != nullptr) != (s_.staged != nullptr), "gpu reducer: exactly one of nccl and staged");
    std::vector<std::int64_t> bytes;
    for (const auto& t : tensors_) bytes.push_back(t.numel() * static_cast<std::int64_t>(sizeof(float)));
    assignment_ = plan::assign_buckets(bytes, s_.bucket_bytes, s_.first_bucket_bytes);
    const std::size_t nb = assignment_.size();
    bucket_of_.assign(tensors_.size(), 0);
    offset_.assign(tensors_.size(), 0);
    count_.assign(nb, 0);
    for (std::size_t b = 0; b < nb; ++b) {
      std::size_t off = 0;
      for (std::size_t i : assignment_[b]) {
        bucket_of_[i] = b;
        offset_[i] = off;
        off += static_cast<std::size_t>(tensors_[i].numel());
      }
      count_[b] = off;
    }
    grads_.resize(nb);
    halves_.resize(nb);
    for (std::size_t b = 0; b < nb; ++b) {
      grads_[b].reserve(count_[b] * sizeof(float));
      GS_CUDA(cudaMemsetAsync(grads_[b].get(), 0, count_[b] * sizeof(float), s_.compute));
      if (s_.wire != DType::F32) halves_[b].reserve(count_[b] * sizeof(std::uint16_t));
      ready_.emplace_back(true);
      start_.emplace_back(true);
      end_.emplace_back(true);
    }
    flag_.reserve(sizeof(int));
    GS_CUDA(cudaMemsetAsync(flag_.get(), 0, sizeof(int), s_.compute));
    GS_CUDA(cudaStreamSynchronize(s_.compute));
    readiness_ = BucketReadiness(assignment_, tensors_.size());
    records_.resize(nb);
    if (s_.staged) thread_ = std::thread([this] { comm_loop(); });
    GS_LOG(INFO) << "gpu reducer: " << tensors_.size() << " tensors in " << nb << " buckets on GPU " << s_.device
                 << ", " << (s_.nccl ? "nccl" : "mpi (host staged)") << ", overlap " << (s_.overlap ? "on" : "off");
  }

  ~GpuReducer() {
    if (thread_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
      }
      cv_queue_.notify_all();
      thread_.join();
    }
  }

  std::size_t num_buckets() const { return count_.size(); }
  std::size_t count(std::size_t b) const { return count_[b]; }
  std::size_t bucket_of(std::size_t i) const { return bucket_of_[i]; }
  std::size_t offset(std::size_t i) const { return offset_[i]; }
  float* bucket_grad(std::size_t b) const { return grads_[b].as<float>(); }
  float* grad(std::size_t i) const { return bucket_grad(bucket_of_[i]) + offset_[i]; }
  const std::vector<std::vector<std::size_t>>& assignment() const { return assignment_; }

  std::vector<std::int64_t> bucket_bytes() const {
    std::vector<std::int64_t> out;
    for (std::size_t c : count_) out.push_back(static_cast<std::int64_t>(c * sizeof(float)));
    return out;
  }

  // As Reducer::layout (compared across ranks).
  std::string layout() const {
    return bucket_layout(s_.bucket_bytes, s_.first_bucket_bytes, tensors_.size(), assignment_, bucket_bytes());
  }

  // The step's time origin: recorded on the compute stream (idle at a step's start) at the
  // host time t0.
  void start_step(double t0) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      t0_ = t0;
    }
    step_start_.record(s_.compute);
  }

  void begin_backward(std::int64_t step, bool sync, float inv_scale) {
    const double t = now_s();
    GS_CHECK(!in_backward_, "gpu reducer: begin_backward twice without finish_backward");
    in_backward_ = true;
    step_ = step;
    sync_ = sync;
    readiness_.reset();
    launch_wall_s_ = 0;
    if (sync_) {
      // Ordered before every bucket's ready event, hence before any unscale kernel.
      GS_CUDA(cudaMemsetAsync(flag_.get(), 0, sizeof(int), s_.compute));
      std::lock_guard<std::mutex> lock(mu_);
      done_ = 0;
      inv_scale_ = inv_scale;
      for (std::size_t b = 0; b < count_.size(); ++b)
        records_[b] = BucketRecord{static_cast<std::int64_t>(count_[b] * sizeof(float)), 0, 0, 0};
    }
    overhead_s_ = now_s() - t;
  }

  // Called after the kernel writing tensor i's gradient was launched on the compute stream.
  void mark_ready(std::size_t i) {
    const double t = now_s();
    GS_CHECK(in_backward_, "gpu reducer: mark_ready(", i, ") outside backward");
    if (readiness_.mark(i, "gpu reducer") && sync_) {
      ready_[bucket_of_[i]].record(s_.compute);
      overhead_s_ += now_s() - t;
      if (s_.overlap) launch_ready();
      return;
    }
    overhead_s_ += now_s() - t;
  }

  // Waits for every bucket of a sync backward. Returns the step's records (bytes, times),
  // the wire statistics and this rank's found_inf.
  StepComm finish_backward() {
    double t = now_s();
    GS_CHECK(in_backward_, "gpu reducer: finish_backward without begin_backward");
    in_backward_ = false;
    GS_CHECK(readiness_.marked() == tensors_.size(), "gpu reducer: backward marked ", readiness_.marked(), " of ",
             tensors_.size(), " gradients ready");
    StepComm out;
    if (!sync_) {
      out.overhead_s = overhead_s_ + (now_s() - t);
      return out;
    }
    overhead_s_ += now_s() - t;
    launch_ready();  // everything when overlap is off; a no-op otherwise
    if (s_.nccl) wait_nccl();
    else wait_staged();
    t = now_s();
    const std::size_t nb = count_.size();
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (std::size_t b = 0; b < nb; ++b) {
        BucketRecord& r = records_[b];
        r.ready_s = event_s(step_start_, ready_[b]);
        if (s_.nccl) {
          r.start_s = event_s(step_start_, start_[b]);
          r.end_s = event_s(step_start_, end_[b]);
        } else {
          r.ready_s = std::min(r.ready_s, r.start_s);  // host and GPU clocks (gpu_trainer.hpp)
        }
      }
      out.buckets = records_;
    }
    const std::size_t esz = s_.wire == DType::F32 ? sizeof(float) : sizeof(std::uint16_t);
    for (std::size_t b = 0; b < nb; ++b) {
      const std::uint64_t payload = count_[b] * esz;
      CompressStats st;
      st.uncompressed_bytes = count_[b] * sizeof(float);
      st.compressed_bytes = payload;
      st.wire_bytes = s_.nccl ? allreduce_ring_bytes(payload) : staged_wire_bytes(payload);
      st.collective = "allreduce";
      st.compressed = s_.wire != DType::F32;
      out.stats.add(st);
      out.comm_busy_s += out.buckets[b].end_s - out.buckets[b].start_s;
    }
    if (s_.unscale) {
      int h = 0;
      GS_CUDA(cudaMemcpy(&h, flag_.get(), sizeof h, cudaMemcpyDeviceToHost));
      out.found_inf = h != 0;
    }
    out.overhead_s = overhead_s_ + (now_s() - t);
    out.launch_wall_s = launch_wall_s_;
    return out;
  }

 private:
  // The CPU compressors' estimate of the bytes one rank sends (compress/collectives.hpp):
  // ceil(log2 p) x bytes for recursive doubling, 2(p-1)/p x bytes for ring-like algorithms.
  std::uint64_t staged_wire_bytes(std::uint64_t bytes) const {
    if (s_.nranks <= 1 || bytes == 0) return 0;
    if (s_.staged->chosen(bytes) == "rd")
      return static_cast<std::uint64_t>(std::ceil(std::log2(static_cast<double>(s_.nranks)))) * bytes;
    return allreduce_ring_bytes(bytes);
  }
  std::uint64_t allreduce_ring_bytes(std::uint64_t bytes) const {
    const int p = s_.nranks;
    if (p <= 1 || bytes == 0) return 0;
    return static_cast<std::uint64_t>(
        std::llround(2.0 * static_cast<double>(p - 1) / static_cast<double>(p) * static_cast<double>(bytes)));
  }

  // Training thread: buckets in bucket order, as far as they are ready.
  void launch_ready() {
    const double w = now_s();
    bool any = false;
    for (std::size_t b; readiness_.pop_launchable(b);) {
      any = true;
      if (s_.nccl) {
        enqueue_nccl(b);
      } else {
        {
          std::lock_guard<std::mutex> lock(mu_);
          queue_.push_back(b);
        }
        cv_queue_.notify_one();
      }
    }
    if (any) launch_wall_s_ += now_s() - w;
  }

  // nccl: everything ordered on the communicator's stream after ready[b]; the host returns
  // at once.
  void enqueue_nccl(std::size_t b) {
    const cudaStream_t cs = s_.nccl->stream();
    GS_CHECK(!s_.nccl->aborted(), "gpu reducer: the NCCL communicator was aborted");
    GS_CUDA(cudaStreamWaitEvent(cs, ready_[b].get(), 0));
    start_[b].record(cs);
    float* g = bucket_grad(b);
    const std::size_t n = count_[b];
    const ncclComm_t comm = s_.nccl->handle();
    if (s_.wire == DType::F32) {
      GS_NCCL(ncclGroupStart());
#if GS_NCCL_HAS_AVG
      GS_NCCL(ncclAllReduce(g, g, n, ncclFloat32, ncclAvg, comm, cs));
      GS_NCCL(ncclGroupEnd());
#else
      GS_NCCL(ncclAllReduce(g, g, n, ncclFloat32, ncclSum, comm, cs));
      GS_NCCL(ncclGroupEnd());
      kernels::cuda::scale_inplace(g, n, 1.0f / static_cast<float>(s_.nranks), cs);
#endif
    } else {
      // The cast compressor's recipe: pre-divide by the world size in the cast, Sum in half.
      auto* h = halves_[b].as<std::uint16_t>();
      kernels::cuda::cast_to_half(s_.wire, g, h, n, 1.0f / static_cast<float>(s_.nranks), cs);
      GS_NCCL(ncclGroupStart());
      GS_NCCL(ncclAllReduce(h, h, n, nccl_half(s_.wire), ncclSum, comm, cs));
      GS_NCCL(ncclGroupEnd());
      kernels::cuda::cast_from_half(s_.wire, h, g, n, 1.0f, cs);
    }
    if (s_.unscale) kernels::cuda::unscale_check_finite(g, n, inv_scale_, flag_.as<int>(), cs);
    end_[b].record(cs);
  }

  // nccl: poll the last bucket's end event (the stream is in order), watching NCCL's
  // asynchronous errors and GRADSYNC_TIMEOUT_S.
  void wait_nccl() {
    const Event& last = end_.back();
    const double timeout = comm_timeout_s();
    const double t0 = now_s();
    for (;;) {
      const cudaError_t q = cudaEventQuery(last.get());
      if (q == cudaSuccess) break;
      if (q != cudaErrorNotReady) GS_CUDA(q);
      ncclResult_t async = ncclSuccess;
      GS_NCCL(ncclCommGetAsyncError(s_.nccl->handle(), &async));
      if (async != ncclSuccess && async != ncclInProgress)
        throw Error(where() + ": NCCL all-reduce of step " + std::to_string(step_) + " failed asynchronously: " +
                    ncclGetErrorString(async));
      if (timeout > 0 && now_s() - t0 > timeout)
        throw Error(where() + ": NCCL all-reduce of step " + std::to_string(step_) + " did not complete within " +
                    std::to_string(timeout) + " s (GRADSYNC_TIMEOUT_S); a peer may have failed");
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  void wait_staged() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_done_.wait(lock, [&] { return done_ == count_.size(); });
    if (error_) {
      std::exception_ptr e = error_;
      error_ = nullptr;
      std::rethrow_exception(e);
    }
  }

  // mpi: the communication thread. Waits for the bucket's ready event, then host-staged
  // all-reduce (+ casts and unscaling on its own stream), all inside [start, end].
  void comm_loop() {
    try {
      GS_CUDA(cudaSetDevice(s_.device));  // the current device is per host thread
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
    }
    std::optional<Stream> stream;
    for (;;) {
      std::size_t b = 0;
      bool failed = false;
      double t0 = 0;
      float inv_scale = 1.f;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_queue_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        b = queue_.front();
        queue_.pop_front();
        failed = error_ != nullptr;
        t0 = t0_;
        inv_scale = inv_scale_;
      }
      double start = now_s();
      if (!failed) {
        try {
          if (!stream) stream.emplace();
          const cudaStream_t cs = stream->get();
          ready_[b].synchronize();
          start = now_s();
          float* g = bucket_grad(b);
          const std::size_t n = count_[b];
          if (s_.wire == DType::F32) {
            s_.staged->run(g, g, n, DType::F32, RedOp::Avg);
          } else {
            auto* h = halves_[b].as<std::uint16_t>();
            kernels::cuda::cast_to_half(s_.wire, g, h, n, 1.0f / static_cast<float>(s_.nranks), cs);
            GS_CUDA(cudaStreamSynchronize(cs));  // staging copies run on the staging stream
            s_.staged->run(h, h, n, s_.wire, RedOp::Sum);
            kernels::cuda::cast_from_half(s_.wire, h, g, n, 1.0f, cs);
          }
          if (s_.unscale) kernels::cuda::unscale_check_finite(g, n, inv_scale, flag_.as<int>(), cs);
          GS_CUDA(cudaStreamSynchronize(cs));
        } catch (...) {
          std::lock_guard<std::mutex> lock(mu_);
          if (!error_) error_ = std::current_exception();
        }
      }
      const double end = now_s();
      {
        std::lock_guard<std::mutex> lock(mu_);
        records_[b].start_s = start - t0;
        records_[b].end_s = end - t0;
        ++done_;
      }
      cv_done_.notify_one();
    }
  }

  std::vector<models::TensorSpec> tensors_;
  GpuReducerSetup s_;
  std::vector<std::vector<std::size_t>> assignment_;
  std::vector<std::size_t> bucket_of_, offset_, count_;
  std::vector<DeviceBuffer> grads_, halves_;  // per bucket: fp32 gradients, the half wire copy
  DeviceBuffer flag_;                         // found_inf (int)
  Event step_start_{true};
  std::vector<Event> ready_, start_, end_;    // per bucket

  // Training-thread state.
  std::int64_t step_ = 0;
  bool sync_ = false, in_backward_ = false;
  BucketReadiness readiness_;
  double overhead_s_ = 0, launch_wall_s_ = 0;

  // Shared with the communication thread (mpi), guarded by mu_.
  std::mutex mu_;
  std::condition_variable cv_queue_, cv_done_;
  std::deque<std::size_t> queue_;
  std::size_t done_ = 0;
  double t0_ = 0;
  float inv_scale_ = 1.f;
  std::vector<BucketRecord> records_;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

// ---- the trainer ------------------------------------------------------------------------------

struct GpuTrainer::Impl {
  TrainOptions o;
  Communicator& world;
  int rank = 0, nranks = 1;
  int device = 0;
  CudaDeviceInfo info;
  std::unique_ptr<Stream> compute;
  std::unique_ptr<Communicator> reducer_comm;
  // Declared before the reducer: destroyed after it (the reducer's work references them).
  std::unique_ptr<NcclCommunicator> nccl;
  std::unique_ptr<AllreduceAlgorithm> staged;

  models::ModelSpec spec;
  std::vector<models::TensorSpec> tensors;
  models::LayerTimes times;
  double fwd_total_s = 0;
  std::vector<std::vector<std::size_t>> layer_tensors;
  std::vector<float> tensor_scale;  // per tensor, fixed for the run (emulated.hpp's s_t)

  DType precision = DType::F32, wire = DType::F32;
  std::optional<LossScaler> scaler;
  std::string user_compress, effective_compress;

  std::unique_ptr<GpuReducer> reducer;
  std::vector<DeviceBuffer> params, state1, state2;  // per bucket, the reducer's layout
  float* param(std::size_t t) const { return params[reducer->bucket_of(t)].as<float>() + reducer->offset(t); }

  // Real compute (mlp): the data, the GPU network, and a host copy of the network for
  // initialisation (Network::init_params, as on the CPU) and evaluation (its predict()).
  std::unique_ptr<SyntheticDataset> dataset;
  std::unique_ptr<GpuMlp> mlp;
  std::unique_ptr<Network<float>> host_net;
  std::vector<float> host_params, host_grads;  // flat, forward order
  std::int64_t adam_t = 0;

  std::unique_ptr<DistributedSampler> sampler;
  std::unique_ptr<Loader> loader;
  std::int64_t samples_per_epoch = 0, steps_per_epoch = 0, steps = 0;
  ReplayStats replay;

  Impl(const TrainOptions& opts, Communicator& w) : o(opts), world(w) {
    rank = world.rank();
    nranks = world.size();
    // As Trainer: the options must be equal everywhere before anything else.
    const std::vector<std::string> fps = world.allgather_strings(train_fingerprint(o));
    if (std::any_of(fps.begin(), fps.end(), [&](const std::string& f) { return f != fps[0]; })) {
      for (const auto& [key, value] : fingerprint_items(o)) check_same_on_all_ranks(world, "option --" + key, value);
      check_same_on_all_ranks(world, "run configuration", train_fingerprint(o));
    }
    check_cuda_train_options(o);  // validated before MPI too; cheap and explicit here

    // ---- device and model ------------------------------------------------------------------
    device = select_cuda_device(world.local_rank());
    info = cuda_device_info(device);
    compute = std::make_unique<Stream>();
    spec = is_trainable(o.model) ? make_network<float>(o.model)->spec() : models::zoo_model(o.model);
    samples_per_epoch = o.samples_per_epoch > 0 ? o.samples_per_epoch : spec.samples_per_epoch;
    const std::int64_t micro_per_epoch = (samples_per_epoch / nranks) / o.batch_per_rank;
    steps_per_epoch = micro_per_epoch / o.accumulate;
    GS_USAGE_CHECK(steps_per_epoch >= 1, "option --samples-per-epoch: ", samples_per_epoch,
                   " samples give no full step for ", nranks, " ranks x --batch-per-rank ", o.batch_per_rank,
                   " x --accumulate ", o.accumulate);
    steps = o.epochs > 0 ? o.epochs * steps_per_epoch : o.steps;
    precision = parse_precision(o.precision);
    if (precision != DType::F32) scaler.emplace(parse_loss_scale(o.loss_scale));
    tensors = spec.tensors();
    const bool real = o.compute == "real";
    times = models::layer_times(spec, models::load_profile(o.compute_profile), o.batch_per_rank,
                                /*half_precision=*/precision != DType::F32);
    for (double f : times.fwd_s) fwd_total_s += f;
    std::size_t ti = 0;
    for (const auto& l : spec.layers) {
      std::vector<std::size_t> idx;
      for (std::size_t k = 0; k < l.params.size(); ++k) idx.push_back(ti++);
      layer_tensors.push_back(std::move(idx));
    }
    for (std::size_t t = 0; t < tensors.size(); ++t) {
      SplitMix64 fixed(mix64(o.seed, 0x9a1eULL, t));
      tensor_scale.push_back(1e-3f * static_cast<float>(std::exp(3.0 * fixed.uniform() - 1.5)));
    }

    // ---- wire type: none | fp16 | bf16 (options.cpp refuses the rest on cuda) ---------------
    user_compress = make_compressor(o.compress, o.seed, rank)->spec();
    effective_compress = user_compress == "none" && precision != DType::F32 ? precision_name(precision) : user_compress;
    wire = effective_compress == "fp16" ? DType::F16 : effective_compress == "bf16" ? DType::BF16 : DType::F32;

    // ---- communicators (the reducer's own, as on the CPU) ------------------------------------
    reducer_comm = world.split(0, rank);
    GpuReducerSetup rs;
    if (o.backend == "nccl") {
      nccl = std::make_unique<NcclCommunicator>(*reducer_comm, device);
      rs.nccl = nccl.get();
    } else {
      staged = make_host_staged_allreduce(
          o.algo, *reducer_comm, AlgoOptions{static_cast<std::size_t>(o.chunk_bytes), static_cast<int>(o.channels)});
      rs.staged = staged.get();
    }
    rs.device = device;
    rs.nranks = nranks;
    rs.wire = wire;
    rs.unscale = scaler.has_value();
    rs.overlap = o.overlap;
    rs.bucket_bytes = plan::bucket_limit_bytes(o.bucket_mb);
    rs.first_bucket_bytes = plan::bucket_limit_bytes(o.first_bucket_mb);
    rs.compute = compute->get();
    reducer = std::make_unique<GpuReducer>(tensors, rs);

    // ---- parameters (emulated.cpp's init, in bucket layout) and optimizer state ----------------
    GS_USAGE_CHECK(o.optimizer == "sgd" || o.optimizer == "adam", "option --optimizer: '", o.optimizer,
                   "' (known: sgd, adam)");
    const std::size_t nb = reducer->num_buckets();
    params.resize(nb);
    state1.resize(nb);
    state2.resize(nb);
    const cudaStream_t cs = compute->get();
    for (std::size_t b = 0; b < nb; ++b) {
      const std::size_t bytes = reducer->count(b) * sizeof(float);
      params[b].reserve(bytes);
      state1[b].reserve(bytes);
      GS_CUDA(cudaMemsetAsync(state1[b].get(), 0, bytes, cs));
      if (o.optimizer == "adam") {
        state2[b].reserve(bytes);
        GS_CUDA(cudaMemsetAsync(state2[b].get(), 0, bytes, cs));
      }
    }
    if (real) {
      // PyTorch's init on the host network (the CPU run's initial weights), then to the GPU.
      dataset = std::make_unique<SyntheticDataset>(data_spec_for(o.model, samples_per_epoch), o.seed);
      host_net = make_network<float>(o.model);
      host_net->set_compute_type(precision);
      host_params.assign(static_cast<std::size_t>(spec.num_parameters()), 0.0f);
      host_grads.assign(host_params.size(), 0.0f);
      std::vector<float*> hp, hg, dp, dg;
      std::size_t off = 0;
      for (std::size_t t = 0; t < tensors.size(); ++t) {
        hp.push_back(host_params.data() + off);
        hg.push_back(host_grads.data() + off);
        dp.push_back(param(t));
        dg.push_back(reducer->grad(t));
        off += static_cast<std::size_t>(tensors[t].numel());
      }
      host_net->bind(hp, hg);
      host_net->init_params(o.seed);
      for (std::size_t t = 0; t < tensors.size(); ++t)
        GS_CUDA(cudaMemcpyAsync(dp[t], hp[t], static_cast<std::size_t>(tensors[t].numel()) * sizeof(float),
                                cudaMemcpyHostToDevice, cs));
      mlp = std::make_unique<GpuMlp>(tensors, o.batch_per_rank, precision, cs);
      mlp->bind(dp, dg);
    } else {
      for (std::size_t t = 0; t < tensors.size(); ++t)
        gpu::fill_hash_uniform(param(t), static_cast<std::size_t>(tensors[t].numel()),
                               static_cast<std::uint32_t>(mix64(o.seed, 0x1417ULL, t)), 0.01f, cs);
    }
    compute->synchronize();

    check_same_on_all_ranks(world, "bucket layout", reducer->layout());

    // ---- data loading (emulated: no data set; --data-time-us is spent in the loader) --------
    sampler = std::make_unique<DistributedSampler>(samples_per_epoch, nranks, rank, o.seed);
    loader = std::make_unique<Loader>(*sampler, dataset.get(), loader_options(o, steps_per_epoch, steps));
  }

  // Accuracy on the held-out set (real compute), each rank evaluating positions rank,
  // rank+N, ... with the host network on a copy of the device weights (outside step times).
  double evaluate() {
    if (!mlp) return kNaN;
    std::size_t off = 0;
    for (std::size_t t = 0; t < tensors.size(); ++t) {
      const std::size_t n = static_cast<std::size_t>(tensors[t].numel());
      GS_CUDA(cudaMemcpy(host_params.data() + off, param(t), n * sizeof(float), cudaMemcpyDeviceToHost));
      off += n;
    }
    constexpr std::int64_t kChunk = 256;
    const std::int64_t n = dataset->size(Split::Eval), d = dataset->sample_size();
    std::vector<float> x(static_cast<std::size_t>(kChunk * d));
    std::vector<std::int32_t> y(kChunk), pred(kChunk);
    std::int64_t correct = 0;
    for (std::int64_t pos = rank; pos < n;) {
      std::int64_t m = 0;
      for (; m < kChunk && pos < n; ++m, pos += nranks)
        y[static_cast<std::size_t>(m)] = dataset->sample(Split::Eval, pos, x.data() + m * d);
      host_net->predict(x.data(), m, pred.data());
      for (std::int64_t i = 0; i < m; ++i) correct += pred[static_cast<std::size_t>(i)] == y[static_cast<std::size_t>(i)];
    }
    return world.sum_double(static_cast<double>(correct)) / static_cast<double>(n);
  }

  // Emulated backward on the GPU (gpu_trainer.hpp): per layer in reverse, sleep until its
  // deadline, then launch its tensors' gradient kernels and mark them ready.
  void backward(std::int64_t micro, float scale, bool accumulate) {
    const cudaStream_t cs = compute->get();
    const double start = now_s();
    double deadline = start;
    for (std::size_t l = spec.layers.size(); l-- > 0;) {
      deadline += times.bwd_s[l];
      sleep_until_s(deadline);
      const auto& idx = layer_tensors[l];
      for (std::size_t k = idx.size(); k-- > 0;) {
        const std::size_t t = idx[k];
        const models::TensorSpec& ts = tensors[t];
        gpu::GradGen g;
        const std::int64_t n = ts.numel();
        g.rows = ts.shape.size() >= 2 ? ts.shape[0] : 1;
        g.cols = g.rows > 0 ? n / g.rows : 0;
        g.scale = scale * tensor_scale[t];
        g.sig_key = static_cast<std::uint32_t>(mix64(o.seed, 0x5e9ULL, static_cast<std::uint64_t>(micro), t));
        g.noise_key = mix64(o.seed, 0x4015eULL, static_cast<std::uint64_t>(micro), static_cast<std::uint64_t>(rank), t);
        g.accumulate = accumulate;
        g.round_to = precision;
        gpu::emulated_gradient(g, reducer->grad(t), cs);
      }
      for (std::size_t k = idx.size(); k-- > 0;) reducer->mark_ready(idx[k]);
    }
    const double modelled = deadline - start, excess = now_s() - deadline;
    if (excess > std::max(5e-4, 0.02 * modelled)) ++replay.overruns;
    replay.overrun_s += std::max(0.0, excess);
  }

  void optimizer_step() {
    const cudaStream_t cs = compute->get();
    const auto lr = static_cast<float>(o.lr);
    OptimizerOptions oo;
    if (o.optimizer == "adam") ++adam_t;
    const float c1 = static_cast<float>(1.0 / (1.0 - std::pow(oo.beta1, static_cast<double>(adam_t))));
    const float c2 = static_cast<float>(1.0 / (1.0 - std::pow(oo.beta2, static_cast<double>(adam_t))));
    for (std::size_t b = 0; b < reducer->num_buckets(); ++b) {
      const std::size_t n = reducer->count(b);
      if (o.optimizer == "adam")
        gpu::adam_step(params[b].as<float>(), reducer->bucket_grad(b), state1[b].as<float>(), state2[b].as<float>(), n,
                       lr, static_cast<float>(oo.beta1), static_cast<float>(oo.beta2), c1, c2,
                       static_cast<float>(oo.eps), cs);
      else
        gpu::sgd_step(params[b].as<float>(), reducer->bucket_grad(b), state1[b].as<float>(), n, lr,
                      static_cast<float>(oo.momentum), cs);
    }
    compute->synchronize();
  }

  double param_norm() {
    double s = 0;
    std::vector<float> host;
    for (std::size_t b = 0; b < reducer->num_buckets(); ++b) {
      host.resize(reducer->count(b));
      GS_CUDA(cudaMemcpy(host.data(), params[b].get(), host.size() * sizeof(float), cudaMemcpyDeviceToHost));
      for (float v : host) s += static_cast<double>(v) * static_cast<double>(v);
    }
    return std::sqrt(s);
  }

  RunResult run() {
    RunResult res;
    describe_run(world, tensors, reducer->assignment(), reducer->bucket_bytes(), user_compress, effective_compress,
                 precision, scaler ? &*scaler : nullptr, res);
    res.samples_per_epoch = samples_per_epoch;
    res.steps_per_epoch = steps_per_epoch;
    res.device = "cuda";
    res.backend = o.backend;
    res.gpu_name = info.name;

    std::vector<StepRow> mine;
    mine.reserve(static_cast<std::size_t>(steps));
    std::uint64_t uncompressed = 0, compressed = 0;
    const std::int64_t K = o.accumulate;
    const bool progress = rank == 0 && !o.quiet;
    const std::int64_t every = std::max<std::int64_t>(1, steps / 10);

    std::vector<double> epoch_eval;
    const GradReadyFn mark = [this](std::size_t i) { reducer->mark_ready(i); };
    world.barrier();  // start the clocks together
    for (std::int64_t s = 0; s < steps; ++s) {
      StepRow row;
      const double t0 = now_s();
      reducer->start_step(t0);
      const float loss_scale = scaler ? scaler->scale() : 1.0f;
      const float scale = loss_scale / static_cast<float>(K);
      const float inv_scale = scaler ? scaler->inv_scale() : 1.0f;
      bool found_inf = false;
      double loss_sum = 0;
      for (std::int64_t k = 0; k < K; ++k) {
        double t = now_s();
        const Batch batch = loader->next();
        row.data_s += now_s() - t;
        t = now_s();
        if (mlp) loss_sum += mlp->forward(batch);
        else sleep_until_s(t + fwd_total_s);  // emulated forward
        row.forward_s += now_s() - t;
        const bool sync = k == K - 1;
        reducer->begin_backward(s, sync, sync ? inv_scale : 1.0f);
        t = now_s();
        if (mlp) mlp->backward(scale, /*accumulate=*/k > 0, mark);
        else backward(s * K + k, scale, /*accumulate=*/k > 0);
        const double t_bwd_end = now_s();
        row.backward_s += t_bwd_end - t;
        const StepComm sc = reducer->finish_backward();
        if (sync && scaler) found_inf = world.max_int64(sc.found_inf ? 1 : 0) != 0;
        if (sync) row.comm_exposed_s = now_s() - t_bwd_end;
        row.reducer_s += sc.overhead_s;
        row.reducer_launch_wall_s += sc.launch_wall_s;
        if (sync) {
          row.bytes_sent = static_cast<double>(sc.stats.wire_bytes);
          row.comm_total_s = sc.comm_busy_s;
          // compression_ratio counts compressed steps only (results/README.md): PowerSGD's
          // plain steps before start=K, and plain all-reduces, send the payload unchanged.
          if (sc.stats.compressed) {
            uncompressed += sc.stats.uncompressed_bytes;
            compressed += sc.stats.compressed_bytes;
          }
          if (rank == 0)
            for (std::size_t b = 0; b < sc.buckets.size(); ++b)
              res.buckets.push_back(BucketRow{s, static_cast<std::int64_t>(b), sc.buckets[b]});
        }
      }
      const double t = now_s();
      row.loss_scale = loss_scale;
      if (scaler) row.skipped = scaler->update(found_inf).skipped ? 1 : 0;
      if (row.skipped == 0) optimizer_step();
      row.optimizer_s = now_s() - t;
      row.loss = mlp ? loss_sum / static_cast<double>(K) : kNaN;
      row.step_time_s = now_s() - t0;
      mine.push_back(row);
      if (progress && ((s + 1) % every == 0 || s + 1 == steps)) {
        std::fprintf(stderr, "step %lld/%lld  step %.2f ms  exposed comm %.2f ms\n", static_cast<long long>(s + 1),
                     static_cast<long long>(steps), row.step_time_s * 1e3, row.comm_exposed_s * 1e3);
        std::fflush(stderr);
      }
      if ((s + 1) % steps_per_epoch == 0) epoch_eval.push_back(evaluate());  // collective, outside step times
    }
    res.gpu_memory_used_bytes = static_cast<std::int64_t>(gpu_memory_info().used_bytes());

    // ---- statistics over ranks (shared with Trainer) ---------------------------------------
    finish_run(world, mine, epoch_eval, steps, steps_per_epoch, scaler ? &*scaler : nullptr, uncompressed, compressed,
               replay, [this] { return evaluate(); }, res);
    res.final_param_norm = param_norm();
    return res;
  }
};

GpuTrainer::GpuTrainer(const TrainOptions& opts, Communicator& world) : impl_(std::make_unique<Impl>(opts, world)) {}
GpuTrainer::~GpuTrainer() = default;
RunResult GpuTrainer::run() { return impl_->run(); }

}  // namespace gradsync::train
