// gradsync/netmodel/compress.cpp — compressor wire sizes and encode/decode costs.
#include "netmodel/compress.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#if __has_include(<toml++/toml.hpp>)
#include <toml++/toml.hpp>
#else
#include <toml++/toml.h>
#endif

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
    GS_USAGE_CHECK(spec_.has("rank"), "option --compress: '", text, "' needs rank=R (R >= 1)");
    rank_ = static_cast<int>(spec_.get_int("rank", 1));
    min_rate_ = spec_.get_double("min_rate", 2);
    GS_USAGE_CHECK(rank_ >= 1 && rank_ <= 1024, "option --compress: powersgd rank must be in 1..1024, got ", rank_);
    GS_USAGE_CHECK(min_rate_ > 0, "option --compress: powersgd min_rate must be > 0");
  } else if (name_ == "qsgd") {
    spec_.allow_only({"levels", "bucket"});
    GS_USAGE_CHECK(spec_.has("levels"), "option --compress: '", text, "' needs levels=S (1..127)");
    qsgd_levels_ = static_cast<int>(spec_.get_int("levels", 16));
    qsgd_bucket_ = spec_.get_int("bucket", 512);
    GS_USAGE_CHECK(qsgd_levels_ >= 1 && qsgd_levels_ <= 127, "option --compress: qsgd levels must be in 1..127 (one ",
                   "code byte holds a sign and 7 bits of level), got ", qsgd_levels_);
    GS_USAGE_CHECK(qsgd_bucket_ >= 1, "option --compress: qsgd bucket must be >= 1");
  } else if (name_ == "topk") {
    spec_.allow_only({"ratio"});
    GS_USAGE_CHECK(spec_.has("ratio"), "option --compress: '", text, "' needs ratio=F with 0 < F <= 1");
    topk_ratio_ = spec_.get_double("ratio", 0.01);
    GS_USAGE_CHECK(topk_ratio_ > 0 && topk_ratio_ <= 1, "option --compress: topk ratio must be in (0, 1], got ",
                   topk_ratio_);
  } else {
    throw UsageError("option --compress: unknown compressor '" + spec_.name +
                     "' (known: none, fp16, bf16, powersgd, qsgd, onebit|sign, topk)");
  }
}

namespace {

double pad4(double bytes) { return std::ceil(bytes / 4.0) * 4.0; }
// The runtime's wire-byte estimates (runtime/compress/collectives.hpp), ring-like all-reduce.
double allreduce_sent(double bytes, int p) { return p <= 1 ? 0.0 : std::round(2.0 * (p - 1) / p * bytes); }
double gather_sent(double block, int p) { return p <= 1 ? 0.0 : (p - 1) * block; }

// Seconds for `elems` fp32 elements through a measured kernel, or `fallback_s` without one.
double kernel_s(const DeviceRates& rt, const std::string& kernel, double elems, double fallback_s) {
  if (rt.kernels) {
    auto it = rt.kernels->Bps.find(kernel);
    if (it != rt.kernels->Bps.end() && it->second > 0) return elems * 4.0 / it->second;
  }
  return fallback_s;
}

}  // namespace

