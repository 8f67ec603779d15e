// gradsync/compress/qsgd.hpp — "qsgd:levels=S[,bucket=B]": QSGD (Alistarh et al., NeurIPS 2017).
//
// Encoding of n fp32 values, in blocks of B elements (default 512) with their own L2 norm:
//   q_i = norm * sign(x_i) * xi_i / S,  xi_i in {l, l+1}, l = floor(|x_i| / norm * S),
//   P(xi_i = l+1) = |x_i| / norm * S - l           => E[q_i] = x_i (unbiased), and
//   E||Q(x) - x||^2 <= min(n/S^2, sqrt(n)/S) ||x||^2 per block (the paper's Lemma 3.1).
// The random numbers come from a counter-based stream keyed by (seed, rank, step, bucket)
// (kernels/elementwise.hpp), so a run is reproducible and ranks draw independently.
//
// Message (one per rank): [n code bytes: bit 7 sign, bits 0-6 level (S <= 127)] [pad to 4]
// [ceil(n/B) fp32 norms]. Quantised values cannot be summed by an all-reduce, so every rank
// all-gathers all p messages, decodes each and averages: out = (1/p) sum_r decode(msg_r).
// Stats: compressed = message bytes, collective "allgather", wire (p-1) * message.
// No error feedback (the estimator is unbiased, as in the paper).
#pragma once

#include <cstdint>
#include <memory>

#include "compress/bucket_kernels.hpp"
#include "compress/collectives.hpp"
#include "compress/compressor.hpp"
#include "kernels/elementwise.hpp"

namespace gradsync::compress_detail {

class QsgdCompressor final : public Compressor {
 public:
  QsgdCompressor(std::uint32_t levels, std::size_t block, std::uint64_t seed, int rank);
  std::string spec() const override;
  void reduce(Communicator& comm, AllreduceAlgorithm& allreduce, BucketView& bucket, std::int64_t step,
              CompressStats& stats) override;
  bool accepts_device_memory() const override { return true; }  // through bucket.kernels

  // The 1-rank path (benchmarks, tests).
  std::size_t message_bytes(std::size_t n) const;  // a multiple of 4
  kernels::RngKey key(std::int64_t step, int bucket) const;
  void encode(const float* x, std::size_t n, kernels::RngKey key, std::uint8_t* msg) const;
  // out (+)= decoded message.
  void decode(const std::uint8_t* msg, std::size_t n, float* out, bool accumulate) const;

  std::uint32_t levels() const { return levels_; }
  std::size_t block() const { return block_; }

 private:
  std::size_t norms_offset(std::size_t n) const;
  void encode_on(BucketKernels& k, const float* x, std::size_t n, kernels::RngKey key, std::uint8_t* msg) const;
  void decode_on(BucketKernels& k, const std::uint8_t* msg, std::size_t n, float* out, bool accumulate) const;
  std::uint32_t levels_;
  std::size_t block_;
  std::uint64_t seed_;
  int rank_;
  std::unique_ptr<BucketKernels> host_;  // host-memory buckets: CPU kernels, message buffers
  BlockAllgather gather_;
};

}  // namespace gradsync::compress_detail
