// gradsync/compress/topk.hpp — "topk:ratio=F": top-k sparsification with error feedback
// (Aji & Heafield 2017; Stich et al. 2018).
//
// Per bucket of n values on p ranks, k = max(1, ceil(F * n)):
//   x = g + memory                         error feedback in
//   keep the k largest |x_i| (exactly k; ties at the threshold in index order)
//   memory = x - sparse(x)                 i.e. x with the kept entries zeroed (exact)
//   all-gather [k int32 indices][k fp32 values] from every rank
//   out = (1/p) sum_r scatter(idx_r, vals_r)
// Stats: compressed = 8k bytes, collective "allgather", wire (p-1) * 8k.
#pragma once

#include <cstdint>
#include <memory>

#include "compress/bucket_kernels.hpp"
#include "compress/collectives.hpp"
#include "compress/compressor.hpp"

namespace gradsync::compress_detail {

class TopkCompressor final : public Compressor {
 public:
  explicit TopkCompressor(double ratio);
  std::string spec() const override;
  void reduce(Communicator& comm, AllreduceAlgorithm& allreduce, BucketView& bucket, std::int64_t step,
              CompressStats& stats) override;

  static std::size_t k_for(double ratio, std::size_t n);
  std::size_t k(std::size_t n) const { return k_for(ratio_, n); }
  // The 1-rank path (benchmarks, tests). encode: x += memory (in place), select, and
  // memory = x - sparse(x); writes k indices (increasing) and values.
  static void encode(float* x, std::size_t n, std::size_t k, float* memory, std::int32_t* idx, float* vals);
  // out += scale * scatter(idx, vals)
  static void decode(const std::int32_t* idx, const float* vals, std::size_t k, float scale, float* out);
  bool accepts_device_memory() const override { return true; }  // through bucket.kernels

 private:
  // encode with the kernels of x's memory (BucketKernels::topk_encode_ef: one fused pass
  // on the host): memory = x - sparse(x) exactly (memory is set to x, then the selected
  // values are subtracted: x - x = +0).
  static void encode_on(BucketKernels& kern, float* x, std::size_t n, std::size_t k, float* memory, std::int32_t* idx,
                        float* vals);
  double ratio_;
  // Host-memory buckets: CPU kernels, the messages ([k idx][k vals as bits]) and the
  // error-feedback memory per bucket (state slot 0); device buckets keep theirs in
  // bucket.kernels.
  std::unique_ptr<BucketKernels> host_;
  std::uint64_t owner_ = new_state_owner();  // its error-feedback memory in any BucketKernels
  BlockAllgather gather_;
};

}  // namespace gradsync::compress_detail