BucketPlan Compressor::plan(const std::vector<GradShape>& tensors, int wire_elem_bytes, int p,
                            const DeviceRates& rt) const {
  BucketPlan bp;
  double n = 0;
  for (const auto& t : tensors) n += static_cast<double>(t.numel);
  const double mem = rt.mem_Bps;
  // fp16/bf16 precision turns "none" into the cast compressor of that type (the bench's
  // fp16 kernels stand for both when measured; bf16 has its own entries).
  const std::string cast_kernel = "fp16";

  if (name_ == "none" || name_ == "fp16" || name_ == "bf16") {
    const int e = name_ == "none" ? wire_elem_bytes : 2;
    const std::string k = name_ == "none" ? cast_kernel : name_;
    const double enc = e == 2 ? kernel_s(rt, k + "_encode", n, n * 6.0 / mem) : 0.0;
    const double dec = e == 2 ? kernel_s(rt, k + "_decode", n, n * 6.0 / mem) : 0.0;
    bp.phases.push_back({enc, Op::Allreduce, n * e});
    bp.tail_s = dec;
    bp.payload_bytes = n * e;
    bp.wire_bytes = allreduce_sent(n * e, p);
    return bp;
  }
  if (name_ == "powersgd") {
    // Per tensor (runtime make_plan): M = shape[0] x rest, r = min(n, m, rank), compressed
    // when >= 2-D and (n + m) r min_rate < n m. P, Q and the plain rest are fp32 buffers
    // at any --precision (runtime/train/precision.hpp: compressors other than the casts
    // run on the unscaled fp32 view), so no cast either.
    double plain = 0, pelems = 0, qelems = 0, flops_p = 0, flops_q = 0, flops_dec = 0, ef_bytes = 0;
    for (const auto& t : tensors) {
      const double rows = static_cast<double>(t.rows);
      const double cols = rows > 0 ? static_cast<double>(t.numel) / rows : 0;
      const double r = std::min({rows, cols, static_cast<double>(rank_)});
      if (t.ndim >= 2 && t.numel > 0 && (rows + cols) * r * min_rate_ < rows * cols) {
        pelems += rows * r;
        qelems += cols * r;
        flops_p += 2 * rows * cols * r;
        flops_q += 2 * rows * cols * r + 2 * rows * r * r;  // Q = M^T P + Gram-Schmidt of P
        flops_dec += 2 * rows * cols * r;
        ef_bytes += 3 * 4 * rows * cols;  // M += e; e = M - PQ^T: read/write fp32
      } else {
        plain += static_cast<double>(t.numel);
      }
    }
    const double e = 4;
    const auto* k = rt.kernels;
    const bool measured = k && k->powersgd_encode_flops > 0 && k->powersgd_decode_flops > 0;
    const double ncomp = n - plain;
    const double enc_mem = k && k->powersgd_encode_Bps > 0 ? (20 * n + 8 * ncomp) / k->powersgd_encode_Bps : 0.0;
    const double dec_mem = k && k->powersgd_decode_Bps > 0 ? (12 * n + 4 * ncomp + 8 * plain) / k->powersgd_decode_Bps : 0.0;
    const double enc_p =
        measured ? flops_p / k->powersgd_encode_flops + enc_mem : flops_p / rt.flops + ef_bytes / 2 / mem;
    const double enc_q = measured ? flops_q / k->powersgd_encode_flops : flops_q / rt.flops;
    const double dec = measured ? flops_dec / k->powersgd_decode_flops + dec_mem : flops_dec / rt.flops + ef_bytes / 2 / mem;
    // The runtime runs the plain all-reduce and P's back to back after computing P.
    if (plain > 0) bp.phases.push_back({0, Op::Allreduce, plain * e});
    if (pelems > 0) {
      bp.phases.push_back({enc_p, Op::Allreduce, pelems * e});
      bp.phases.push_back({enc_q, Op::Allreduce, qelems * e});
    }
    bp.tail_s = dec;
    bp.payload_bytes = (plain + pelems + qelems) * e;
    bp.wire_bytes = allreduce_sent(plain * e, p) + allreduce_sent(pelems * e, p) + allreduce_sent(qelems * e, p);
    return bp;
  }
  if (name_ == "qsgd") {
    // One message per rank: pad4(n) code bytes (sign + 7-bit level), one fp32 norm per B.
    const double per_rank = pad4(n) + std::ceil(n / static_cast<double>(qsgd_bucket_)) * 4;
    const double encode = kernel_s(rt, "qsgd_encode", n, n * (2 * 4.0 + 1) / mem);  // norm pass + quantize pass
    const double decode = p * kernel_s(rt, "qsgd_decode", n, n * (1 + 8.0) / mem);  // dequantize + accumulate p
    bp.phases.push_back({encode, Op::Allgather, per_rank * p});
    bp.tail_s = decode;
    bp.payload_bytes = per_rank;
    bp.wire_bytes = gather_sent(per_rank, p);
    return bp;
  }
  if (name_ == "onebit") {
    // p chunks of c = ceil(n/p) rounded up to 32 elements; c/8 sign bytes per chunk.
    const double chunk = std::ceil(std::ceil(n / p) / 32.0) * 32.0;
    const double cb = chunk / 8.0;
    const double encode = kernel_s(rt, "onebit_encode", n, n * 12.0 / mem);  // grad + error, write error, pack
    // Server: unpack p shares of its chunk and average (a decode of ~n/p x p = n elements),
    // then compress its chunk (an encode of n/p).
    const double server = kernel_s(rt, "onebit_decode", chunk * p, chunk * p * (1.0 / 8 + 8) / mem) +
                          kernel_s(rt, "onebit_encode", chunk, chunk * 12.0 / mem);
    const double decode = kernel_s(rt, "onebit_decode", n, n * (1.0 / 8 + 4) / mem);
    bp.phases.push_back({encode, Op::Alltoall, cb * p});
    bp.phases.push_back({0, Op::Allgather, 4.0 * p * p});
    bp.phases.push_back({server, Op::Allgather, (cb + 4) * p});
    bp.tail_s = decode;
    bp.payload_bytes = cb * p + 4.0 * p + cb + 4;
    bp.wire_bytes = gather_sent(cb, p) + gather_sent(4.0 * p, p) + gather_sent(cb + 4, p);
    return bp;
  }
  // topk: k int32 indices + k fp32 values per rank.
  const double k = n > 0 ? std::clamp(std::ceil(topk_ratio_ * n * (1 - 1e-12)), 1.0, n) : 0.0;
  const double per_rank = 8.0 * k;
  const double encode = kernel_s(rt, "topk_encode", n, n * 12.0 / mem);  // error feedback + selection passes
  // Decode = zero the bucket + scatter-add p shares of k; the bench times zero + one share.
  const double decode = kernel_s(rt, "topk_decode", n, n * 4.0 / mem + k * 16.0 / mem) + (p - 1) * k * 16.0 / mem;
  bp.phases.push_back({encode, Op::Allgather, per_rank * p});
  bp.tail_s = decode;
  bp.payload_bytes = per_rank;
  bp.wire_bytes = gather_sent(per_rank, p);
  return bp;
}


