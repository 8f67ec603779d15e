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
#include "plan/precision.hpp"

namespace gradsync::netmodel {

int precision_bytes(const std::string& precision) { return plan::precision_bytes(precision); }

Compressor::Compressor(const std::string& text) : spec_(plan::parse_compressor(text)) {}

namespace {

Op phase_op(plan::Coll c) {
  switch (c) {
    case plan::Coll::Allreduce: return Op::Allreduce;
    case plan::Coll::Allgather: return Op::Allgather;
    case plan::Coll::Alltoall: return Op::Alltoall;
  }
  return Op::Allreduce;
}

// Seconds for `elems` fp32 elements through a measured kernel, or `fallback_s` without one.
double kernel_s(const DeviceRates& rt, const std::string& kernel, double elems, double fallback_s) {
  if (rt.kernels) {
    const double r = rt.kernels->rate(kernel, rt.working_set_bytes);
    if (r > 0) return elems * 4.0 / r;
  }
  return fallback_s;
}

}  // namespace

// The wire (phases, their collectives and sizes, payload and wire bytes) is the runtime's
// plan (plan::wire_plan); this adds the local work before each phase and the decode after.
BucketPlan Compressor::plan(const std::vector<GradShape>& tensors, int wire_elem_bytes, int p,
                            const DeviceRates& rt, DType precision) const {
  std::vector<plan::TensorShape> shapes;
  shapes.reserve(tensors.size());
  for (const auto& t : tensors) shapes.push_back({t.numel, t.rows, t.ndim});
  const plan::WirePlan wire = plan::wire_plan(spec_, shapes, wire_elem_bytes, p);
  BucketPlan bp;
  for (const auto& ph : wire.phases) bp.phases.push_back({0.0, phase_op(ph.op), static_cast<double>(ph.bytes)});
  bp.payload_bytes = static_cast<double>(wire.payload_bytes);
  bp.wire_bytes = static_cast<double>(wire.wire_bytes);

  double n = 0;
  for (const auto& t : tensors) n += static_cast<double>(t.numel);
  const double mem = rt.mem_Bps;
  // fp16/bf16 precision turns "none" into the cast compressor of that type (the bench's
  // fp16 kernels stand for both when measured; bf16 has its own entries).
  const std::string cast_kernel = "fp16";
  const std::string& name = spec_.kind_name;

  switch (spec_.kind) {
    case plan::CompressKind::None:
    case plan::CompressKind::Fp16:
    case plan::CompressKind::Bf16: {
      const bool cast = spec_.kind != plan::CompressKind::None || wire_elem_bytes == 2;
      const std::string k = spec_.kind == plan::CompressKind::None ? cast_kernel : name;
      bp.phases[0].compute_s = cast ? kernel_s(rt, k + "_encode", n, n * 6.0 / mem) : 0.0;
      // The all-reduce sums 16-bit elements: the cast's type, or the run's precision.
      if (cast)
        bp.phases[0].dtype = spec_.kind == plan::CompressKind::Bf16 ||
                                     (spec_.kind == plan::CompressKind::None && precision == DType::BF16)
                                 ? DType::BF16
                                 : DType::F16;
      bp.tail_s = cast ? kernel_s(rt, k + "_decode", n, n * 6.0 / mem) : 0.0;
      bp.phases[0].in_bucket = !cast;
      // PyTorch's cast hooks: what the hook adds to its all-reduce, where measured.
      if (spec_.kind != plan::CompressKind::None && rt.kernels) {
        bp.phases[0].extra_s = rt.kernels->hook_extra(name, 4.0 * n);
        bp.codec_sigma = rt.kernels->codec_jitter(name);
      }
      return bp;
    }
    case plan::CompressKind::PowerSgd: {
      // FLOPs of the compressed matrices (same decision as the wire plan: plan::powersgd_rank).
      double flops_p = 0, flops_q = 0, flops_dec = 0, ef_bytes = 0, matrices = 0;
      for (const auto& t : tensors) {
        const double rows = static_cast<double>(t.rows);
        const int64_t cols_i = t.rows > 0 ? t.numel / t.rows : 0;
        const int ri = t.ndim >= 2 && t.numel > 0 ? plan::powersgd_rank(t.rows, cols_i, spec_.rank, spec_.min_rate) : 0;
        if (ri == 0) continue;
        const double cols = static_cast<double>(cols_i), r = ri;
        matrices += 1;
        flops_p += 2 * rows * cols * r;
        flops_q += 2 * rows * cols * r + 2 * rows * r * r;  // Q = M^T P + Gram-Schmidt of P
        flops_dec += 2 * rows * cols * r;
        ef_bytes += 3 * 4 * rows * cols;  // M += e; e = M - PQ^T: read/write fp32
      }
      const auto* k = rt.kernels;
      const bool measured = k && k->powersgd_encode_flops > 0 && k->powersgd_decode_flops > 0;
      const double plain = static_cast<double>(wire.plain_elems);
      const double ncomp = n - plain;
      // Memory passes of the fused schedule (compress/powersgd.cpp): encode reads M and the
      // memory and writes M (12 n), reads M again for Q (4 c); decode reads M, writes P Q^T
      // and the memory (12 n), plus the uncompressed batch's read (4 (n - c)).
      const double enc_mem = k && k->powersgd_encode_Bps > 0 ? (12 * n + 4 * ncomp) / k->powersgd_encode_Bps : 0.0;
      const double dec_mem = k && k->powersgd_decode_Bps > 0 ? (12 * n + 4 * plain) / k->powersgd_decode_Bps : 0.0;
      const double enc_p =
          measured ? flops_p / k->powersgd_encode_flops + enc_mem : flops_p / rt.flops + ef_bytes / 2 / mem;
      const double enc_q = measured ? flops_q / k->powersgd_encode_flops : flops_q / rt.flops;
      const double dec =
          measured ? flops_dec / k->powersgd_decode_flops + dec_mem : flops_dec / rt.flops + ef_bytes / 2 / mem;
      // A per-tensor codec's fixed costs (KernelRates; 0 for fused kernels): the hook's
      // encode before its first collective, the rest with the decode.
      const double enc_fixed =
          measured ? k->powersgd_encode_s_per_bucket + matrices * k->powersgd_encode_s_per_matrix : 0.0;
      const double dec_fixed =
          measured ? k->powersgd_decode_s_per_bucket + matrices * k->powersgd_decode_s_per_matrix : 0.0;
      // Phases in wire order: [plain], P, Q (P and Q exist together or not at all).
      if (wire.p_elems > 0) {
        const std::size_t ip = wire.plain_elems > 0 ? 1 : 0;
        bp.phases[ip].compute_s = enc_p + enc_fixed;
        bp.phases[ip + 1].compute_s = enc_q;
      } else if (!bp.phases.empty()) {
        bp.phases[0].compute_s = enc_fixed;
      }
      bp.tail_s = dec + dec_fixed;
      if (k) {
        for (Phase& ph : bp.phases) {
          ph.extra_s = k->powersgd_collective_extra_s;
          ph.min_s = k->powersgd_collective_s;
        }
        bp.codec_sigma = k->codec_jitter("powersgd");
      }
      return bp;
    }
    case plan::CompressKind::Qsgd: {
      bp.phases[0].compute_s = kernel_s(rt, "qsgd_encode", n, n * (2 * 4.0 + 1) / mem);  // norm pass + quantize pass
      bp.tail_s = p * kernel_s(rt, "qsgd_decode", n, n * (1 + 8.0) / mem);               // dequantize + accumulate p
      return bp;
    }
    case plan::CompressKind::Onebit: {
      // p chunks of c = ceil(n/p) rounded up to 32 elements.
      const double chunk = std::ceil(std::ceil(n / p) / 32.0) * 32.0;
      bp.phases[0].compute_s = kernel_s(rt, "onebit_encode", n, n * 12.0 / mem);  // grad + error, write error, pack
      // Server: unpack p shares of its chunk and average (a decode of ~n/p x p = n elements),
      // then compress its chunk (an encode of n/p).
      bp.phases[2].compute_s = kernel_s(rt, "onebit_decode", chunk * p, chunk * p * (1.0 / 8 + 8) / mem) +
                               kernel_s(rt, "onebit_encode", chunk, chunk * 12.0 / mem);
      bp.tail_s = kernel_s(rt, "onebit_decode", n, n * (1.0 / 8 + 4) / mem);
      return bp;
    }
    case plan::CompressKind::Topk: {
      const double k = static_cast<double>(wire.payload_bytes) / 8.0;
      bp.phases[0].compute_s = kernel_s(rt, "topk_encode", n, n * 12.0 / mem);  // error feedback + selection passes
      // Decode = zero the bucket + scatter-add p shares of k; the bench times zero + one share.
      bp.tail_s = kernel_s(rt, "topk_decode", n, n * 4.0 / mem + k * 16.0 / mem) + (p - 1) * k * 16.0 / mem;
      return bp;
    }
  }
  return bp;
}

// ---- measured kernel rates (TOML) --------------------------------------------------------------

namespace {

// y at x on the [x, y] points (x ascending and > 0), between the two points around x:
// log-log (y > 0) or linear; x inside [front.x, back.x] (the callers decide outside).
double between(const std::vector<std::pair<double, double>>& v, double x, bool log_log) {
  for (std::size_t i = 1; i < v.size(); ++i)
    if (x <= v[i].first) {
      const auto [x0, y0] = v[i - 1];
      const auto [x1, y1] = v[i];
      if (!log_log) return y0 + (x - x0) / (x1 - x0) * (y1 - y0);
      const double f = std::log(x / x0) / std::log(x1 / x0);
      return std::exp(std::log(y0) + f * (std::log(y1) - std::log(y0)));
    }
  return v.back().second;
}

}  // namespace

double KernelRates::rate(const std::string& kernel, double working_set) const {
  if (working_set > 0) {
    auto it = by_size.find(kernel);
    if (it != by_size.end() && !it->second.empty()) {
      const auto& v = it->second;
      if (working_set <= v.front().first) return v.front().second;
      if (working_set >= v.back().first) return v.back().second;
      return between(v, working_set, true);
    }
  }
  auto it = Bps.find(kernel);
  return it != Bps.end() && it->second > 0 ? it->second : 0.0;
}

double KernelRates::hook_extra(const std::string& hook, double bucket_bytes) const {
  auto it = hook_extra_s.find(hook);
  if (it == hook_extra_s.end() || it->second.empty() || !(bucket_bytes > 0)) return 0.0;
  const auto& v = it->second;
  if (bucket_bytes <= v.front().first) return v.front().second;
  if (bucket_bytes >= v.back().first) return v.back().second * bucket_bytes / v.back().first;
  return between(v, bucket_bytes, false);  // linear: an added time may be 0
}

double KernelRates::codec_jitter(const std::string& hook) const {
  auto it = codec_sigma.find(hook);
  return it == codec_sigma.end() ? 0.0 : it->second;
}

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
    } else if (ks == "Bps_by_size" || ks == "hook_extra_s") {
      const bool extra = ks == "hook_extra_s";  // seconds, 0 allowed
      GS_USAGE_CHECK(node.is_table(), "kernels ", path, ":", line(node), ": key '", ks, "' must be a table");
      for (auto&& [sub, v] : *node.as_table()) {
        const std::string full = ks + "." + std::string(sub.str());
        const auto* arr = v.as_array();
        std::vector<std::pair<double, double>> pts;
        bool ok = arr && !arr->empty();
        if (ok)
          for (const auto& e : *arr) {
            const auto* pair = e.as_array();
            const auto a = pair && pair->size() == 2 ? (*pair)[0].value<double>() : std::nullopt;
            const auto b = pair && pair->size() == 2 ? (*pair)[1].value<double>() : std::nullopt;
            ok = ok && a && b && std::isfinite(*a) && *a > 0 && std::isfinite(*b) && (extra ? *b >= 0 : *b > 0) &&
                 (pts.empty() || *a > pts.back().first);
            if (!ok) break;
            pts.emplace_back(*a, *b);
          }
        GS_USAGE_CHECK(ok, "kernels ", path, ":", line(v), ": key '", full, "' must be a list of [bytes, ",
                       extra ? "seconds] pairs, bytes > 0 ascending, seconds >= 0"
                             : "bytes_per_second] pairs, numbers > 0, bytes ascending");
        if (extra) {
          GS_USAGE_CHECK(sub.str() == "fp16" || sub.str() == "bf16", "kernels ", path, ":", line(v),
                         ": unknown key '", full, "' (known: hook_extra_s.fp16, hook_extra_s.bf16)");
          k.hook_extra_s[std::string(sub.str())] = std::move(pts);
        } else {
          k.by_size[std::string(sub.str())] = std::move(pts);
        }
      }
    } else if (ks == "codec_sigma") {
      GS_USAGE_CHECK(node.is_table(), "kernels ", path, ":", line(node), ": key '", ks, "' must be a table");
      for (auto&& [sub, v] : *node.as_table()) {
        const std::string full = ks + "." + std::string(sub.str());
        GS_USAGE_CHECK(sub.str() == "fp16" || sub.str() == "bf16" || sub.str() == "powersgd", "kernels ", path, ":",
                       line(v), ": unknown key '", full,
                       "' (known: codec_sigma.fp16, codec_sigma.bf16, codec_sigma.powersgd)");
        const auto d = v.value<double>();
        GS_USAGE_CHECK(d && std::isfinite(*d) && *d >= 0, "kernels ", path, ":", line(v), ": key '", full,
                       "' must be a finite number >= 0");
        k.codec_sigma[std::string(sub.str())] = *d;
      }
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
        else if (sub.str() == "encode_s_per_matrix") k.powersgd_encode_s_per_matrix = *d;
        else if (sub.str() == "decode_s_per_matrix") k.powersgd_decode_s_per_matrix = *d;
        else if (sub.str() == "encode_s_per_bucket") k.powersgd_encode_s_per_bucket = *d;
        else if (sub.str() == "decode_s_per_bucket") k.powersgd_decode_s_per_bucket = *d;
        else if (sub.str() == "collective_s") k.powersgd_collective_s = *d;
        else if (sub.str() == "collective_extra_s") k.powersgd_collective_extra_s = *d;
        else throw UsageError("kernels " + path + ":" + line(v) + ": unknown key '" + full +
                              "' (known: powersgd.encode_flops, decode_flops, encode_Bps, decode_Bps, "
                              "encode_s_per_matrix, decode_s_per_matrix, encode_s_per_bucket, decode_s_per_bucket, "
                              "collective_s, collective_extra_s)");
      }
    } else {
      throw UsageError("kernels " + path + ":" + line(node) + ": unknown key '" + ks +
                       "' (known: name, source, Bps, Bps_by_size, powersgd, hook_extra_s, codec_sigma)");
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
  auto write_pairs = [&os](const std::string& name, const std::vector<std::pair<double, double>>& v) {
    os << name << " = [";
    for (std::size_t i = 0; i < v.size(); ++i) os << (i ? ", [" : "[") << static_cast<long long>(v[i].first) << ", " << v[i].second << "]";
    os << "]\n";
  };
  for (const auto& n : k.notes) os << "# " << n << "\n";
  os << "\n[Bps]  # fp32 input bytes per second\n";
  for (const auto& [name, v] : k.Bps) os << name << " = " << v << "\n";
  if (!k.by_size.empty()) {
    os << "\n[Bps_by_size]  # [fp32 input bytes, bytes per second]: the rate at a step's working set\n";
    for (const auto& [name, v] : k.by_size) write_pairs(name, v);
  }
  if (!k.hook_extra_s.empty()) {
    os << "\n[hook_extra_s]  # [fp32 bucket bytes, seconds]: what a cast hook adds to its all-reduce\n";
    for (const auto& [name, v] : k.hook_extra_s) write_pairs(name, v);
  }
  if (!k.codec_sigma.empty()) {
    os << "\n[codec_sigma]  # a rank's codec time from step to step: sigma as a fraction of it\n";
    for (const auto& [name, v] : k.codec_sigma) os << name << " = " << v << "\n";
  }
  if (k.powersgd_encode_flops > 0 || k.powersgd_decode_flops > 0 || k.powersgd_collective_s > 0 ||
      k.powersgd_collective_extra_s > 0) {
    os << "\n[powersgd]  # effective FLOP/s\n";
    if (k.powersgd_encode_flops > 0) os << "encode_flops = " << k.powersgd_encode_flops << "\n";
    if (k.powersgd_decode_flops > 0) os << "decode_flops = " << k.powersgd_decode_flops << "\n";
    if (k.powersgd_encode_Bps > 0) os << "encode_Bps = " << k.powersgd_encode_Bps << "\n";
    if (k.powersgd_decode_Bps > 0) os << "decode_Bps = " << k.powersgd_decode_Bps << "\n";
    if (k.powersgd_encode_s_per_matrix > 0) os << "encode_s_per_matrix = " << k.powersgd_encode_s_per_matrix << "\n";
    if (k.powersgd_decode_s_per_matrix > 0) os << "decode_s_per_matrix = " << k.powersgd_decode_s_per_matrix << "\n";
    if (k.powersgd_encode_s_per_bucket > 0) os << "encode_s_per_bucket = " << k.powersgd_encode_s_per_bucket << "\n";
    if (k.powersgd_decode_s_per_bucket > 0) os << "decode_s_per_bucket = " << k.powersgd_decode_s_per_bucket << "\n";
    if (k.powersgd_collective_s > 0)
      os << "collective_s = " << k.powersgd_collective_s << "  # each collective at least (the hook's own)\n";
    if (k.powersgd_collective_extra_s > 0)
      os << "collective_extra_s = " << k.powersgd_collective_extra_s
         << "  # what the hook adds to each collective (beyond a plain all-reduce)\n";
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
