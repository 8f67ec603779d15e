// gradsync/compress/bucket_kernels.hpp — the kernels a compressor runs on a bucket that
// lives outside host memory (device/device.hpp), and the scratch memory they write.
//
// A BucketView with kernels == nullptr is host memory: compressors use their own host
// BucketKernels (make_host_bucket_kernels: the CPU kernels of kernels/cpu_kernels.hpp). A
// bucket reduced in place on a device (Compressor::accepts_device_memory) carries the
// device's BucketKernels: the same operations on device memory (cuda:
// kernels/cuda_kernels.hpp and cuBLAS on the communication thread's stream). Ordering:
// kernels are asynchronous on the device; a collective is handed ready()'s event (the
// NCCL communicator's stream waits for it) and returns once complete, and the compressor
// fence()s once at the end of the bucket. The host implementation is the same interface,
// so the device-dispatch path of every compressor is exercised by host tests
// (tests/train/test_device_reducer_mpi.cpp, the event hand-off included).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.hpp"
#include "kernels/elementwise.hpp"

namespace gradsync {

class BucketKernels {
 public:
  virtual ~BucketKernels() = default;
  // out[i] = half(in[i] * scale)  (t = F16 or BF16); as kernels::cast_to_half.
  virtual void cast_to_half(DType t, const float* in, std::uint16_t* out, std::size_t n, float scale) = 0;
  // out[i] = float(in[i]) * scale; as kernels::cast_from_half.
  virtual void cast_from_half(DType t, const std::uint16_t* in, float* out, std::size_t n, float scale) = 0;
  // QSGD (kernels::qsgd_encode / qsgd_dequantize): norms per block, then one code per element.
  virtual void qsgd_encode(const float* x, std::size_t n, std::size_t block, std::uint32_t levels,
                           kernels::RngKey key, float* norms, std::uint8_t* codes) = 0;
  virtual void qsgd_dequantize(const std::uint8_t* codes, const float* norms, std::size_t n, std::size_t block,
                               std::uint32_t levels, float* out, bool accumulate) = 0;
  // Top-k: the k largest |x| (indices increasing), and out[idx[j]] += vals[j] * scale.
  virtual void topk_select(const float* x, std::size_t n, std::size_t k, std::int32_t* idx, float* vals) = 0;
  virtual void scatter_add(const std::int32_t* idx, const float* vals, std::size_t k, float scale, float* out) = 0;
  // Top-k with error feedback (kernels::topk_encode_ef): x += memory; idx/vals = top-k of x;
  // memory = x - sparse(x). This default is that composition of the operations above
  // (add_inplace, topk_select, copy, scatter_add of -1); the host overrides it with the
  // fused one-pass kernel, which gives the same bits.
  virtual void topk_encode_ef(float* x, std::size_t n, std::size_t k, float* memory, std::int32_t* idx, float* vals);
  // 1-bit (kernels::sign_compress_ef / sign_decompress), the scales in the bucket's memory
  // kind (they travel with the signs): r = x + sign_residual(last, *scale), last = r, bits
  // of r, *scale = ||r|| / sqrt(n) (x only read; x and last do not overlap).
  virtual void sign_compress_ef(const float* x, float* last, float* scale, std::size_t n, std::uint8_t* bits) = 0;
  // out[i] (+)= sign_decode(bit i, *scale).
  virtual void sign_decompress(const std::uint8_t* bits, const float* scale, std::size_t n, float* out,
                               bool accumulate) = 0;
  // PowerSGD on one row-major rows x cols matrix a, P (rows x rank) and Q (cols x rank)
  // column-major (kernels::powersgd_*): a += mem (when given) and p = a q; Gram-Schmidt on
  // p's columns (a zero column stays zero); q = a^T p; d = p q^T with mem = a - d (when
  // given) and a = d. Host: the fixed-order CPU kernels; cuda: cuBLAS products.
  virtual void powersgd_project(float* a, const float* mem, std::int64_t rows, std::int64_t cols, const float* q,
                                int rank, float* p) = 0;
  virtual void orthogonalize(float* p, std::int64_t rows, int rank) = 0;
  virtual void powersgd_back_project(const float* a, std::int64_t rows, std::int64_t cols, const float* p, int rank,
                                     float* q) = 0;
  virtual void powersgd_expand(float* a, float* mem, std::int64_t rows, std::int64_t cols, const float* p,
                               const float* q, int rank) = 0;
  // x += mem; x *= s; x /= d (a division, as torch's div_); byte copies and zeroing within
  // the bucket's memory kind.
  virtual void add_inplace(float* x, const float* mem, std::size_t n) = 0;
  virtual void scale_inplace(float* x, std::size_t n, float s) = 0;
  virtual void divide_inplace(float* x, std::size_t n, float d) = 0;
  // The average of a sum with error feedback: a = sum[i] / d; mem[i] = ef_residual(x[i], a)
  // when mem is given; x[i] = a.
  virtual void average_ef(float* x, float* mem, const float* sum, std::size_t n, float d) = 0;
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void zero(void* dst, std::size_t bytes) = 0;
  // Host memory into the bucket's memory kind (the host may reuse `host_src` on return).
  virtual void upload(void* dst, const void* host_src, std::size_t bytes) = 0;

  // At least `bytes` of the bucket's memory kind, owned by this object, one region per
  // `slot` (contents are lost when it grows). Used by one thread at a time.
  virtual void* scratch(int slot, std::size_t bytes) = 0;
  // State that lives across steps (error-feedback memory): `bytes` per (owner, bucket,
  // slot), zero when first asked for; a different size for a known key is an error. The
  // owner (new_state_owner(), one per compressor object, never reused) keeps compressors
  // sharing one device from sharing state; a finished owner's state stays until this
  // object goes.
  virtual void* state(std::uint64_t owner, int bucket, int slot, std::size_t bytes) = 0;
  // Completes every kernel launched so far.
  virtual void fence() = 0;

  // ---- ordering and timing without waiting on the host -----------------------------------
  // An event that follows every kernel launched so far, for a communicator's i* call
  // (Communicator::iallreduce's `after`; cuda: a cudaEvent_t recorded on the stream, valid
  // until the next ready()), so a collective follows the encode on the device while the
  // host goes on; null when the kernels have completed (host).
  virtual const void* ready() { return nullptr; }
  // Marks in the kernels' timeline, for encode/decode times: mark() notes the point the
  // launched kernels have reached (host: the clock; cuda: a timing event); seconds(a, b) is
  // the time from mark a to mark b once both have passed (after fence()); clear_marks()
  // recycles them (a compressor's reduce() starts with it).
  virtual std::size_t mark();
  virtual double seconds(std::size_t a, std::size_t b) const;
  virtual void clear_marks();
  // Calls so far (tests: the device path was taken). Atomic: PowerSGD's threads=T calls
  // the host kernels from T threads at once.
  std::int64_t launches() const { return launches_.load(); }

 protected:
  std::atomic<std::int64_t> launches_{0};

 private:
  std::vector<double> host_marks_;  // the default marks: now_s() at each
};

std::unique_ptr<BucketKernels> make_host_bucket_kernels();
// A process-wide unique owner id for BucketKernels::state (thread-safe).
std::uint64_t new_state_owner();

}  // namespace gradsync
