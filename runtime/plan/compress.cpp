// gradsync/plan/compress.cpp — see compress.hpp.
#include "plan/compress.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace gradsync::plan {
namespace {

struct Entry {
  const char* name;
  CompressKind kind;
  const char* kind_name;
  std::vector<std::string> keys;  // the spec parameters it takes
};

const std::vector<Entry>& table() {
  static const std::vector<Entry> entries = {
      {"none", CompressKind::None, "none", {}},
      {"fp16", CompressKind::Fp16, "fp16", {}},
      {"bf16", CompressKind::Bf16, "bf16", {}},
      {"powersgd",
       CompressKind::PowerSgd,
       "powersgd",
       {"rank", "start", "min_rate", "warm_start", "error_feedback", "threads"}},
      {"qsgd", CompressKind::Qsgd, "qsgd", {"levels", "bucket"}},
      {"onebit", CompressKind::Onebit, "onebit", {}},
      {"sign", CompressKind::Onebit, "onebit", {}},
      {"topk", CompressKind::Topk, "topk", {"ratio"}},
  };
  return entries;
}

const Entry& find(const std::string& name) {
  for (const auto& e : table())
    if (name == e.name) return e;
  std::string known;
  for (const auto& e : table()) known += (known.empty() ? "" : ", ") + std::string(e.name);
  throw UsageError("option --compress: unknown compressor '" + name + "' (known: " + known + ")");
}

}  // namespace

const std::vector<std::string>& compressor_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& e : table()) v.emplace_back(e.name);
    return v;
  }();
  return names;
}

const std::vector<std::string>& compressor_keys(const std::string& name) { return find(name).keys; }

CompressorSpec parse_compressor(const std::string& text) {
  CompressorSpec c;
  c.spec = parse_spec(text, "--compress");
  const Entry& e = find(c.spec.name);
  try {
    c.spec.allow_only(e.keys);
  } catch (const UsageError& err) {
    throw UsageError(std::string("option --compress: ") + err.what());
  }
  c.kind = e.kind;
  c.kind_name = e.kind_name;
  const Spec& s = c.spec;
  const std::string t = s.str();
  switch (c.kind) {
    case CompressKind::PowerSgd: {
      GS_USAGE_CHECK(s.has("rank"), "option --compress: '", t, "' needs rank=R (R >= 1)");
      const long long rank = s.get_int("rank", 1);
      GS_USAGE_CHECK(rank >= 1 && rank <= kPowerSgdMaxRank, "option --compress: '", t, "': rank must be in 1..",
                     kPowerSgdMaxRank, ", got ", rank);
      c.rank = static_cast<int>(rank);
      c.start = s.get_int("start", c.start);
      GS_USAGE_CHECK(c.start >= 0, "option --compress: '", t, "': start must be a step number >= 0, got ", c.start);
      c.min_rate = s.get_double("min_rate", c.min_rate);
      GS_USAGE_CHECK(c.min_rate > 0, "option --compress: '", t, "': min_rate must be positive, got ", c.min_rate);
      for (const char* key : {"warm_start", "error_feedback"}) {
        const long long v = s.get_int(key, 1);
        GS_USAGE_CHECK(v == 0 || v == 1, "option --compress: '", t, "': ", key, " must be 0 or 1, got ", v);
        (std::string(key) == "warm_start" ? c.warm_start : c.error_feedback) = v == 1;
      }
      const long long threads = s.get_int("threads", c.powersgd_threads);
      GS_USAGE_CHECK(threads >= 1 && threads <= kPowerSgdMaxThreads, "option --compress: '", t,
                     "': threads must be in 1..", kPowerSgdMaxThreads, ", got ", threads);
      c.powersgd_threads = static_cast<int>(threads);
      break;
    }
    case CompressKind::Qsgd: {
      GS_USAGE_CHECK(s.has("levels"), "option --compress: '", t, "' needs levels=S (1..", kQsgdMaxLevels, ")");
      const long long levels = s.get_int("levels", 0);
      GS_USAGE_CHECK(levels >= 1 && levels <= kQsgdMaxLevels, "option --compress: '", t, "': levels must be in 1..",
                     kQsgdMaxLevels, " (one code byte holds a sign and 7 bits of level), got ", levels);
      c.qsgd_levels = static_cast<int>(levels);
      c.qsgd_bucket = s.get_int("bucket", c.qsgd_bucket);
      GS_USAGE_CHECK(c.qsgd_bucket >= 1, "option --compress: '", t,
                     "': bucket must be a positive element count, got ", c.qsgd_bucket);
      break;
    }
    case CompressKind::Topk: {
      GS_USAGE_CHECK(s.has("ratio"), "option --compress: '", t, "' needs ratio=F with 0 < F <= 1");
      c.topk_ratio = s.get_double("ratio", 0);
      GS_USAGE_CHECK(c.topk_ratio > 0 && c.topk_ratio <= 1, "option --compress: '", t,
                     "': ratio must be in (0, 1], got ", c.topk_ratio);
      break;
    }
    default: break;
  }
  return c;
}

