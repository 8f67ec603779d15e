// gradsync/compress/compressor.hpp — the seam between the reducer and gradient compression.
//
// The reducer hands each ready bucket to a Compressor; the compressor encodes, runs the
// collective it needs (all-reduce for casts and PowerSGD; all-gather / all-to-all for
// QSGD, sign and top-k), decodes, and leaves the *average* gradient over ranks in the
// bucket, in place. It keeps whatever state it needs per bucket (error-feedback memory,
// PowerSGD's Q) keyed by bucket index. The reducer never knows which compressor runs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "algos/allreduce.hpp"
#include "comm/communicator.hpp"
#include "core/spec.hpp"

namespace gradsync {

// One parameter's gradient inside a bucket (PowerSGD views it as a matrix
// shape[0] x prod(rest)).
struct TensorView {
  std::string name;
  std::vector<std::int64_t> shape;
  std::size_t offset = 0;  // elements from the bucket start
  std::size_t count = 0;   // elements
};

class BucketKernels;  // compress/bucket_kernels.hpp

// A bucket of fp32 gradients, contiguous, tensors in bucket (reverse-parameter) order.
struct BucketView {
  int index = 0;
  float* data = nullptr;
  std::size_t count = 0;
  std::vector<TensorView> tensors;
  // Null: `data` is host memory. Else the kernels of the device memory `data` lives in
  // (only for compressors that accept device memory).
  BucketKernels* kernels = nullptr;
  // The kernels that reach `data`: the device's, else the caller's host kernels (each
  // compressor owns a make_host_bucket_kernels()).
  BucketKernels& kernels_or(BucketKernels& host) const { return kernels != nullptr ? *kernels : host; }
};

// What one reduce() did, for the results file and the cost model.
struct CompressStats {
  std::uint64_t uncompressed_bytes = 0;  // fp32 payload of the bucket (count * 4)
  std::uint64_t compressed_bytes = 0;    // payload this rank contributes after encoding
  std::uint64_t wire_bytes = 0;          // bytes this rank sent on the wire (all rounds)
  double encode_s = 0;
  double decode_s = 0;
  std::string collective;                // "allreduce", "allgather", "alltoall+allgather", ...
  bool compressed = true;                // false for plain all-reduce steps (e.g. PowerSGD before start)
  void add(const CompressStats& o);
};

class Compressor {
 public:
  virtual ~Compressor() = default;
  virtual std::string spec() const = 0;  // canonical spec string, e.g. "powersgd:rank=4"
  // Average `bucket` over all ranks of `comm`, in place. `allreduce` is the algorithm the
  // user chose (--algo) for any all-reduce the compressor runs. `step` counts optimizer steps
  // from 0 (PowerSGD's start=K uses it). Every rank calls with the same bucket layout.
  virtual void reduce(Communicator& comm, AllreduceAlgorithm& allreduce, BucketView& bucket, std::int64_t step,
                      CompressStats& stats) = 0;
  // True when reduce() handles a bucket in device memory: it touches it only through
  // `allreduce`/`comm` and bucket.kernels (compress/bucket_kernels.hpp), so it runs in place
  // given a device communicator (NCCL). The reducer stages every other compressor's device
  // buckets through host memory (device/device.hpp).
  virtual bool accepts_device_memory() const { return false; }
};

// Names known to the registry ("none", "fp16", "bf16", "powersgd", "qsgd", "onebit"/"sign", "topk").
const std::vector<std::string>& compressor_names();
// Validates the spec (unknown name or key, out-of-range values -> UsageError naming them)
// and builds the compressor. `seed` makes stochastic compressors reproducible (per rank
// streams are derived from it and the rank).
std::unique_ptr<Compressor> make_compressor(const std::string& spec, std::uint64_t seed, int rank);
// Validation only, before any communication.
void check_compressor_spec(const std::string& spec);

}  // namespace gradsync
