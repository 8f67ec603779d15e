// gradsync/compress/cast.cpp — fp16 / bf16 communication casts (protocol in cast.hpp).
#include "compress/cast.hpp"

#include <memory>

#include "compress/bucket_kernels.hpp"
#include "compress/collectives.hpp"
#include "core/timer.hpp"
#include "kernels/cpu_kernels.hpp"
#include "plan/compress.hpp"

namespace gradsync::compress_detail {

CastCompressor::CastCompressor(DType type) : type_(type), host_(make_host_bucket_kernels()) {
  GS_CHECK(type == DType::F16 || type == DType::BF16, "cast compressor needs half or bfloat16");
}

void CastCompressor::encode(const float* x, std::size_t n, float prescale, std::uint16_t* out) const {
  kernels::cast_to_half(type_, x, out, n, prescale);
}

void CastCompressor::decode(const std::uint16_t* in, std::size_t n, float* out) const {
  kernels::cast_from_half(type_, in, out, n, 1.f);
}

void CastCompressor::reduce(Communicator& comm, AllreduceAlgorithm& allreduce, BucketView& bucket,
                            std::int64_t /*step*/, CompressStats& stats) {
  const std::size_t n = bucket.count;
  const int p = comm.size();
  const float prescale = 1.f / static_cast<float>(p);
  // One path for every memory: the bucket's device kernels, or the host ones.
  BucketKernels& k = bucket.kernels ? *bucket.kernels : *host_;
  auto* wire = static_cast<std::uint16_t*>(k.scratch(0, n * sizeof(std::uint16_t)));

  const double t0 = now_s();
  k.cast_to_half(type_, bucket.data, wire, n, prescale);
  k.fence();
  const double t1 = now_s();
  if (n > 0) allreduce.run(wire, wire, n, type_, RedOp::Sum);
  const double t2 = now_s();
  k.cast_from_half(type_, wire, bucket.data, n, 1.f);
  k.fence();
  const double t3 = now_s();

  const std::uint64_t half_bytes = static_cast<std::uint64_t>(n) * 2;
  stats.uncompressed_bytes += static_cast<std::uint64_t>(n) * 4;
  stats.compressed_bytes += half_bytes;
  stats.wire_bytes += allreduce_wire_bytes(allreduce, half_bytes, p);
  stats.encode_s += t1 - t0;
  stats.decode_s += t3 - t2;
  if (stats.collective.empty()) stats.collective = "allreduce";
}

std::unique_ptr<Compressor> make_fp16(const plan::CompressorSpec& /*spec*/, std::uint64_t /*seed*/, int /*rank*/) {
  return std::make_unique<CastCompressor>(DType::F16);
}

std::unique_ptr<Compressor> make_bf16(const plan::CompressorSpec& /*spec*/, std::uint64_t /*seed*/, int /*rank*/) {
  return std::make_unique<CastCompressor>(DType::BF16);
}

}  // namespace gradsync::compress_detail
