// gradsync/plan/compress.hpp — compressor specs (--compress) and each compressor's wire plan.
//
// Purpose: gradsync-train builds its compressors from these specs and the model costs
//   them; both read the same text the same way (one table of names and keys, one set of
//   range checks) and agree on which collectives a bucket needs and how many bytes each
//   moves. tests/plan/test_plan_parity.cpp checks the plan against the real compressors.
// Approach: a registry row per name (allowed keys, the kind it builds; aliases are rows of
//   the same kind); parse_compressor validates and fills CompressorSpec; wire_plan walks
//   a bucket's tensors once. Wire plans per kind (p ranks, n elements, e wire bytes/element):
//     none          all-reduce of n e bytes (e = 2 at fp16/bf16 precision: the cast)
//     fp16, bf16    all-reduce of 2 n bytes
//     powersgd      all-reduce of the uncompressed rest, of P (sum rows r), of Q (sum cols r),
//                   fp32 at any precision; a tensor rows x cols (>= 2-D) is compressed with
//                   r = min(rows, cols, rank) when (rows + cols) r min_rate < rows cols
//                   (torch's _should_compress)
//     qsgd          all-gather of pad4(n) code bytes + 4 ceil(n / bucket) norm bytes per rank
//     onebit|sign   all-to-all of p chunks of c/8 sign bytes (c = ceil(n/p) rounded up to 32),
//                   all-gather of p fp32 scales per rank, all-gather of c/8 + 4 bytes per rank
//     topk          all-gather of 8 k bytes per rank, k = clamp(ceil(ratio n), 1, n)
//   Collective sizes use nccl-tests' convention: all-reduce n bytes per rank, all-gather and
//   all-to-all the total output per rank. wire_bytes is what one rank sends over all rounds
//   with a ring-like all-reduce (2(p-1)/p B) and (p-1) blocks per all-gather / all-to-all.
// Cost: O(tensors) per bucket.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/spec.hpp"

namespace gradsync::plan {

enum class CompressKind { None, Fp16, Bf16, PowerSgd, Qsgd, Onebit, Topk };

constexpr int kPowerSgdMaxRank = 1024;
constexpr int kPowerSgdMaxThreads = 64;
constexpr int kQsgdMaxLevels = 127;  // one code byte: a sign and 7 bits of level

struct CompressorSpec {
  Spec spec;                    // as parsed (name as typed: "sign" stays "sign")
  CompressKind kind = CompressKind::None;
  std::string kind_name;        // "none", "fp16", "bf16", "powersgd", "qsgd", "onebit", "topk"
  // powersgd
  int rank = 1;
  std::int64_t start = 10;      // first compressed step
  double min_rate = 2.0;
  bool warm_start = true, error_feedback = true;
  int powersgd_threads = 1;     // threads=T: codec threads per phase (compress/powersgd.hpp)
  // qsgd
  int qsgd_levels = 0;
  std::int64_t qsgd_bucket = 512;
  // topk
  double topk_ratio = 0;
};

// Registry names in help order: none, fp16, bf16, powersgd, qsgd, onebit, sign, topk.
const std::vector<std::string>& compressor_names();
// The keys the named compressor takes (UsageError for an unknown name).
const std::vector<std::string>& compressor_keys(const std::string& name);
// Parses and validates "name[:k=v,...]": unknown names and keys, missing required keys and
// out-of-range values are UsageErrors naming --compress, the spec and the key.
CompressorSpec parse_compressor(const std::string& text);

enum class Coll { Allreduce, Allgather, Alltoall };
const char* coll_name(Coll c);

struct WirePhase {
  Coll op = Coll::Allreduce;
  std::uint64_t bytes = 0;  // nccl-tests convention (see above)
};

struct TensorShape {
  std::int64_t numel = 0;
  std::int64_t rows = 0;  // shape[0] (numel for 1-D)
  int ndim = 1;
};

struct WirePlan {
  std::vector<WirePhase> phases;   // in the order they run
  std::uint64_t payload_bytes = 0; // what one rank contributes (CompressStats::compressed_bytes)
  std::uint64_t wire_bytes = 0;    // what one rank sends, ring-like (CompressStats::wire_bytes)
  // PowerSGD only: elements of the plain rest, of P and of Q.
  std::int64_t plain_elems = 0, p_elems = 0, q_elems = 0;
};

// PowerSGD's rank for a rows x cols matrix (>= 2-D tensor), or 0 when it stays uncompressed.
int powersgd_rank(std::int64_t rows, std::int64_t cols, int rank, double min_rate);

// The bucket plan for p ranks; wire_elem_bytes is 4 (fp32) or 2 (fp16/bf16 precision: only
// "none" uses it, as the cast of that size). Tensors in bucket order.
WirePlan wire_plan(const CompressorSpec& c, const std::vector<TensorShape>& tensors, int wire_elem_bytes, int p);

// Ring-like all-reduce bytes one rank sends: round(2 (p-1)/p B); (p-1) B for a gather block.
std::uint64_t allreduce_sent_bytes(std::uint64_t bytes, int p);
std::uint64_t gather_sent_bytes(std::uint64_t block, int p);

}  // namespace gradsync::plan
