// gradsync/compress/none.cpp — the "none" compressor: a plain fp32 all-reduce (Avg) of the
// bucket with the algorithm the user chose (--algo). The baseline every compressor is
// compared with; takes no parameters.
//
// Stats: uncompressed = compressed = count * 4 bytes, collective "allreduce",
// compressed = false, encode/decode 0. wire_bytes is an *estimate* of what this rank sent,
// from the algorithm actually used for this size (AllreduceAlgorithm::chosen):
//   * ring, rabenseifner, hier, tree, mpi (and "auto" resolving to one of them):
//     2 (p-1)/p * bytes — the bandwidth-optimal reduce-scatter + all-gather volume. For
//     ring and Rabenseifner it is exact per rank (up to chunk rounding); for a
//     reduce+broadcast tree it is the average over ranks (interior ranks send more, leaves
//     less); for "mpi" it is what a ring-like MPI_Allreduce sends (we cannot see inside).
//   * rd (recursive doubling): ceil(log2 p) * bytes (every round exchanges the full
//     vector; non-powers of two add a pre/post step that this ignores).
#include <cmath>
#include <cstdint>

#include "compress/compressor.hpp"
#include "core/spec.hpp"
#include "plan/compress.hpp"

namespace gradsync::compress_detail {

namespace {

std::uint64_t estimate_allreduce_wire_bytes(const std::string& algo, std::uint64_t bytes, int p) {
  if (p <= 1) return 0;
  if (algo == "rd") {
    const double rounds = std::ceil(std::log2(static_cast<double>(p)));
    return static_cast<std::uint64_t>(rounds * static_cast<double>(bytes));
  }
  const double factor = 2.0 * static_cast<double>(p - 1) / static_cast<double>(p);
  return static_cast<std::uint64_t>(std::llround(factor * static_cast<double>(bytes)));
}

class NoneCompressor final : public Compressor {
 public:
  std::string spec() const override { return "none"; }
  bool accepts_device_memory() const override { return true; }  // only allreduce.run() touches the bucket

  void reduce(Communicator& comm, AllreduceAlgorithm& allreduce, BucketView& bucket, std::int64_t /*step*/,
              CompressStats& stats) override {
    const std::uint64_t bytes = static_cast<std::uint64_t>(bucket.count) * sizeof(float);
    if (bucket.count > 0) allreduce.run(bucket.data, bucket.data, bucket.count, DType::F32, RedOp::Avg);
    stats.uncompressed_bytes += bytes;
    stats.compressed_bytes += bytes;
    stats.wire_bytes += estimate_allreduce_wire_bytes(allreduce.chosen(bytes), bytes, comm.size());
    if (stats.collective.empty()) stats.collective = "allreduce";
    stats.compressed = false;
  }
};

}  // namespace

// Factory used by registry.cpp. The spec has been checked against the allowed keys (none).
std::unique_ptr<Compressor> make_none(const plan::CompressorSpec& /*spec*/, std::uint64_t /*seed*/, int /*rank*/) {
  return std::make_unique<NoneCompressor>();
}

}  // namespace gradsync::compress_detail
