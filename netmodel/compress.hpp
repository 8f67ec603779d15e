// gradsync/netmodel/compress.hpp — what a compressor puts on the wire, and what it costs.
//
// A bucket's synchronization is a short program of phases run one after another on the
// communication stream: each phase is some local work (encode, orthogonalize, server-side
// decompress) followed by one collective; a final local step decodes. The names and
// semantics are the runtime's (--compress, parsed with core/spec.hpp):
//
//   none                 all-reduce of n elements at the wire precision (4 or 2 bytes);
//                        fp16/bf16 precision adds a cast before (read 4 B, write 2 B per
//                        element) and after (read 2, write 4).
//   fp16, bf16           cast compressor: the same at 2 bytes per element.
//   powersgd:rank=R[,start=K][,min_rate=2][,warm_start=1][,error_feedback=1]
//                        DDP PowerSGD (Vogels et al. 2019; torch powerSGD_hook): a tensor
//                        viewed as M (n = shape[0], m = rest) is compressed only if it is
//                        >= 2-D and (n + m) r min_rate < n m. Phases: all-reduce of the
//                        uncompressed rest; P = M Q (2nmr FLOPs) + error feedback (memory
//                        pass), all-reduce P (n r); orthogonalize P (2 n r^2), Q = M^T P
//                        (2nmr), all-reduce Q (m r); decode M = P Q^T (2nmr). Steady state:
//                        the first `start` uncompressed steps are not modelled.
//   qsgd:levels=S[,bucket=B]  all-gather of quantized values + one fp32 norm per B
//                        elements (default 512): ceil(log2(2S+1)) bits per element, rounded
//                        up to whole bytes on the wire. Decode sums p contributions.
//   onebit (alias sign)  1-bit Adam's two-phase scheme: all-to-all of packed signs
//                        (n/8 bytes) + all-gather of one fp32 scale per rank, server-side
//                        decompress/average/compress of its 1/p share, all-gather of
//                        server signs + scales.
//   topk:ratio=F         all-gather of k = ceil(F n) int32 indices + k values.
//
// Local work is costed with the device's rates from the compute profile: FLOPs at
// peak_flops x efficiency (fp32 math), memory passes at optimizer_bytes_per_s (the
// profile's sustained memory bandwidth).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/spec.hpp"
#include "netmodel/collectives.hpp"

namespace gradsync::netmodel {

struct Phase {
  double compute_s = 0;  // local work before the collective
  Op op = Op::Allreduce;
  double bytes = 0;      // collective size (nccl-tests convention, see collectives.hpp)
};

struct BucketPlan {
  std::vector<Phase> phases;
  double tail_s = 0;      // decode after the last collective
  double wire_bytes = 0;  // bytes this rank contributes (sum over phases of its share)
};

struct DeviceRates {
  double flops = 1e12;      // FLOP/s for encode/decode math
  double mem_Bps = 1e11;    // bytes/s for memory passes
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
  const std::string& name() const { return name_; }
  std::string spec() const { return spec_.str(); }

  // Plan for a bucket of tensors; wire_elem_bytes is 4 (fp32) or 2 (fp16/bf16 precision).
  BucketPlan plan(const std::vector<GradShape>& tensors, int wire_elem_bytes, int nranks,
                  const DeviceRates& rates) const;

 private:
  Spec spec_;
  std::string name_;
  int rank_ = 4;
  double min_rate_ = 2;
  int qsgd_levels_ = 16;
  int64_t qsgd_bucket_ = 512;
  double topk_ratio_ = 0.01;
};

// "fp32" -> 4, "fp16"/"bf16" -> 2; UsageError naming --precision otherwise.
int precision_bytes(const std::string& precision);

}  // namespace gradsync::netmodel
