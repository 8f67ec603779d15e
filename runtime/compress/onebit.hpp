// gradsync/compress/onebit.hpp — "onebit" (alias "sign"): 1-bit compression with error
// feedback on both sides, as the compressed all-reduce of 1-bit Adam (Tang et al., ICML
// 2021; DeepSpeed's NcclBackend.compressed_allreduce).
//
// Layout: the bucket of n values is cut into p chunks of c elements, c = ceil(n/p) rounded
// up to a multiple of 32 (whole code bytes, whole 4-byte words on the wire); rank j is the
// "server" of chunk j = [j c, min(n, (j+1) c)) (the last chunks may be short or empty).
// Compressing a vector v of length L means: scale = ||v||_2 / sqrt(L) (1-bit Adam's choice,
// not mean |v|), one bit per element (v >= 0), decoded as +scale / -scale.
//
// Protocol per bucket on rank r:
//  1. worker:  x = g + e_w (worker error); compress each chunk j of x -> signs_j, scale_j;
//              e_w = x - decoded(x)
//              all-to-all: signs_j goes to rank j;  all-gather: the p scales of every rank
//  2. server:  y = (1/p) sum_i decode(signs from rank i for chunk r, scale_i[r]) + e_s
//              (sum in rank order, then one multiply); compress y -> signs, scale;
//              e_s = y - decoded(y)
//              all-gather of [signs of chunk r][scale]
//  3. every rank decodes all p chunks: out = decoded server chunks (the average).
// Memory: every pass goes through the bucket's BucketKernels (the compressor's host kernels,
// or a device's for a bucket reduced in place: the CUDA sign kernels), and the memories,
// scales and messages live in that memory kind, so the two-phase exchange runs on device
// gradients as on host ones (accepts_device_memory).
// Error memories are kept deferred (compress/error_feedback.hpp, SignMemory): e_w is stored
// as x and the p scales of step 1, e_s as y and its scale, and resolved by the next step's
// encode in its one pass (kernels::sign_compress_ef). The results are the bits of the eager
// form above; the gradient buffer is only read until step 3 overwrites it with the average.
// Step 1 so streams 3 arrays (read g, read and write the memory) instead of 5: 0.89x memcpy
// at 64 MiB against 0.41x for the two-pass encoder, onebit_encode in gradsync-kernels-bench
// (kernels/cpu_sign.cpp has the command and figures, 2026-12-02).
// Stats: compressed = p c/8 + 4p (worker) + c/8 + 4 (server) bytes, collective
// "alltoall+allgather"; wire = (p-1)(c/8) + (p-1) 4p + (p-1)(c/8 + 4).
// Encode time = the two compressions; decode time = the server's averaging + step 3.
#pragma once

#include <cstdint>
#include <memory>

#include "compress/collectives.hpp"
#include "compress/compressor.hpp"
#include "compress/error_feedback.hpp"

namespace gradsync::compress_detail {

class OnebitCompressor final : public Compressor {
 public:
  // Chunking of n elements over p ranks.
  struct Layout {
    std::size_t n = 0;
    int p = 1;
    std::size_t chunk = 0;  // elements per chunk, multiple of 32
    Layout(std::size_t n_, int p_);
    std::size_t begin(int j) const { return std::min(n, chunk * static_cast<std::size_t>(j)); }
    std::size_t length(int j) const { return std::min(n, chunk * static_cast<std::size_t>(j + 1)) - begin(j); }
    std::size_t chunk_bytes() const { return chunk / 8; }
  };

  OnebitCompressor();
  std::string spec() const override { return "onebit"; }
  void reduce(Communicator& comm, AllreduceAlgorithm& allreduce, BucketView& bucket, std::int64_t step,
              CompressStats& stats) override;
  bool accepts_device_memory() const override { return true; }

  // ---- the phases, callable without a communicator (1-rank path, tests) -------------------
  // Every pointer is in `k`'s memory kind (host: make_host_bucket_kernels(); a device's
  // BucketKernels for a bucket reduced in place), the scales too.
  // Step 1 on the gradient g (only read): signs (p * chunk_bytes) and scales (p) of
  // x = g + e_w, with BucketKernels::sign_compress_ef per chunk (one pass over memory). The
  // worker memory is deferred: on entry `worker_last` (n floats) and `scales` hold the
  // previous step's x and scales (zeros before the first step), on return this step's;
  // e_w is kernels::sign_residual(worker_last, scales[j]) over chunk j.
  static void worker_compress(BucketKernels& k, const float* g, const Layout& lay, float* worker_last,
                              std::uint8_t* signs, float* scales);
  // Step 2 for chunk `r`, averaging: `recv_signs` holds p chunk_bytes blocks (block i from
  // rank i), `recv_scales[i * scale_stride]` is rank i's scale of this chunk; work
  // (length(r) floats) = (1/p) sum_i decoded block i, summed in rank order.
  static void server_average(BucketKernels& k, const std::uint8_t* recv_signs, const float* recv_scales,
                             std::size_t scale_stride, const Layout& lay, int r, float* work);
  // Step 2, compression of y = work + e_s (work only read): out_signs (chunk_bytes) = signs
  // of y, *scale = its scale. Deferred like the worker's: on entry `server_last`
  // (length(r) floats) and *scale hold the previous step's y and scale, on return this step's.
  static void server_compress(BucketKernels& k, const float* work, const Layout& lay, int r, float* server_last,
                              float* scale, std::uint8_t* out_signs);
  // Step 3 for chunk j: out[begin(j) ...] = decoded(signs, *scale).
  static void decode_chunk(BucketKernels& k, const std::uint8_t* signs, const float* scale, const Layout& lay, int j,
                           float* out);

 private:
  std::unique_ptr<BucketKernels> host_;  // the kernels of host buckets
  BlockAllgather gather_;                // its all-gathers (compress/collectives.hpp)
  std::uint64_t owner_;                  // state: worker memory slots 0-1, server 2-3 (SignMemory)
};

}  // namespace gradsync::compress_detail
