// gradsync/netmodel/compress.hpp — what a compressor puts on the wire, and what it costs.
//
// A bucket's synchronization is a short program of phases run one after another on the
// communication stream: each phase is some local work (encode, orthogonalize, server-side
// decompress) followed by one collective; a final local step decodes. The names and
// semantics are the runtime's (--compress, parsed and validated by plan::parse_compressor;
// which collectives run and their byte counts come from plan::wire_plan, the runtime's own
// rule — runtime/plan/compress.hpp; this file adds only the local work's cost):
//
//   none                 all-reduce of n elements at the wire precision (4 or 2 bytes);
//                        fp16/bf16 precision adds a cast before (read 4 B, write 2 B per
//                        element) and after (read 2, write 4).
//   fp16, bf16           cast compressor: the same at 2 bytes per element.
//   powersgd:rank=R[,start=K][,min_rate=2][,warm_start=1][,error_feedback=1][,threads=1]
//                        DDP PowerSGD (Vogels et al. 2019; torch powerSGD_hook): a tensor
//                        viewed as M (n = shape[0], m = rest) is compressed only if it is
//                        >= 2-D and (n + m) r min_rate < n m. Phases: all-reduce of the
//                        uncompressed rest; P = M Q (2nmr FLOPs) + error feedback (memory
//                        pass), all-reduce P (n r); orthogonalize P (2 n r^2), Q = M^T P
//                        (2nmr), all-reduce Q (m r); decode M = P Q^T (2nmr). Steady state:
//                        the first `start` uncompressed steps are not modelled. threads=T
//                        is accepted (the shared parser) but priced as one thread: the
//                        calibrated rates are single-threaded, and a second codec thread
//                        competes with backward for the cores (not modelled).
//   qsgd:levels=S[,bucket=B]  (S in 1..127, as the runtime: one code byte per element =
//                        sign + 7-bit level; B default 512) all-gather of one message per
//                        rank: pad4(n) code bytes + one fp32 norm per B elements. Decode
//                        dequantizes and sums p messages.
//   onebit (alias sign)  1-bit Adam's two-phase scheme (runtime/compress/onebit.hpp): the
//                        bucket is cut into p chunks of c = ceil(n/p) rounded up to 32
//                        elements (c/8 sign bytes each, scale = norm/sqrt(len)): all-to-all
//                        of p x c/8 bytes, all-gather of p fp32 scales per rank, server-side
//                        decompress/average/compress of its chunk, all-gather of
//                        (c/8 + 4) bytes per rank.
//   topk:ratio=F         all-gather of k = clamp(ceil(F n), 1, n) int32 indices + k fp32
//                        values per rank (8 k bytes; values stay fp32 at any precision).
//
// Precision: fp16/bf16 changes only "none" (it becomes the cast, as DDP's
// fp16_compress_hook); every other compressor keeps its own wire format (PowerSGD's P, Q
// and rest, top-k values in fp32) — runtime/train/precision.hpp.
//
// Byte counts (BucketPlan) mirror the runtime's CompressStats exactly: payload_bytes =
// compressed_bytes (what one rank contributes), wire_bytes = wire_bytes (what one rank
// sends over all rounds: all-reduce 2(p-1)/p B, ring-like; all-gather and all-to-all
// (p-1) x the per-rank / per-peer block). tests/netmodel/test_compress_payload.cpp checks
// them against the runtime's compressors.
//
// Local work (encode / decode) is costed in one of two ways:
//  * default: with the device's rates from the compute profile: FLOPs at peak_flops x
//    efficiency (fp32 math), memory passes at optimizer_bytes_per_s (the profile's
//    sustained memory bandwidth), counting the bytes each kernel reads and writes;
//  * with measured kernel throughputs (KernelRates, from `gradsync-model calibrate
//    --kernels kb.json`, i.e. gradsync-kernels-bench): time = fp32 input bytes / the
//    kernel's measured bytes_per_second at the step's working set (DeviceRates), and PowerSGD = matmul FLOPs (2 n m r per
//    product) / a FLOP rate + its memory passes (error feedback over the whole bucket)
//    / a byte rate, encode and decode separately (fitted from the bench's square
//    matrices and its ResNet-50 bucket, whose FLOP/byte ratios differ). Kernels the file
//    lacks fall back to the device rates.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/spec.hpp"
#include "plan/compress.hpp"
#include "netmodel/collectives.hpp"

