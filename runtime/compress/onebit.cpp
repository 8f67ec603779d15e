// gradsync/compress/onebit.cpp — 1-bit Adam's two-phase compressed all-reduce (protocol in
// onebit.hpp).
#include "compress/onebit.hpp"

#include <memory>

#include "compress/collectives.hpp"
#include "core/timer.hpp"
#include "kernels/cpu_kernels.hpp"
#include "plan/compress.hpp"

namespace gradsync::compress_detail {

OnebitCompressor::Layout::Layout(std::size_t n_, int p_) : n(n_), p(p_) {
  GS_CHECK(p_ >= 1, "onebit needs at least one rank");
  const std::size_t per = (n + static_cast<std::size_t>(p) - 1) / static_cast<std::size_t>(p);
  chunk = (per + 31) / 32 * 32;
}

OnebitCompressor::OnebitCompressor() : host_(make_host_bucket_kernels()), owner_(new_state_owner()) {}

void OnebitCompressor::worker_compress(BucketKernels& k, const float* g, const Layout& lay, float* worker_last,
                                       std::uint8_t* signs, float* scales) {
  const std::size_t cb = lay.chunk_bytes();
  for (int j = 0; j < lay.p; ++j) {
    const std::size_t b = lay.begin(j);
    const std::size_t len = lay.length(j);
    std::uint8_t* out = signs + cb * static_cast<std::size_t>(j);
    // x = g + e_w, e_w resolved from the previous x and scale; signs, scale; one pass
    k.sign_compress_ef(g + b, worker_last + b, scales + j, len, out);
    k.zero(out + kernels::sign_bytes(len), cb - kernels::sign_bytes(len));  // a short chunk's padding
  }
}

void OnebitCompressor::server_average(BucketKernels& k, const std::uint8_t* recv_signs, const float* recv_scales,
                                      std::size_t scale_stride, const Layout& lay, int r, float* work) {
  const std::size_t len = lay.length(r);
  const std::size_t cb = lay.chunk_bytes();
  for (int i = 0; i < lay.p; ++i) {
    const auto ui = static_cast<std::size_t>(i);
    k.sign_decompress(recv_signs + cb * ui, recv_scales + scale_stride * ui, len, work, i > 0);
  }
  k.scale_inplace(work, len, 1.f / static_cast<float>(lay.p));
}

void OnebitCompressor::server_compress(BucketKernels& k, const float* work, const Layout& lay, int r,
                                       float* server_last, float* scale, std::uint8_t* out_signs) {
  const std::size_t len = lay.length(r);
  k.zero(out_signs + kernels::sign_bytes(len), lay.chunk_bytes() - kernels::sign_bytes(len));
  k.sign_compress_ef(work, server_last, scale, len, out_signs);  // y = work + e_s; one pass
}

void OnebitCompressor::decode_chunk(BucketKernels& k, const std::uint8_t* signs, const float* scale, const Layout& lay,
                                    int j, float* out) {
  k.sign_decompress(signs, scale, lay.length(j), out + lay.begin(j), false);
}

void OnebitCompressor::reduce(Communicator& comm, AllreduceAlgorithm& allreduce, BucketView& bucket,
                              std::int64_t /*step*/, CompressStats& stats) {
  const std::size_t n = bucket.count;
  const int p = comm.size();
  const int r = comm.rank();
  const Layout lay(n, p);
  const std::size_t cb = lay.chunk_bytes();
  const auto up = static_cast<std::size_t>(p);
  const std::size_t server_bytes = cb + sizeof(float);  // [signs][scale]; cb is a multiple of 4
  // One path for every memory: the bucket's device kernels, or the host ones. Messages,
  // scales and memories all live in that memory.
  BucketKernels& k = bucket.kernels_or(*host_);
  auto* send_signs = static_cast<std::uint8_t*>(k.scratch(0, cb * up));
  auto* recv_signs = static_cast<std::uint8_t*>(k.scratch(1, cb * up));
  auto* all_scales = static_cast<float*>(k.scratch(2, up * up * sizeof(float)));  // row i: rank i's p scales
  auto* work = static_cast<float*>(k.scratch(3, lay.chunk * sizeof(float)));
  auto* server_msg = static_cast<std::uint8_t*>(k.scratch(4, server_bytes));
  auto* all_server = static_cast<std::uint8_t*>(k.scratch(5, server_bytes * up));

  // 1. worker (on a device each collective follows the kernels before it: no host wait)
  k.clear_marks();
  const std::size_t t0 = k.mark();
  const SignMemory::View worker = SignMemory::memory(k, owner_, bucket.index, 0, n, up);
  worker_compress(k, bucket.data, lay, worker.last, send_signs, worker.scales);  // bucket.data only read
  const std::size_t t1 = k.mark();
  if (cb > 0) alltoall_bytes(comm, k, send_signs, recv_signs, cb);
  gather_.run(comm, allreduce, bucket, k, worker.scales, all_scales, up, DType::F32);

  // 2. server of chunk r: decode + average (decode time), compress (encode time)
  const std::size_t t2 = k.mark();
  server_average(k, recv_signs, all_scales + r, up, lay, r, work);  // rank i's scale of chunk r: all_scales[i p + r]
  const std::size_t t3 = k.mark();
  const SignMemory::View server = SignMemory::memory(k, owner_, bucket.index, 2, lay.length(r), 1);
  server_compress(k, work, lay, r, server.last, server.scales, server_msg);
  k.copy(server_msg + cb, server.scales, sizeof(float));
  const std::size_t t4 = k.mark();
  gather_.bytes(comm, allreduce, bucket, k, server_msg, all_server, server_bytes);

  // 3. decode every chunk
  const std::size_t t5 = k.mark();
  for (int j = 0; j < p; ++j) {
    const std::uint8_t* msg = all_server + server_bytes * static_cast<std::size_t>(j);
    decode_chunk(k, msg, reinterpret_cast<const float*>(msg + cb), lay, j, bucket.data);
  }
  const std::size_t t6 = k.mark();
  k.fence();

  stats.uncompressed_bytes += static_cast<std::uint64_t>(n) * 4;
  stats.compressed_bytes += cb * up + 4 * up + server_bytes;
  stats.wire_bytes +=
      alltoall_wire_bytes(cb, p) + allgather_wire_bytes(4 * up, p) + allgather_wire_bytes(server_bytes, p);
  stats.encode_s += k.seconds(t0, t1) + k.seconds(t3, t4);
  stats.decode_s += k.seconds(t2, t3) + k.seconds(t5, t6);
  if (stats.collective.empty()) stats.collective = "alltoall+allgather";
}

std::unique_ptr<Compressor> make_onebit(const plan::CompressorSpec& /*spec*/, std::uint64_t /*seed*/, int /*rank*/) {
  return std::make_unique<OnebitCompressor>();
}

}  // namespace gradsync::compress_detail
