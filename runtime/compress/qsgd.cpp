// gradsync/compress/qsgd.cpp — QSGD stochastic quantisation (protocol in qsgd.hpp).
#include "compress/qsgd.hpp"

#include <cstring>
#include <memory>

#include "compress/collectives.hpp"
#include "core/spec.hpp"
#include "core/timer.hpp"
#include "kernels/cpu_kernels.hpp"
#include "plan/compress.hpp"

namespace gradsync::compress_detail {

QsgdCompressor::QsgdCompressor(std::uint32_t levels, std::size_t block, std::uint64_t seed, int rank)
    : levels_(levels), block_(block), seed_(seed), rank_(rank), host_(make_host_bucket_kernels()) {
  GS_CHECK(levels >= 1 && levels <= kernels::kQsgdMaxLevels && block >= 1, "bad QSGD configuration");
}

std::string QsgdCompressor::spec() const {
  Spec s{"qsgd", {{"levels", std::to_string(levels_)}, {"bucket", std::to_string(block_)}}};
  return s.str();
}

std::size_t QsgdCompressor::norms_offset(std::size_t n) const { return pad4(n); }

std::size_t QsgdCompressor::message_bytes(std::size_t n) const {
  return norms_offset(n) + kernels::qsgd_num_blocks(n, block_) * sizeof(float);
}

kernels::RngKey QsgdCompressor::key(std::int64_t step, int bucket) const {
  return kernels::rng_key(seed_, static_cast<std::uint64_t>(rank_), static_cast<std::uint64_t>(step),
                          static_cast<std::uint64_t>(bucket));
}

void QsgdCompressor::encode_on(BucketKernels& k, const float* x, std::size_t n, kernels::RngKey key,
                               std::uint8_t* msg) const {
  float* norms = reinterpret_cast<float*>(msg + norms_offset(n));
  k.qsgd_encode(x, n, block_, levels_, key, norms, msg);
  k.zero(msg + n, norms_offset(n) - n);  // padding: deterministic bytes on the wire
}

void QsgdCompressor::decode_on(BucketKernels& k, const std::uint8_t* msg, std::size_t n, float* out,
                               bool accumulate) const {
  const float* norms = reinterpret_cast<const float*>(msg + norms_offset(n));
  k.qsgd_dequantize(msg, norms, n, block_, levels_, out, accumulate);
}

void QsgdCompressor::encode(const float* x, std::size_t n, kernels::RngKey k, std::uint8_t* msg) const {
  encode_on(*host_, x, n, k, msg);
}

void QsgdCompressor::decode(const std::uint8_t* msg, std::size_t n, float* out, bool accumulate) const {
  decode_on(*host_, msg, n, out, accumulate);
}

void QsgdCompressor::reduce(Communicator& comm, AllreduceAlgorithm& allreduce, BucketView& bucket,
                            std::int64_t step, CompressStats& stats) {
  const std::size_t n = bucket.count;
  const int p = comm.size();
  const std::size_t mb = message_bytes(n);
  // One path for every memory: the bucket's device kernels, or the host ones.
  BucketKernels& k = bucket.kernels_or(*host_);
  auto* mine = static_cast<std::uint8_t*>(k.scratch(0, mb));
  auto* all = static_cast<std::uint8_t*>(k.scratch(1, mb * static_cast<std::size_t>(p)));

  k.clear_marks();
  const std::size_t t0 = k.mark();
  encode_on(k, bucket.data, n, key(step, bucket.index), mine);
  const std::size_t t1 = k.mark();
  if (mb > 0) gather_.bytes(comm, allreduce, bucket, k, mine, all, mb);
  const std::size_t t2 = k.mark();
  for (int r = 0; r < p; ++r) decode_on(k, all + static_cast<std::size_t>(r) * mb, n, bucket.data, r > 0);
  k.scale_inplace(bucket.data, n, 1.f / static_cast<float>(p));
  const std::size_t t3 = k.mark();
  k.fence();

  stats.uncompressed_bytes += static_cast<std::uint64_t>(n) * 4;
  stats.compressed_bytes += mb;
  stats.wire_bytes += allgather_wire_bytes(mb, p);
  stats.encode_s += k.seconds(t0, t1);
  stats.decode_s += k.seconds(t2, t3);
  if (stats.collective.empty()) stats.collective = "allgather";
}

std::unique_ptr<Compressor> make_qsgd(const plan::CompressorSpec& spec, std::uint64_t seed, int rank) {
  // Validated by plan::parse_compressor, whose level bound is the kernels' code format.
  static_assert(plan::kQsgdMaxLevels == static_cast<int>(kernels::kQsgdMaxLevels));
  return std::make_unique<QsgdCompressor>(static_cast<std::uint32_t>(spec.qsgd_levels),
                                          static_cast<std::size_t>(spec.qsgd_bucket), seed, rank);
}

}  // namespace gradsync::compress_detail