namespace gradsync::netmodel {

struct Phase {
  double compute_s = 0;  // local work before the collective
  Op op = Op::Allreduce;
  double bytes = 0;      // collective size (nccl-tests convention, see collectives.hpp)
  DType dtype = DType::F32;  // element type its all-reduce sums (the casts: fp16/bf16)
  // A collective of a PyTorch hook takes what its tensor's all-reduce takes on the fabric
  // plus extra_s, what the hook adds to it (its Python callbacks, fresh tensors), measured
  // against a plain all-reduce on the same host (KernelRates::hook_extra,
  // powersgd_collective_extra_s); and at least min_s (older kernel files: the hook's own
  // time, KernelRates::powersgd_collective_s). 0: the fabric's price.
  double extra_s = 0;
  double min_s = 0;
  // The collective reduces the bucket itself, in place (plain fp32 "none"): with registered
  // buckets (NetConfig::registered_buckets) shm reads the peers' buckets directly.
  bool in_bucket = false;
};

struct BucketPlan {
  std::vector<Phase> phases;
  double tail_s = 0;         // decode after the last collective
  double payload_bytes = 0;  // = CompressStats::compressed_bytes: what this rank contributes
  double wire_bytes = 0;     // = CompressStats::wire_bytes: what this rank sends (ring-like all-reduce)
  // Sigma of one rank's codec time from step to step, as a fraction of it (a PyTorch hook's
  // KernelRates::codec_sigma; 0: steady, gradsync's kernels): the synchronous step waits for
  // the slowest rank's codec (timeline.hpp, StepResult::straggler_s). A replay whose codec
  // was measured keeps only the part its recorded ranks did not wait for (negative for fewer;
  // at one rank none is taken off the measured codec).
  double codec_sigma = 0;
};

// Measured encode/decode throughputs of the compression kernels (gradsync-kernels-bench).
// Keys of `Bps`: "<kernel>_encode" / "<kernel>_decode" for fp16, bf16, qsgd, onebit, topk;
// values in fp32 input bytes per second (the bench's bytes_per_second). PowerSGD: effective
// FLOP/s of encode (P = MQ, Gram-Schmidt, Q = M^T P, error feedback) and decode (M = PQ^T,
// error feedback), FLOPs counted as 2 n m r per product.
struct KernelRates {
  std::string name, source;
  std::map<std::string, double> Bps;
  double powersgd_encode_flops = 0, powersgd_decode_flops = 0;  // 0: not measured
  // Memory passes of PowerSGD (error feedback fused with the products), bytes/s; 0: FLOPs
  // only. Encode touches 12 n + 4 c bytes, decode 12 n + 4 (n - c) (n bucket elements, c of
  // them in compressed matrices; compress/powersgd.cpp's fused schedule).
  double powersgd_encode_Bps = 0, powersgd_decode_Bps = 0;
  // Fixed costs, seconds per compressed matrix and per bucket, of a codec that makes calls
  // per tensor (PyTorch's powerSGD_hook: a QR and three products per matrix from Python,
  // fitted from gradsync_torch.codecs); 0 for gradsync's fused kernels.
  double powersgd_encode_s_per_matrix = 0, powersgd_decode_s_per_matrix = 0;
  double powersgd_encode_s_per_bucket = 0, powersgd_decode_s_per_bucket = 0;
  // A collective of PyTorch's powerSGD_hook as the hook runs it (launched from the hook
  // call or its future callbacks, to the future's completion), seconds, median of the
  // gradsync_torch.codecs cases; each PowerSGD collective is priced at least this. 0: the
  // fabric alone (gradsync's own compressor).
  double powersgd_collective_s = 0;
  // What PyTorch's hooks add to each of their collectives: the hook's collective (launch ->
  // the future's completion, its value read in a Python callback) less a plain all-reduce
  // of the same tensor in the same process (gradsync_torch.codecs' <hook>_collective and
  // <hook>_allreduce cases). PowerSGD: the median over the cases, seconds per collective
  // (files with it have no collective_s); the fp16/bf16 hooks: by bucket size, key "fp16" /
  // "bf16", [fp32 bucket bytes, seconds] ascending. 0 / empty: nothing added (gradsync's
  // own compressors).
  double powersgd_collective_extra_s = 0;
  std::map<std::string, std::vector<std::pair<double, double>>> hook_extra_s;
  // Sigma of one rank's codec time per step as a fraction of its median, per PyTorch hook
  // ("fp16", "bf16", "powersgd"): gradsync_torch.codecs' <hook>_codec_wait cases (per step the
  // slowest of p ranks' codec, beyond its median, = E[max of p] x sigma), the median over the
  // cases. Empty: steady codecs (gradsync's kernels).
  std::map<std::string, double> codec_sigma;
  // The bench's rate per size (fp32 input bytes -> bytes/s, ascending), where it measured
  // more than one: a kernel runs from cache below the caches' size and from memory past it.
  std::map<std::string, std::vector<std::pair<double, double>>> by_size;
  std::vector<std::string> notes;  // fit quality, per kernel

