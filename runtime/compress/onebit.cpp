// gradsync/compress/onebit.cpp — 1-bit Adam's two-phase compressed all-reduce (protocol in
// onebit.hpp).
#include "compress/onebit.hpp"

#include <cstring>
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

void OnebitCompressor::worker_compress(const float* g, const Layout& lay, float* worker_last, std::uint8_t* signs,
                                       float* scales) {
  const std::size_t cb = lay.chunk_bytes();
  for (int j = 0; j < lay.p; ++j) {
    const std::size_t b = lay.begin(j);
    const std::size_t len = lay.length(j);
    std::uint8_t* out = signs + cb * static_cast<std::size_t>(j);
    // x = g + e_w, e_w resolved from the previous x and scale; signs, scale; one pass
    scales[j] = kernels::sign_compress_ef(g + b, worker_last + b, scales[j], len, out);
    std::memset(out + kernels::sign_bytes(len), 0, cb - kernels::sign_bytes(len));  // a short chunk's padding
  }
}

void OnebitCompressor::server_average(const std::uint8_t* recv_signs, const float* recv_scales, const Layout& lay,
                                      int r, float* work) {
  const std::size_t len = lay.length(r);
  const std::size_t cb = lay.chunk_bytes();
  for (int i = 0; i < lay.p; ++i)
    kernels::sign_decompress(recv_signs + cb * static_cast<std::size_t>(i), recv_scales[i], len, work, i > 0);
  kernels::scale_inplace(work, len, 1.f / static_cast<float>(lay.p));
}

void OnebitCompressor::server_compress(const float* work, const Layout& lay, int r, float* server_last, float* scale,
                                       std::uint8_t* out_signs) {
  const std::size_t len = lay.length(r);
  std::memset(out_signs + kernels::sign_bytes(len), 0, lay.chunk_bytes() - kernels::sign_bytes(len));
  *scale = kernels::sign_compress_ef(work, server_last, *scale, len, out_signs);  // y = work + e_s; one pass
}

void OnebitCompressor::decode_chunk(const std::uint8_t* signs, float scale, const Layout& lay, int j, float* out) {
  kernels::sign_decompress(signs, scale, lay.length(j), out + lay.begin(j), false);
}

void OnebitCompressor::reduce(Communicator& comm, AllreduceAlgorithm& /*allreduce*/, BucketView& bucket,
                              std::int64_t /*step*/, CompressStats& stats) {
  const std::size_t n = bucket.count;
  const int p = comm.size();
  const int r = comm.rank();
  const Layout lay(n, p);
  const std::size_t cb = lay.chunk_bytes();
  const auto up = static_cast<std::size_t>(p);
  send_signs_.resize(cb * up);
  recv_signs_.resize(cb * up);
  all_scales_.resize(up * up);
  recv_scales_.resize(up);
  work_.resize(lay.chunk);
  const std::size_t server_bytes = cb + sizeof(float);  // [signs][scale]
  server_msg_.resize(server_bytes);
  all_server_.resize(server_bytes * up);

  // 1. worker
  const double t0 = now_s();
  const SignMemory::View worker = worker_mem_.memory(bucket.index, n, up);
  worker_compress(bucket.data, lay, worker.last, send_signs_.data(), worker.scales);  // bucket.data only read
  const double t1 = now_s();
  if (cb > 0) alltoall_bytes(comm, send_signs_.data(), recv_signs_.data(), cb);
  comm.allgather(worker.scales, all_scales_.data(), up, DType::F32);

  // 2. server of chunk r: decode + average (decode time), compress (encode time)
  const double t2 = now_s();
  for (std::size_t i = 0; i < up; ++i) recv_scales_[i] = all_scales_[i * up + static_cast<std::size_t>(r)];
  server_average(recv_signs_.data(), recv_scales_.data(), lay, r, work_.data());
  const double t3 = now_s();
  const SignMemory::View server = server_mem_.memory(bucket.index, lay.length(r), 1);
  server_compress(work_.data(), lay, r, server.last, server.scales, server_msg_.data());
  std::memcpy(server_msg_.data() + cb, server.scales, sizeof(float));
  const double t4 = now_s();
  allgather_bytes(comm, server_msg_.data(), all_server_.data(), server_bytes);

  // 3. decode every chunk
  const double t5 = now_s();
  for (int j = 0; j < p; ++j) {
    const std::uint8_t* msg = all_server_.data() + server_bytes * static_cast<std::size_t>(j);
    float scale;
    std::memcpy(&scale, msg + cb, sizeof(float));
    decode_chunk(msg, scale, lay, j, bucket.data);
  }
  const double t6 = now_s();

  stats.uncompressed_bytes += static_cast<std::uint64_t>(n) * 4;
  stats.compressed_bytes += cb * up + 4 * up + server_bytes;
  stats.wire_bytes +=
      alltoall_wire_bytes(cb, p) + allgather_wire_bytes(4 * up, p) + allgather_wire_bytes(server_bytes, p);
  stats.encode_s += (t1 - t0) + (t4 - t3);
  stats.decode_s += (t3 - t2) + (t6 - t5);
  if (stats.collective.empty()) stats.collective = "alltoall+allgather";
}

std::unique_ptr<Compressor> make_onebit(const plan::CompressorSpec& /*spec*/, std::uint64_t /*seed*/, int /*rank*/) {
  return std::make_unique<OnebitCompressor>();
}

}  // namespace gradsync::compress_detail
