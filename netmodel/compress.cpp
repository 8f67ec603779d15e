// gradsync/netmodel/compress.cpp — compressor wire sizes and encode/decode costs.
#include "netmodel/compress.hpp"

#include <cmath>

#include "core/error.hpp"

namespace gradsync::netmodel {

int precision_bytes(const std::string& precision) {
  if (precision == "fp32") return 4;
  if (precision == "fp16" || precision == "bf16") return 2;
  throw UsageError("option --precision: unknown precision '" + precision + "' (known: fp32, fp16, bf16)");
}

Compressor::Compressor(const std::string& text) : spec_(parse_spec(text, "--compress")) {
  name_ = spec_.name;
  if (name_ == "sign") name_ = "onebit";
  if (name_ == "none" || name_ == "fp16" || name_ == "bf16" || name_ == "onebit") {
    spec_.allow_only({});
  } else if (name_ == "powersgd") {
    spec_.allow_only({"rank", "start", "min_rate", "warm_start", "error_feedback"});
    rank_ = static_cast<int>(spec_.get_int("rank", 1));
    min_rate_ = spec_.get_double("min_rate", 2);
    GS_USAGE_CHECK(rank_ >= 1, "option --compress: powersgd rank must be >= 1, got ", rank_);
    GS_USAGE_CHECK(min_rate_ > 0, "option --compress: powersgd min_rate must be > 0");
  } else if (name_ == "qsgd") {
    spec_.allow_only({"levels", "bucket"});
    qsgd_levels_ = static_cast<int>(spec_.get_int("levels", 16));
    qsgd_bucket_ = spec_.get_int("bucket", 512);
    GS_USAGE_CHECK(qsgd_levels_ >= 1, "option --compress: qsgd levels must be >= 1");
    GS_USAGE_CHECK(qsgd_bucket_ >= 1, "option --compress: qsgd bucket must be >= 1");
  } else if (name_ == "topk") {
    spec_.allow_only({"ratio"});
    topk_ratio_ = spec_.get_double("ratio", 0.01);
    GS_USAGE_CHECK(topk_ratio_ > 0 && topk_ratio_ <= 1, "option --compress: topk ratio must be in (0, 1], got ",
                   topk_ratio_);
  } else {
    throw UsageError("option --compress: unknown compressor '" + spec_.name +
                     "' (known: none, fp16, bf16, powersgd, qsgd, onebit|sign, topk)");
  }
}

BucketPlan Compressor::plan(const std::vector<GradShape>& tensors, int wire_elem_bytes, int p,
                            const DeviceRates& rt) const {
  BucketPlan bp;
  double n = 0;
  for (const auto& t : tensors) n += static_cast<double>(t.numel);
  const double mem = rt.mem_Bps;
  auto cast_cost = [&](double elems) { return wire_elem_bytes == 2 ? elems * 6.0 / mem : 0.0; };

  if (name_ == "none" || name_ == "fp16" || name_ == "bf16") {
    const int e = name_ == "none" ? wire_elem_bytes : 2;
    const double cast = e == 2 ? n * 6.0 / mem : 0.0;
    bp.phases.push_back({cast, Op::Allreduce, n * e});
    bp.tail_s = cast;
    bp.wire_bytes = n * e;
    return bp;
  }
  if (name_ == "powersgd") {
    const double r = rank_;
    double plain = 0, pbytes = 0, qbytes = 0, flops_p = 0, flops_q = 0, flops_dec = 0, ef_bytes = 0;
    for (const auto& t : tensors) {
      const double rows = static_cast<double>(t.rows);
      const double cols = rows > 0 ? static_cast<double>(t.numel) / rows : 0;
      if (t.ndim >= 2 && (rows + cols) * r * min_rate_ < rows * cols) {
        pbytes += rows * r * wire_elem_bytes;
        qbytes += cols * r * wire_elem_bytes;
        flops_p += 2 * rows * cols * r;
        flops_q += 2 * rows * cols * r + 2 * rows * r * r;  // Q = M^T P + Gram-Schmidt of P
        flops_dec += 2 * rows * cols * r;
        ef_bytes += 3 * 4 * rows * cols;  // M += e; e = M - PQ^T: read/write fp32
      } else {
        plain += static_cast<double>(t.numel);
      }
    }
    if (plain > 0) bp.phases.push_back({cast_cost(plain), Op::Allreduce, plain * wire_elem_bytes});
    if (pbytes > 0) {
      bp.phases.push_back({flops_p / rt.flops + ef_bytes / 2 / mem, Op::Allreduce, pbytes});
      bp.phases.push_back({flops_q / rt.flops, Op::Allreduce, qbytes});
    }
    bp.tail_s = flops_dec / rt.flops + ef_bytes / 2 / mem + cast_cost(plain);
    bp.wire_bytes = plain * wire_elem_bytes + pbytes + qbytes;
    return bp;
  }
  if (name_ == "qsgd") {
    const double bits = std::ceil(std::log2(2.0 * qsgd_levels_ + 1));
    const double eb = std::ceil(bits / 8.0);  // whole bytes per element on the wire
    const double per_rank = n * eb + std::ceil(n / static_cast<double>(qsgd_bucket_)) * 4;
    const double encode = n * (2 * 4.0 + eb) / mem;  // norm pass + quantize pass
    const double decode = p * n * (eb + 8.0) / mem;  // dequantize and accumulate p shares
    bp.phases.push_back({encode, Op::Allgather, per_rank * p});
    bp.tail_s = decode;
    bp.wire_bytes = per_rank;
    return bp;
  }
  if (name_ == "onebit") {
    const double signs = std::ceil(n / 8.0);
    const double encode = n * 12.0 / mem;  // read grad + error, write error, pack
    const double server = n * (1.0 / 8 + 4 + 4 + 4) / mem;  // unpack p shares of n/p, average, repack
    const double decode = n * (1.0 / 8 + 4 + 4) / mem;
    bp.phases.push_back({encode, Op::Alltoall, signs});
    bp.phases.push_back({0, Op::Allgather, 4.0 * p});
    bp.phases.push_back({server, Op::Allgather, signs + 4.0 * p});
    bp.tail_s = decode;
    bp.wire_bytes = signs + 4 + signs / p + 4;
    return bp;
  }
  // topk
  const double k = std::ceil(topk_ratio_ * n);
  const double per_rank = k * (4.0 + wire_elem_bytes);
  const double encode = n * 12.0 / mem;                         // error feedback + selection passes
  const double decode = p * k * (4.0 + wire_elem_bytes + 8.0) / mem;  // scatter-add p shares
  bp.phases.push_back({encode, Op::Allgather, per_rank * p});
  bp.tail_s = decode;
  bp.wire_bytes = per_rank;
  return bp;
}

}  // namespace gradsync::netmodel
