// gradsync/device/cuda.cpp — see cuda.hpp.
#include "device/cuda.hpp"

#include <cmath>
#include <limits>
#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <optional>
#include <thread>
#include <vector>

#include "comm/nccl_comm.hpp"
#include "core/error.hpp"
#include "cuda/device.hpp"
#include "cuda/memory.hpp"
#include "cuda/stream.hpp"
#include "kernels/cuda_kernels.hpp"
#include "kernels/powersgd_gemm.hpp"
#include "train/gpu_kernels.hpp"
#include "train/gpu_mlp.hpp"
#include "train/rng.hpp"

namespace gradsync::device {

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

template <typename Kind>
class CudaArray final : public Array {
 public:
  CudaArray(std::size_t count, cudaStream_t zero_on) : buf_(count * sizeof(float)) {
    data_ = buf_.template as<float>();
    count_ = count;
    if (zero_on) GS_CUDA(cudaMemsetAsync(data_, 0, count * sizeof(float), zero_on));
    else std::fill(data_, data_ + count, 0.0f);  // pinned host memory
  }

 private:
  CudaBuffer<Kind> buf_;
};

class CudaGenerator final : public GradientGenerator {
 public:
  explicit CudaGenerator(cudaStream_t compute) : compute_(compute) {}
  void init_param(float* p, std::size_t n, std::uint32_t key) override {
    train::gpu::fill_hash_uniform(p, n, key, 0.01f, compute_);
  }
  void gradient(const models::TensorSpec& t, std::size_t tensor_index, std::uint64_t seed, std::int64_t micro, int rank,
                float scale, bool accumulate, DType round_to, float* out) override {
    // The host generator's form and keys (emulated.hpp); the per-tensor scale as there.
    train::SplitMix64 fixed(train::mix64(seed, 0x9a1eULL, tensor_index));
    train::gpu::GradGen g;
    const std::int64_t n = t.numel();
    g.rows = t.shape.size() >= 2 ? t.shape[0] : 1;
    g.cols = g.rows > 0 ? n / g.rows : 0;
    g.scale = scale * 1e-3f * static_cast<float>(std::exp(3.0 * fixed.uniform() - 1.5));
    g.sig_key = static_cast<std::uint32_t>(train::mix64(seed, 0x5e9ULL, static_cast<std::uint64_t>(micro), tensor_index));
    g.noise_key = train::mix64(seed, 0x4015eULL, static_cast<std::uint64_t>(micro), static_cast<std::uint64_t>(rank),
                               tensor_index);
    g.accumulate = accumulate;
    g.round_to = round_to;
    train::gpu::emulated_gradient(g, out, compute_);
  }

 private:
  cudaStream_t compute_;
};

// optimizer.cpp's formulas as kernels on the compute stream; state per slot, allocated at
// the first step (as the host optimizers).
class CudaOptimizer final : public train::Optimizer {
 public:
  CudaOptimizer(std::string name, const train::OptimizerOptions& o, Stream& compute)
      : name_(std::move(name)), o_(o), compute_(compute) {
    train::check_optimizer_name(name_);
  }
  std::string name() const override { return name_; }
  double bytes_per_param() const override { return name_ == "adam" ? 28 : 20; }
  void step(const std::vector<train::ParamSlot>& slots) override {
    const bool adam = name_ == "adam";
    if (m_.empty()) {
      for (const auto& s : slots) {
        m_.push_back(std::make_unique<CudaArray<DeviceMemory>>(static_cast<std::size_t>(s.count), compute_.get()));
        if (adam)
          v_.push_back(std::make_unique<CudaArray<DeviceMemory>>(static_cast<std::size_t>(s.count), compute_.get()));
      }
    }
    GS_CHECK(m_.size() == slots.size(), "optimizer: slots changed between steps");
    const auto lr = static_cast<float>(o_.lr);
    if (adam) ++t_;
    const auto c1 = static_cast<float>(1.0 / (1.0 - std::pow(o_.beta1, static_cast<double>(t_))));
    const auto c2 = static_cast<float>(1.0 / (1.0 - std::pow(o_.beta2, static_cast<double>(t_))));
    for (std::size_t i = 0; i < slots.size(); ++i) {
      const auto n = static_cast<std::size_t>(slots[i].count);
      if (adam)
        train::gpu::adam_step(slots[i].param, slots[i].grad, m_[i]->data(), v_[i]->data(), n, lr,
                              static_cast<float>(o_.beta1), static_cast<float>(o_.beta2), c1, c2,
                              static_cast<float>(o_.eps), compute_.get());
      else
        train::gpu::sgd_step(slots[i].param, slots[i].grad, m_[i]->data(), n, lr, static_cast<float>(o_.momentum),
                             compute_.get());
    }
    compute_.synchronize();  // optimizer_s measures the GPU's work, as on the host
  }

