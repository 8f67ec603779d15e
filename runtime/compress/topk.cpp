// gradsync/compress/topk.cpp — top-k sparsification with error feedback (protocol in topk.hpp).
#include "compress/topk.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <sstream>

#include "compress/collectives.hpp"
#include "core/spec.hpp"
#include "core/timer.hpp"
#include "kernels/cpu_kernels.hpp"
#include "plan/compress.hpp"

namespace gradsync::compress_detail {

TopkCompressor::TopkCompressor(double ratio) : ratio_(ratio), host_(make_host_bucket_kernels()) {
  GS_CHECK(ratio > 0 && ratio <= 1, "top-k ratio must be in (0, 1]");
}

std::string TopkCompressor::spec() const {
  std::ostringstream os;
  os << ratio_;
  return Spec{"topk", {{"ratio", os.str()}}}.str();
}

std::size_t TopkCompressor::k_for(double ratio, std::size_t n) {
  if (n == 0) return 0;
  // ceil(F * n), with a relative slack so that e.g. 0.01 * 300 = 3.0000000000000004 gives 3.
  const double want = ratio * static_cast<double>(n);
  const auto k = static_cast<std::size_t>(std::ceil(want * (1 - 1e-12)));
  return std::clamp<std::size_t>(k, 1, n);
}

void TopkCompressor::encode_on(BucketKernels& kern, float* x, std::size_t n, std::size_t k, float* memory,
                               std::int32_t* idx, float* vals) {
  kern.topk_encode_ef(x, n, k, memory, idx, vals);
}

void TopkCompressor::encode(float* x, std::size_t n, std::size_t k, float* memory, std::int32_t* idx, float* vals) {
  encode_on(*make_host_bucket_kernels(), x, n, k, memory, idx, vals);
}

void TopkCompressor::decode(const std::int32_t* idx, const float* vals, std::size_t k, float scale, float* out) {
  kernels::scatter_add(idx, vals, k, scale, out);
}

void TopkCompressor::reduce(Communicator& comm, AllreduceAlgorithm& allreduce, BucketView& bucket,
                            std::int64_t /*step*/, CompressStats& stats) {
  const std::size_t n = bucket.count;
  const int p = comm.size();
  const std::size_t kk = k(n);
  const std::size_t words = 2 * kk;  // k int32 indices, then k fp32 values (same size)
  // One path for every memory: the bucket's device kernels, or the host ones.
  BucketKernels& kern = bucket.kernels_or(*host_);
  auto* mine = static_cast<std::int32_t*>(kern.scratch(0, words * 4));
  auto* all = static_cast<std::int32_t*>(kern.scratch(1, words * 4 * static_cast<std::size_t>(p)));
  auto* memory = static_cast<float*>(kern.state(owner_, bucket.index, 0, n * sizeof(float)));
  float* vals = reinterpret_cast<float*>(mine + kk);

  kern.clear_marks();
  const std::size_t t0 = kern.mark();
  encode_on(kern, bucket.data, n, kk, memory, mine, vals);
  const std::size_t t1 = kern.mark();
  if (words > 0) gather_.bytes(comm, allreduce, bucket, kern, mine, all, words * 4);
  const std::size_t t2 = kern.mark();
  kern.zero(bucket.data, n * sizeof(float));
  const float inv_p = 1.f / static_cast<float>(p);
  for (int r = 0; r < p; ++r) {
    const std::int32_t* block = all + static_cast<std::size_t>(r) * words;
    kern.scatter_add(block, reinterpret_cast<const float*>(block + kk), kk, inv_p, bucket.data);
  }
  const std::size_t t3 = kern.mark();
  kern.fence();

  stats.uncompressed_bytes += static_cast<std::uint64_t>(n) * 4;
  stats.compressed_bytes += words * 4;
  stats.wire_bytes += allgather_wire_bytes(words * 4, p);
  stats.encode_s += kern.seconds(t0, t1);
  stats.decode_s += kern.seconds(t2, t3);
  if (stats.collective.empty()) stats.collective = "allgather";
}

std::unique_ptr<Compressor> make_topk(const plan::CompressorSpec& spec, std::uint64_t /*seed*/, int /*rank*/) {
  return std::make_unique<TopkCompressor>(spec.topk_ratio);  // validated by plan::parse_compressor
}

}  // namespace gradsync::compress_detail
