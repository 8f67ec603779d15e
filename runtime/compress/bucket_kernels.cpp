// gradsync/compress/bucket_kernels.cpp — the host BucketKernels (see bucket_kernels.hpp).
#include "compress/bucket_kernels.hpp"

#include <atomic>
#include <cstring>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "compress/powersgd.hpp"
#include "core/error.hpp"
#include "core/timer.hpp"
#include "kernels/cpu_kernels.hpp"

namespace gradsync {

namespace {

class HostBucketKernels final : public BucketKernels {
 public:
  void cast_to_half(DType t, const float* in, std::uint16_t* out, std::size_t n, float scale) override {
    ++launches_;
    kernels::cast_to_half(t, in, out, n, scale);
  }
  void cast_from_half(DType t, const std::uint16_t* in, float* out, std::size_t n, float scale) override {
    ++launches_;
    kernels::cast_from_half(t, in, out, n, scale);
  }
  void qsgd_encode(const float* x, std::size_t n, std::size_t block, std::uint32_t levels, kernels::RngKey key,
                   float* norms, std::uint8_t* codes) override {
    ++launches_;
    kernels::qsgd_encode(x, n, block, levels, key, norms, codes);
  }
  void qsgd_dequantize(const std::uint8_t* codes, const float* norms, std::size_t n, std::size_t block,
                       std::uint32_t levels, float* out, bool accumulate) override {
    ++launches_;
    kernels::qsgd_dequantize(codes, norms, n, block, levels, out, accumulate);
  }
  void topk_select(const float* x, std::size_t n, std::size_t k, std::int32_t* idx, float* vals) override {
    ++launches_;
    kernels::topk_select(x, n, k, idx, vals);
  }
  void scatter_add(const std::int32_t* idx, const float* vals, std::size_t k, float scale, float* out) override {
    ++launches_;
    kernels::scatter_add(idx, vals, k, scale, out);
  }
  void topk_encode_ef(float* x, std::size_t n, std::size_t k, float* memory, std::int32_t* idx,
                      float* vals) override {
    ++launches_;
    kernels::topk_encode_ef(x, memory, n, k, idx, vals);
  }
  void sign_compress_ef(const float* x, float* last, float* scale, std::size_t n, std::uint8_t* bits) override {
    ++launches_;
    *scale = kernels::sign_compress_ef(x, last, *scale, n, bits);
  }
  void sign_decompress(const std::uint8_t* bits, const float* scale, std::size_t n, float* out,
                       bool accumulate) override {
    ++launches_;
    kernels::sign_decompress(bits, *scale, n, out, accumulate);
  }
  void powersgd_project(float* a, const float* mem, std::int64_t rows, std::int64_t cols, const float* q, int rank,
                        float* p) override {
    ++launches_;
    kernels::powersgd_project(a, mem, rows, cols, q, rank, p);
  }
  void orthogonalize(float* p, std::int64_t rows, int rank) override {
    ++launches_;
    compress_detail::PowerSgdCompressor::orthogonalize(p, rows, rank);
  }
  void powersgd_back_project(const float* a, std::int64_t rows, std::int64_t cols, const float* p, int rank,
                             float* q) override {
    ++launches_;
    kernels::powersgd_back_project(a, rows, cols, p, rank, q);
  }
  void powersgd_expand(float* a, float* mem, std::int64_t rows, std::int64_t cols, const float* p, const float* q,
                       int rank) override {
    ++launches_;
    kernels::powersgd_expand(a, mem, rows, cols, p, q, rank);
  }
  void divide_inplace(float* x, std::size_t n, float d) override {
    ++launches_;
    for (std::size_t i = 0; i < n; ++i) x[i] /= d;
  }
  void average_ef(float* x, float* mem, const float* sum, std::size_t n, float d) override {
    ++launches_;
    for (std::size_t i = 0; i < n; ++i) {
      const float avg = sum[i] / d;
      if (mem != nullptr) mem[i] = kernels::ef_residual(x[i], avg);
      x[i] = avg;
    }
  }
  void upload(void* dst, const void* host_src, std::size_t bytes) override { copy(dst, host_src, bytes); }
  void add_inplace(float* x, const float* mem, std::size_t n) override {
    ++launches_;
    kernels::add_inplace(x, mem, n);
  }
  void scale_inplace(float* x, std::size_t n, float s) override {
    ++launches_;
    kernels::scale_inplace(x, n, s);
  }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    if (bytes > 0 && dst != src) std::memmove(dst, src, bytes);
  }
  void zero(void* dst, std::size_t bytes) override {
    if (bytes > 0) std::memset(dst, 0, bytes);
  }
  void* scratch(int slot, std::size_t bytes) override {
    auto& v = scratch_[slot];
    if (v.size() * sizeof(std::uint64_t) < bytes) v.assign((bytes + 7) / 8, 0);
    return v.data();
  }
  void* state(std::uint64_t owner, int bucket, int slot, std::size_t bytes) override {
    auto [it, fresh] = state_.try_emplace(std::make_tuple(owner, bucket, slot));
    if (fresh) it->second.assign((bytes + 7) / 8, 0);
    GS_CHECK_EQ(it->second.size(), (bytes + 7) / 8, "compressor state ", slot, " of bucket ", bucket, " changed size");
    return it->second.data();
  }
  void fence() override {}

 private:
  // 8-byte aligned regions.
  std::map<int, std::vector<std::uint64_t>> scratch_;
  std::map<std::tuple<std::uint64_t, int, int>, std::vector<std::uint64_t>> state_;
};

}  // namespace

void BucketKernels::topk_encode_ef(float* x, std::size_t n, std::size_t k, float* memory, std::int32_t* idx,
                                   float* vals) {
  add_inplace(x, memory, n);
  topk_select(x, n, k, idx, vals);
  copy(memory, x, n * sizeof(float));
  scatter_add(idx, vals, k, -1.f, memory);  // memory[idx] = x[idx] - x[idx] = 0: x - sparse(x)
}

std::size_t BucketKernels::mark() {
  host_marks_.push_back(now_s());
  return host_marks_.size() - 1;
}

double BucketKernels::seconds(std::size_t a, std::size_t b) const {
  GS_CHECK(a < host_marks_.size() && b < host_marks_.size(), "BucketKernels: no marks ", a, " and ", b);
  return host_marks_[b] - host_marks_[a];
}

void BucketKernels::clear_marks() { host_marks_.clear(); }

std::unique_ptr<BucketKernels> make_host_bucket_kernels() { return std::make_unique<HostBucketKernels>(); }

std::uint64_t new_state_owner() {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1);
}

}  // namespace gradsync