  // The kernel's rate for a step that streams `working_set` bytes (0: unknown): its
  // by-size rates interpolated log-log at that size, the smallest / largest size's rate
  // outside them; without by-size rates (or working_set 0), Bps. 0 when not measured.
  double rate(const std::string& kernel, double working_set) const;
  // hook_extra_s[hook] at a bucket of `bucket_bytes` fp32 bytes: linear between the
  // measured sizes, the smallest's below them, the largest's scaled by size above; 0 when
  // not measured.
  double hook_extra(const std::string& hook, double bucket_bytes) const;
  // codec_sigma[hook], 0 when not measured.
  double codec_jitter(const std::string& hook) const;
};

// TOML (written by calibrate --kernels; read by --kernels FILE):
//   name = "..."  source = "..."
//   [Bps]  qsgd_encode = 2.1e9  ...          (fp32 input bytes / s)
//   [powersgd]  encode_flops = 3e10  decode_flops = 2e10  [encode_Bps = 8e9  decode_Bps = 8e9]
//               [encode_s_per_matrix = 4e-5  decode_s_per_matrix = ...  encode_s_per_bucket = ...]
//   [Bps_by_size]  qsgd_encode = [[1048576, 9.4e9], [16777216, 7.6e9], [67108864, 3.5e9]]  (optional)
//   [hook_extra_s]  fp16 = [[262144, 9.0e-5], [4194304, 5.2e-4]]  (optional: [fp32 bucket bytes, s])
//   [powersgd]  collective_extra_s = 4e-5  (or, older files, collective_s = 2e-4: a floor)
//   [codec_sigma]  fp16 = 0.05  bf16 = 0.05  powersgd = 0.2  (optional: fraction of the codec)
// UsageError naming the file and key on malformed input.
KernelRates load_kernel_rates(const std::string& path);
void save_kernel_rates(const KernelRates& k, const std::string& path);

struct DeviceRates {
  double flops = 1e12;      // FLOP/s for encode/decode math
  double mem_Bps = 1e11;    // bytes/s for memory passes
  const KernelRates* kernels = nullptr;  // measured kernel throughputs, if given
  // Bytes one step streams on a node (parameters x the optimizer's bytes per parameter x
  // ranks per node): picks the kernels' size regime (KernelRates::rate). A step's
  // gradients, parameters and optimizer state pass through the caches between a bucket's
  // backward and its codec, so past the caches the codec reads from memory even when the
  // bucket alone would fit. 0: the kernels' median rate.
  double working_set_bytes = 0;
};

// One gradient tensor as the compressor sees it.
struct GradShape {
  int64_t numel = 0;
  int64_t rows = 0;  // shape[0] (numel for 1-D)
  int ndim = 1;
};

class Compressor {
 public:
  // Parses and validates the spec (UsageError naming --compress and the key).
  explicit Compressor(const std::string& spec_text);
  const std::string& name() const { return spec_.kind_name; }
  std::string spec() const { return spec_.spec.str(); }

  // Plan for a bucket of tensors; wire_elem_bytes is 4 (fp32) or 2 (fp16/bf16 precision),
  // precision the run's element type (which 16-bit type "none" sums at 2 bytes; default fp16).
  BucketPlan plan(const std::vector<GradShape>& tensors, int wire_elem_bytes, int nranks,
                  const DeviceRates& rates, DType precision = DType::F32) const;

 private:
  plan::CompressorSpec spec_;
};

// "fp32" -> 4, "fp16"/"bf16" -> 2 (plan::precision_bytes); UsageError naming --precision otherwise.
int precision_bytes(const std::string& precision);

}  // namespace gradsync::netmodel
