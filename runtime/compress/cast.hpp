// gradsync/compress/cast.hpp — the "fp16" and "bf16" compressors: communicate in a half type.
//
// Protocol per bucket of n fp32 gradients on p ranks:
//   encode  h = half(g * (1/p))        one pass; pre-divided so that the partial sums of p
//                                      ranks stay as large as one rank's values (fp16 tops
//                                      out at 65504: summing first overflows at scale)
//   reduce  all-reduce(Sum) of h in the half type with the user's algorithm (--algo);
//           each pairwise sum is rounded to the half type, as NCCL does
//   decode  g = float(sum h)           exact widening: g holds the average
// Stats: compressed = 2n bytes, collective "allreduce", wire from the algorithm used.
// Every memory (accepts_device_memory): encode/decode are the bucket's kernels
// (bucket_kernels.hpp: the CPU's on the host, CUDA's on a GPU) into their scratch, fenced
// before the all-reduce: the same bits on both.
// No spec parameters.
#pragma once

#include <cstdint>
#include <memory>

#include "compress/bucket_kernels.hpp"
#include "compress/compressor.hpp"
#include "core/dtype.hpp"

namespace gradsync::compress_detail {

class CastCompressor final : public Compressor {
 public:
  explicit CastCompressor(DType type);  // DType::F16 or DType::BF16
  std::string spec() const override { return type_ == DType::F16 ? "fp16" : "bf16"; }
  void reduce(Communicator& comm, AllreduceAlgorithm& allreduce, BucketView& bucket, std::int64_t step,
              CompressStats& stats) override;
  bool accepts_device_memory() const override { return true; }

  // The 1-rank path (benchmarks, tests): encode with a pre-scale, decode back to fp32.
  void encode(const float* x, std::size_t n, float prescale, std::uint16_t* out) const;
  void decode(const std::uint16_t* in, std::size_t n, float* out) const;
  DType type() const { return type_; }

 private:
  DType type_;
  std::unique_ptr<BucketKernels> host_;  // host-memory buckets: CPU kernels and the wire buffer
};

}  // namespace gradsync::compress_detail
