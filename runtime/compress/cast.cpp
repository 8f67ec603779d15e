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
  BucketKernels& k = bucket.kernels_or(*host_);
  auto* wire = static_cast<std::uint16_t*>(k.scratch(0, n * sizeof(std::uint16_t)));

  k.clear_marks();
  const std::size_t t0 = k.mark();
  k.cast_to_half(type_, bucket.data, wire, n, prescale);
  const std::size_t t1 = k.mark();
  allreduce_after(comm, allreduce, k, wire, n, type_, RedOp::Sum);  // follows the cast on a device
  const std::size_t t2 = k.mark();
  k.cast_from_half(type_, wire, bucket.data, n, 1.f);
  const std::size_t t3 = k.mark();
  k.fence();

  const std::uint64_t half_bytes = static_cast<std::uint64_t>(n) * 2;
  stats.uncompressed_bytes += static_cast<std::uint64_t>(n) * 4;
  stats.compressed_bytes += half_bytes;
  stats.wire_bytes += allreduce_wire_bytes(allreduce, half_bytes, p);
  stats.encode_s += k.seconds(t0, t1);
  stats.decode_s += k.seconds(t2, t3);
  if (stats.collective.empty()) stats.collective = "allreduce";
}

std::unique_ptr<Compressor> make_fp16(const plan::CompressorSpec& /*spec*/, std::uint64_t /*seed*/, int /*rank*/) {
  return std::make_unique<CastCompressor>(DType::F16);
}

std::unique_ptr<Compressor> make_bf16(const plan::CompressorSpec& /*spec*/, std::uint64_t /*seed*/, int /*rank*/) {
  return std::make_unique<CastCompressor>(DType::BF16);
}

}  // namespace gradsync::compress_detail