const char* coll_name(Coll c) {
  switch (c) {
    case Coll::Allreduce: return "allreduce";
    case Coll::Allgather: return "allgather";
    case Coll::Alltoall: return "alltoall";
  }
  return "?";
}

int powersgd_rank(std::int64_t rows, std::int64_t cols, int rank, double min_rate) {
  if (rows <= 0 || cols <= 0) return 0;
  const int r = static_cast<int>(std::min<std::int64_t>({rows, cols, rank}));
  // torch's _should_compress: compressed size * min rate < uncompressed size.
  if (static_cast<double>(rows + cols) * r * min_rate >= static_cast<double>(rows) * static_cast<double>(cols)) return 0;
  return r;
}

std::uint64_t allreduce_sent_bytes(std::uint64_t bytes, int p) {
  if (p <= 1) return 0;
  return static_cast<std::uint64_t>(std::llround(2.0 * (p - 1) / p * static_cast<double>(bytes)));
}

std::uint64_t gather_sent_bytes(std::uint64_t block, int p) {
  return p <= 1 ? 0 : static_cast<std::uint64_t>(p - 1) * block;
}

WirePlan wire_plan(const CompressorSpec& c, const std::vector<TensorShape>& tensors, int wire_elem_bytes, int p) {
  GS_CHECK(p >= 1, "wire plan for ", p, " ranks");
  GS_CHECK(wire_elem_bytes == 4 || wire_elem_bytes == 2, "wire element size ", wire_elem_bytes);
  WirePlan w;
  std::uint64_t n = 0;
  for (const auto& t : tensors) n += static_cast<std::uint64_t>(t.numel);
  const std::uint64_t up = static_cast<std::uint64_t>(p);
  switch (c.kind) {
    case CompressKind::None:
    case CompressKind::Fp16:
    case CompressKind::Bf16: {
      const std::uint64_t e = c.kind == CompressKind::None ? static_cast<std::uint64_t>(wire_elem_bytes) : 2;
      w.phases.push_back({Coll::Allreduce, n * e});
      w.payload_bytes = n * e;
      w.wire_bytes = allreduce_sent_bytes(n * e, p);
      return w;
    }
    case CompressKind::PowerSgd: {
      for (const auto& t : tensors) {
        const std::int64_t cols = t.rows > 0 ? t.numel / t.rows : 0;
        const int r = t.ndim >= 2 && t.numel > 0 ? powersgd_rank(t.rows, cols, c.rank, c.min_rate) : 0;
        if (r > 0) {
          w.p_elems += t.rows * r;
          w.q_elems += cols * r;
        } else {
          w.plain_elems += t.numel;
        }
      }
      // The runtime runs the plain all-reduce and P's back to back after computing P, then Q's.
      for (std::int64_t elems : {w.plain_elems, w.p_elems, w.q_elems}) {
        if (elems == 0) continue;
        const auto b = static_cast<std::uint64_t>(elems) * 4;
        w.phases.push_back({Coll::Allreduce, b});
        w.payload_bytes += b;
        w.wire_bytes += allreduce_sent_bytes(b, p);
      }
      return w;
    }
    case CompressKind::Qsgd: {
      const std::uint64_t block = static_cast<std::uint64_t>(c.qsgd_bucket);
      const std::uint64_t per_rank = (n + 3) / 4 * 4 + (n + block - 1) / block * 4;
      w.phases.push_back({Coll::Allgather, per_rank * up});
      w.payload_bytes = per_rank;
      w.wire_bytes = gather_sent_bytes(per_rank, p);
      return w;
    }
    case CompressKind::Onebit: {
      const std::uint64_t chunk = ((n + up - 1) / up + 31) / 32 * 32;
      const std::uint64_t cb = chunk / 8;
      w.phases.push_back({Coll::Alltoall, cb * up});
      w.phases.push_back({Coll::Allgather, 4 * up * up});
      w.phases.push_back({Coll::Allgather, (cb + 4) * up});
      w.payload_bytes = cb * up + 4 * up + cb + 4;
      w.wire_bytes = gather_sent_bytes(cb, p) + gather_sent_bytes(4 * up, p) + gather_sent_bytes(cb + 4, p);
      return w;
    }
    case CompressKind::Topk: {
      const double dn = static_cast<double>(n);
      const std::uint64_t k =
          n > 0 ? static_cast<std::uint64_t>(std::clamp(std::ceil(c.topk_ratio * dn * (1 - 1e-12)), 1.0, dn)) : 0;
      w.phases.push_back({Coll::Allgather, 8 * k * up});
      w.payload_bytes = 8 * k;
      w.wire_bytes = gather_sent_bytes(8 * k, p);
      return w;
    }
  }
  return w;
}

}  // namespace gradsync::plan