// ---- measured kernel rates (TOML) --------------------------------------------------------------

KernelRates load_kernel_rates(const std::string& path) {
  toml::table tbl;
  try {
    tbl = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw UsageError("kernels " + path + ":" + std::to_string(e.source().begin.line) + ": " +
                     std::string(e.description()));
  }
  KernelRates k;
  auto line = [&](const toml::node& n) { return std::to_string(n.source().begin.line); };
  for (auto&& [key, node] : tbl) {
    const std::string ks(key.str());
    if (ks == "name" || ks == "source") {
      GS_USAGE_CHECK(node.is_string(), "kernels ", path, ":", line(node), ": key '", ks, "' must be a string");
      (ks == "name" ? k.name : k.source) = *node.value<std::string>();
    } else if (ks == "Bps" || ks == "powersgd") {
      GS_USAGE_CHECK(node.is_table(), "kernels ", path, ":", line(node), ": key '", ks, "' must be a table");
      for (auto&& [sub, v] : *node.as_table()) {
        const std::string full = ks + "." + std::string(sub.str());
        const auto d = v.value<double>();
        GS_USAGE_CHECK(d && std::isfinite(*d) && *d > 0, "kernels ", path, ":", line(v), ": key '", full,
                       "' must be a finite number > 0");
        if (ks == "Bps") k.Bps[std::string(sub.str())] = *d;
        else if (sub.str() == "encode_flops") k.powersgd_encode_flops = *d;
        else if (sub.str() == "decode_flops") k.powersgd_decode_flops = *d;
        else if (sub.str() == "encode_Bps") k.powersgd_encode_Bps = *d;
        else if (sub.str() == "decode_Bps") k.powersgd_decode_Bps = *d;
        else throw UsageError("kernels " + path + ":" + line(v) + ": unknown key '" + full +
                              "' (known: powersgd.encode_flops, decode_flops, encode_Bps, decode_Bps)");
      }
    } else {
      throw UsageError("kernels " + path + ":" + line(node) + ": unknown key '" + ks +
                       "' (known: name, source, Bps, powersgd)");
    }
  }
  if (k.name.empty()) k.name = path;
  return k;
}

void save_kernel_rates(const KernelRates& k, const std::string& path) {
  std::ostringstream os;
  os.precision(6);
  os << "# gradsync-model kernel rates: encode/decode time = fp32 input bytes / Bps;\n"
     << "# PowerSGD = matmul FLOPs (2 n m r per product) / flops.\n";
  os << "name = \"" << k.name << "\"\nsource = \"" << k.source << "\"\n";
  for (const auto& n : k.notes) os << "# " << n << "\n";
  os << "\n[Bps]  # fp32 input bytes per second\n";
  for (const auto& [name, v] : k.Bps) os << name << " = " << v << "\n";
  if (k.powersgd_encode_flops > 0 || k.powersgd_decode_flops > 0) {
    os << "\n[powersgd]  # effective FLOP/s\n";
    if (k.powersgd_encode_flops > 0) os << "encode_flops = " << k.powersgd_encode_flops << "\n";
    if (k.powersgd_decode_flops > 0) os << "decode_flops = " << k.powersgd_decode_flops << "\n";
    if (k.powersgd_encode_Bps > 0) os << "encode_Bps = " << k.powersgd_encode_Bps << "\n";
    if (k.powersgd_decode_Bps > 0) os << "decode_Bps = " << k.powersgd_decode_Bps << "\n";
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    GS_USAGE_CHECK(f.good(), "cannot write ", tmp);
    f << os.str();
    GS_USAGE_CHECK(f.good(), "cannot write ", tmp);
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace gradsync::netmodel