 private:
  std::string name_;
  train::OptimizerOptions o_;
  Stream& compute_;
  std::vector<std::unique_ptr<Array>> m_, v_;
  std::int64_t t_ = 0;
};

// The compressors' kernels on device memory (compress/bucket_kernels.hpp), on the stream
// the device gives the calling (communication) thread.
class CudaBucketKernels final : public BucketKernels {
 public:
  explicit CudaBucketKernels(std::function<cudaStream_t()> stream) : stream_(std::move(stream)) {}
  ~CudaBucketKernels() override {
    if (blas_) cublasDestroy(blas_);  // no throw from a destructor
  }
  CudaBucketKernels(const CudaBucketKernels&) = delete;
  CudaBucketKernels& operator=(const CudaBucketKernels&) = delete;

  void sign_compress_ef(const float* x, float* last, float* scale, std::size_t n, std::uint8_t* bits) override {
    ++launches_;
    kernels::cuda::sign_compress_ef(x, last, scale, n, bits, sign_scratch_, stream_());
  }
  void sign_decompress(const std::uint8_t* bits, const float* scale, std::size_t n, float* out,
                       bool accumulate) override {
    ++launches_;
    kernels::cuda::sign_decompress(bits, scale, n, out, accumulate, stream_());
  }
  // PowerSGD's products on cuBLAS, laid out by kernels/powersgd_gemm.hpp (tested on the CPU
  // against the CPU kernels). FP32 GEMM (CUBLAS_DEFAULT_MATH: no TF32).
  void powersgd_project(float* a, const float* mem, std::int64_t rows, std::int64_t cols, const float* q, int rank,
                        float* p) override {
    ++launches_;
    if (mem != nullptr) kernels::cuda::add_inplace(a, mem, static_cast<std::size_t>(rows * cols), stream_());
    gemm(kernels::powersgd_p_gemm(a, rows, cols, q, rank, p));
  }
  void orthogonalize(float* p, std::int64_t rows, int rank) override {
    ++launches_;
    kernels::cuda::orthogonalize(p, rows, rank, stream_());
  }
  void powersgd_back_project(const float* a, std::int64_t rows, std::int64_t cols, const float* p, int rank,
                             float* q) override {
    ++launches_;
    gemm(kernels::powersgd_q_gemm(a, rows, cols, p, rank, q));
  }
  void powersgd_expand(float* a, float* mem, std::int64_t rows, std::int64_t cols, const float* p, const float* q,
                       int rank) override {
    ++launches_;
    // D = P Q^T: mem = A - D (a copy of A, then -1 x D added), then A = D.
    if (mem != nullptr) {
      copy(mem, a, static_cast<std::size_t>(rows * cols) * sizeof(float));
      gemm(kernels::powersgd_d_gemm(p, q, rows, cols, rank, -1.f, 1.f, mem));
    }
    gemm(kernels::powersgd_d_gemm(p, q, rows, cols, rank, 1.f, 0.f, a));
  }
  void divide_inplace(float* x, std::size_t n, float d) override {
    ++launches_;
    kernels::cuda::divide_inplace(x, n, d, stream_());
  }
  void average_ef(float* x, float* mem, const float* sum, std::size_t n, float d) override {
    ++launches_;
    kernels::cuda::average_ef(x, mem, sum, n, d, stream_());
  }
  void upload(void* dst, const void* host_src, std::size_t bytes) override {
    // Pageable source: returns once the bytes are staged, so the caller may reuse them.
    if (bytes > 0) GS_CUDA(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_()));
  }
  void cast_to_half(DType t, const float* in, std::uint16_t* out, std::size_t n, float scale) override {
    ++launches_;
    kernels::cuda::cast_to_half(t, in, out, n, scale, stream_());
  }
  void cast_from_half(DType t, const std::uint16_t* in, float* out, std::size_t n, float scale) override {
    ++launches_;
    kernels::cuda::cast_from_half(t, in, out, n, scale, stream_());
  }
  void qsgd_encode(const float* x, std::size_t n, std::size_t block, std::uint32_t levels, kernels::RngKey key,
                   float* norms, std::uint8_t* codes) override {
    ++launches_;
    kernels::cuda::qsgd_norms(x, n, block, norms, stream_());
    kernels::cuda::qsgd_quantize(x, n, block, norms, levels, key, codes, stream_());
  }
  void qsgd_dequantize(const std::uint8_t* codes, const float* norms, std::size_t n, std::size_t block,
                       std::uint32_t levels, float* out, bool accumulate) override {
    ++launches_;
    kernels::cuda::qsgd_dequantize(codes, norms, n, block, levels, out, accumulate, stream_());
  }
  void topk_select(const float* x, std::size_t n, std::size_t k, std::int32_t* idx, float* vals) override {
    ++launches_;
    kernels::cuda::topk_select(x, n, k, idx, vals, topk_scratch_, stream_());
  }
  void scatter_add(const std::int32_t* idx, const float* vals, std::size_t k, float scale, float* out) override {
    ++launches_;
    kernels::cuda::scatter_add(idx, vals, k, scale, out, stream_());
  }
  void add_inplace(float* x, const float* mem, std::size_t n) override {
    ++launches_;
    kernels::cuda::add_inplace(x, mem, n, stream_());
  }
  void scale_inplace(float* x, std::size_t n, float s) override {
    ++launches_;
    kernels::cuda::scale_inplace(x, n, s, stream_());
  }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    if (bytes > 0 && dst != src) GS_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_()));
  }
  void zero(void* dst, std::size_t bytes) override {
    if (bytes > 0) GS_CUDA(cudaMemsetAsync(dst, 0, bytes, stream_()));
  }
  void* scratch(int slot, std::size_t bytes) override {
    DeviceBuffer& b = scratch_[slot];
    b.reserve(bytes);
    return b.get();
  }
  void* state(std::uint64_t owner, int bucket, int slot, std::size_t bytes) override {
    auto [it, fresh] = state_.try_emplace(std::make_tuple(owner, bucket, slot));
    if (fresh) {
      it->second.reserve(bytes);
      GS_CUDA(cudaMemsetAsync(it->second.get(), 0, std::max<std::size_t>(bytes, 1), stream_()));
    }
    GS_CHECK_EQ(it->second.bytes(), bytes, "compressor state ", slot, " of bucket ", bucket, " changed size");
    return it->second.get();
  }
  void fence() override { GS_CUDA(cudaStreamSynchronize(stream_())); }
  const void* ready() override {
    ready_.record(stream_());
    return static_cast<const void*>(ready_.get());  // NcclCommunicator: cudaStreamWaitEvent on it
  }
  std::size_t mark() override {
    if (next_mark_ == marks_.size()) marks_.push_back(std::make_unique<Event>(/*timing=*/true));
    marks_[next_mark_]->record(stream_());
    return next_mark_++;
  }
  double seconds(std::size_t a, std::size_t b) const override {
    GS_CHECK(a < next_mark_ && b < next_mark_, "BucketKernels: no marks ", a, " and ", b);
    return static_cast<double>(Event::elapsed_ms(*marks_[a], *marks_[b])) * 1e-3;
  }
  void clear_marks() override { next_mark_ = 0; }  // the events are recorded again

 private:
  // One column-major GEMM (kernels::GemmCall) on the calling thread's stream, FP32.
  void gemm(const kernels::GemmCall& g) {
    constexpr std::int64_t kMax = std::numeric_limits<int>::max();
    GS_CHECK(g.m <= kMax && g.n <= kMax && g.k <= kMax && g.lda <= kMax && g.ldb <= kMax && g.ldc <= kMax,
             "PowerSGD matrix too large for cuBLAS's 32-bit dimensions: ", g.m, " x ", g.n, " x ", g.k);
    if (g.m == 0 || g.n == 0) return;
    if (!blas_) {  // made by the first caller (the communication thread: its device is current)
      GS_CUBLAS(cublasCreate(&blas_));
      GS_CUBLAS(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));
    }
    GS_CUBLAS(cublasSetStream(blas_, stream_()));
    auto op = [](bool t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; };
    GS_CUBLAS(cublasSgemm(blas_, op(g.trans_a), op(g.trans_b), static_cast<int>(g.m), static_cast<int>(g.n),
                          static_cast<int>(g.k), &g.alpha, g.a, static_cast<int>(g.lda), g.b, static_cast<int>(g.ldb),
                          &g.beta, g.c, static_cast<int>(g.ldc)));
  }

  std::function<cudaStream_t()> stream_;
  cublasHandle_t blas_ = nullptr;
  DeviceBuffer sign_scratch_;
  Event ready_{/*timing=*/false};
  std::vector<std::unique_ptr<Event>> marks_;  // timing events, reused from clear_marks() on
  std::size_t next_mark_ = 0;
  std::map<int, DeviceBuffer> scratch_;
  std::map<std::tuple<std::uint64_t, int, int>, DeviceBuffer> state_;
  DeviceBuffer topk_scratch_;
};

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int local_rank)
      : index_(select_cuda_device(local_rank)), info_(cuda_device_info(index_)), generator_(compute_.get()) {}

  std::string name() const override { return "cuda"; }
  bool host_memory() const override { return false; }
  std::string gpu_name() const override { return info_.name; }
  std::int64_t memory_used_bytes() const override { return static_cast<std::int64_t>(gpu_memory_info().used_bytes()); }

  std::unique_ptr<Array> zeros(std::size_t count) override {
    auto a = std::make_unique<CudaArray<DeviceMemory>>(count, compute_.get());
    compute_.synchronize();
    return a;
  }
  std::unique_ptr<Array> host_mirror(std::size_t count) override {
    return std::make_unique<CudaArray<PinnedMemory>>(count, nullptr);
  }
  // Blocking copies on the calling thread's stream (the compute stream for the training
  // thread, the communication stream for the communication thread).
  void download(const float* src, float* dst, std::size_t count) override {
    copy_to_host(dst, src, count * sizeof(float), stream());
  }
  void upload(const float* src, float* dst, std::size_t count) override {
    copy_to_device(dst, src, count * sizeof(float), stream());
  }
  void set_value(float* x, float v) override {
    pinned_value_.reserve(sizeof(float));
    *pinned_value_.as<float>() = v;
    GS_CUDA(cudaMemcpyAsync(x, pinned_value_.get(), sizeof(float), cudaMemcpyHostToDevice, compute_.get()));
    compute_.synchronize();
  }

  void prepare_buckets(std::size_t nbuckets) override {
    produced_.clear();
    for (std::size_t b = 0; b < nbuckets; ++b) produced_.emplace_back(false);
  }
  void bucket_produced(std::size_t b) override { produced_.at(b).record(compute_.get()); }
  void wait_produced(std::size_t b) override { produced_.at(b).synchronize(); }
  void enter_comm_thread() override {
    GS_CUDA(cudaSetDevice(index_));  // the current device is per host thread
    comm_stream_.emplace();
    comm_thread_.store(std::this_thread::get_id());
  }
  void synchronize() override { compute_.synchronize(); }

  bool unscale_check_finite(float* x, std::size_t n, float inv_scale) override {
    flag_.reserve(sizeof(int));
    flag_host_.reserve(sizeof(int));
    GS_CUDA(cudaMemsetAsync(flag_.get(), 0, sizeof(int), stream()));
    kernels::cuda::unscale_check_finite(x, n, inv_scale, flag_.as<int>(), stream());
    copy_to_host(flag_host_.get(), flag_.get(), sizeof(int), stream());
    return *flag_host_.as<int>() == 0;
  }
  void fill_zero(float* x, std::size_t n) override {
    GS_CUDA(cudaMemsetAsync(x, 0, n * sizeof(float), stream()));
    GS_CUDA(cudaStreamSynchronize(stream()));
  }
  std::unique_ptr<train::Optimizer> make_optimizer(const std::string& name,
                                                   const train::OptimizerOptions& opts) override {
    return std::make_unique<CudaOptimizer>(name, opts, compute_);
  }
  GradientGenerator& generator() override { return generator_; }
  BucketKernels* bucket_kernels() override { return &bucket_kernels_; }
  std::unique_ptr<train::Workload> make_real_workload(const std::string& model, const train::SyntheticDataset& dataset,
                                                      std::int64_t batch, DType precision) override {
    return train::make_gpu_real_workload(model, dataset, batch, precision, compute_.get());
  }
  std::unique_ptr<Communicator> make_communicator(Communicator& host, const std::string& backend) override {
    if (backend != "nccl") return nullptr;  // mpi: every bucket is staged through host memory
    return std::make_unique<NcclCommunicator>(host, index_);
  }

 private:
  cudaStream_t stream() const {
    // Only the communication thread itself sees its id here, and it emplaced the stream first.
    return std::this_thread::get_id() == comm_thread_.load() ? comm_stream_->get() : compute_.get();
  }

  int index_;
  CudaDeviceInfo info_;
  Stream compute_;                    // gradient production, optimizer, training-thread copies
  std::optional<Stream> comm_stream_;  // the communication thread's copies and kernels
  std::atomic<std::thread::id> comm_thread_{};  // set by the communication thread, read by any
  std::vector<Event> produced_;  // per bucket, recorded on compute_
  DeviceBuffer flag_;            // unscale's found-non-finite flag (communication thread)
  PinnedBuffer flag_host_, pinned_value_;
  CudaGenerator generator_;
  CudaBucketKernels bucket_kernels_{[this] { return stream(); }};
};

}  // namespace

std::unique_ptr<Device> make_cuda_device(int local_rank) { return std::make_unique<CudaDevice>(local_rank); }

std::unique_ptr<BucketKernels> make_cuda_bucket_kernels(cudaStream_t stream) {
  return std::make_unique<CudaBucketKernels>([stream] { return stream; });
}

}  // namespace gradsync::device
