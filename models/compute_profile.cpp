// gradsync/models/compute_profile.cpp — built-in compute profiles, layer times, TOML I/O.
#include "models/compute_profile.hpp"

#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>

// toml++ installs toml++/toml.hpp upstream; Debian's 3.3 package ships toml++/toml.h.
#if __has_include(<toml++/toml.hpp>)
#include <toml++/toml.hpp>
#else
#include <toml++/toml.h>
#endif

#include "core/error.hpp"
#include "core/named.hpp"

namespace gradsync::models {

namespace {

// ---- built-in profiles -------------------------------------------------------------------
// Peaks are the vendors' datasheet numbers (dense, no sparsity). `efficiency`,
// `per_layer_overhead_s` and the optimizer's share of memory bandwidth are ASSUMPTIONS
// typical of PyTorch eager training, not measurements: calibrate them (or give `measured`
// per-layer times) before trusting absolute step times. Note that PyTorch runs fp32
// convolutions as TF32 on Ampere and later by default, so fp32 CNN layers can beat the
// non-tensor fp32 peak used here.
ComputeProfile make_h200() {
  ComputeProfile p;
  p.name = "h200";
  p.device = "NVIDIA H200 SXM 141GB";
  p.source =
      "NVIDIA H200 Tensor Core GPU datasheet: FP32 67 TFLOPS, BF16/FP16 Tensor Core 1,979 "
      "TFLOPS with sparsity = 989 dense, HBM3e 4.8 TB/s; efficiency 0.4, 20 us per layer "
      "and optimizer at 70% of HBM bandwidth are assumptions";
  p.peak_flops = 67e12;
  p.peak_flops_half = 989e12;
  p.efficiency = 0.4;
  p.per_layer_overhead_s = 20e-6;
  p.optimizer_bytes_per_s = 0.7 * 4.8e12;
  return p;
}

ComputeProfile make_a100() {
  ComputeProfile p;
  p.name = "a100";
  p.device = "NVIDIA A100-SXM4-80GB";
  p.source =
      "NVIDIA A100 Tensor Core GPU datasheet: FP32 19.5 TFLOPS, BF16/FP16 Tensor Core 312 "
      "TFLOPS dense, HBM2e 2,039 GB/s; efficiency 0.4, 20 us per layer and optimizer at 70% "
      "of HBM bandwidth are assumptions";
  p.peak_flops = 19.5e12;
  p.peak_flops_half = 312e12;
  p.efficiency = 0.4;
  p.per_layer_overhead_s = 20e-6;
  p.optimizer_bytes_per_s = 0.7 * 2.039e12;
  return p;
}

ComputeProfile make_v100() {
  ComputeProfile p;
  p.name = "v100";
  p.device = "NVIDIA Tesla V100 SXM2 32GB";
  p.source =
      "NVIDIA Tesla V100 datasheet: FP32 15.7 TFLOPS, FP16 Tensor Core 125 TFLOPS (no "
      "bf16), HBM2 900 GB/s; efficiency 0.4, 20 us per layer and optimizer at 70% of HBM "
      "bandwidth are assumptions";
  p.peak_flops = 15.7e12;
  p.peak_flops_half = 125e12;
  p.efficiency = 0.4;
  p.per_layer_overhead_s = 20e-6;
  p.optimizer_bytes_per_s = 0.7 * 900e9;
  return p;
}

ComputeProfile make_cpu() {
  ComputeProfile p;
  p.name = "cpu";
  p.device = "2 x86-64 cores with two 256-bit FMA pipes each (AVX2, or AVX-512 double-pumped)";
  p.source =
      "assumption: 2 cores x 32 fp32 FLOP/cycle x 2.5 GHz = 160 GFLOP/s peak; half "
      "precision computes in fp32 on CPU (same peak); efficiency 0.3 for Eigen GEMM on "
      "small layers, 2 us per layer, optimizer streaming at 15 GB/s — calibrate";
  p.peak_flops = 160e9;
  p.peak_flops_half = 160e9;
  p.efficiency = 0.3;
  p.per_layer_overhead_s = 2e-6;
  p.optimizer_bytes_per_s = 15e9;
  return p;
}

const NamedBuilders<ComputeProfile>& registry() {
  static const NamedBuilders<ComputeProfile> r = {
      {"h200", make_h200}, {"a100", make_a100}, {"v100", make_v100}, {"cpu", make_cpu}};
  return r;
}

// ---- validation ------------------------------------------------------------------------------
struct Problem {
  std::string key;      // TOML key, "measured.<layer>" for a measurement
  std::string message;  // what is wrong, with the value
};

std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// The first out-of-range field, or nothing. Shared by validate_profile and the loader,
// which adds the file and line.
std::optional<Problem> first_problem(const ComputeProfile& p) {
  auto positive = [](double v) { return std::isfinite(v) && v > 0; };
  if (p.name.empty()) return Problem{"name", "must be a non-empty string"};
  struct Field {
    const char* key;
    double value;
  };
  for (const Field& f :
       {Field{"peak_flops", p.peak_flops}, Field{"peak_flops_half", p.peak_flops_half},
        Field{"efficiency", p.efficiency}, Field{"optimizer_bytes_per_s", p.optimizer_bytes_per_s}})
    if (!positive(f.value))
      return Problem{f.key, "must be a finite number > 0, got " + num(f.value)};
  if (p.efficiency > 1) return Problem{"efficiency", "must be <= 1, got " + num(p.efficiency)};
  if (!std::isfinite(p.backward_efficiency) || p.backward_efficiency < 0 || p.backward_efficiency > 1)
    return Problem{"backward_efficiency", "must be in [0, 1] (0 or absent: as efficiency), got " + num(p.backward_efficiency)};
  for (const Field& f : {Field{"reducer_per_step_s", p.reducer_per_step_s},
                         Field{"reducer_per_bucket_s", p.reducer_per_bucket_s}, Field{"rank_jitter", p.rank_jitter},
                         Field{"codec_wait_s", p.codec_wait_s}, Field{"codec_wait_frac", p.codec_wait_frac}})
    if (!std::isfinite(f.value) || f.value < 0)
      return Problem{f.key, "must be a finite number >= 0, got " + num(f.value)};
  if (!std::isfinite(p.per_layer_overhead_s) || p.per_layer_overhead_s < 0)
    return Problem{"per_layer_overhead_s",
                   "must be a finite number >= 0, got " + num(p.per_layer_overhead_s)};
  for (const auto& [layer, t] : p.measured) {
    if (layer.empty()) return Problem{"measured", "has an empty layer name"};
    for (double v : {t.first, t.second})
      if (!std::isfinite(v) || v < 0)
        return Problem{"measured." + layer, "times must be finite and >= 0, got " + num(v)};
  }
  return std::nullopt;
}

// ---- TOML reading ----------------------------------------------------------------------------
constexpr const char* kKnownKeys[] = {"name",
                                      "device",
                                      "source",
                                      "peak_flops",
                                      "peak_flops_half",
                                      "efficiency",
                                      "backward_efficiency",
                                      "per_layer_overhead_s",
                                      "optimizer_bytes_per_s",
                                      "reducer_per_step_s",
                                      "reducer_per_bucket_s",
                                      "rank_jitter",
                                      "codec_wait_s",
                                      "codec_wait_frac",
                                      "measured"};

class ProfileReader {
 public:
  explicit ProfileReader(std::string path) : path_(std::move(path)) {}

  ComputeProfile read() {
    const toml::table tbl = parse();
    for (auto&& [k, v] : tbl) {
      bool known = false;
      std::string all;
      for (const char* kk : kKnownKeys) {
        known = known || k.str() == kk;
        all += (all.empty() ? "" : ", ") + std::string(kk);
      }
      if (!known)
        fail(line_of(k.source()), std::string(k.str()), "is unknown (known: " + all + ")");
    }
    ComputeProfile p;
    p.name = get_string(tbl, "name");
    p.device = get_string(tbl, "device");
    p.source = get_string(tbl, "source");
    p.peak_flops = get_number(tbl, "peak_flops");
    p.peak_flops_half = get_number(tbl, "peak_flops_half");
    p.efficiency = get_number(tbl, "efficiency");
    p.per_layer_overhead_s = get_number(tbl, "per_layer_overhead_s");
    p.optimizer_bytes_per_s = get_number(tbl, "optimizer_bytes_per_s");
    for (auto [key, dst] : {std::pair{"backward_efficiency", &p.backward_efficiency},
                            std::pair{"reducer_per_step_s", &p.reducer_per_step_s},
                            std::pair{"reducer_per_bucket_s", &p.reducer_per_bucket_s},
                            std::pair{"rank_jitter", &p.rank_jitter},
                            std::pair{"codec_wait_s", &p.codec_wait_s},
                            std::pair{"codec_wait_frac", &p.codec_wait_frac}})
      if (const toml::node* n = tbl.get(key)) *dst = number(*n, key);
    if (const toml::node* m = tbl.get("measured")) read_measured(*m, p);
    if (auto problem = first_problem(p)) {
      auto it = lines_.find(problem->key);
      fail(it == lines_.end() ? 0 : it->second, problem->key, problem->message);
    }
    return p;
  }

 private:
  toml::table parse() {
    std::ifstream in(path_, std::ios::binary);
    if (!in)
      throw UsageError("compute profile '" + path_ + "': cannot open: " + std::strerror(errno));
    std::ostringstream text;
    text << in.rdbuf();
    try {
      return toml::parse(text.str(), path_);
    } catch (const toml::parse_error& e) {
      const auto& b = e.source().begin;
      throw UsageError(detail::concat("compute profile ", path_, ":", b.line, ":", b.column,
                                      ": TOML syntax error: ", e.description()));
    }
  }

  static int64_t line_of(const toml::source_region& r) {
    return static_cast<int64_t>(r.begin.line);
  }

  [[noreturn]] void fail(int64_t line, const std::string& key, const std::string& what) const {
    std::string where = "compute profile " + path_;
    if (line > 0) where += ":" + std::to_string(line);
    throw UsageError(where + ": key '" + key + "' " + what);
  }

  static std::string type_name(const toml::node& n) {
    std::ostringstream os;
    os << n.type();
    return os.str();
  }

  const toml::node& require(const toml::table& t, const std::string& key) {
    const toml::node* n = t.get(key);
    if (!n) fail(0, key, "is missing");
    lines_[key] = line_of(n->source());
    return *n;
  }

  std::string get_string(const toml::table& t, const std::string& key) {
    const toml::node& n = require(t, key);
    if (!n.is_string()) fail(line_of(n.source()), key, "must be a string, got " + type_name(n));
    return n.as_string()->get();
  }

  double number(const toml::node& n, const std::string& key) const {
    if (n.is_integer()) return static_cast<double>(n.as_integer()->get());
    if (n.is_floating_point()) return n.as_floating_point()->get();
    fail(line_of(n.source()), key, "must be a number, got " + type_name(n));
  }

  double get_number(const toml::table& t, const std::string& key) {
    return number(require(t, key), key);
  }

  void read_measured(const toml::node& m, ComputeProfile& p) {
    lines_["measured"] = line_of(m.source());
    if (!m.is_table())
      fail(line_of(m.source()), "measured",
           "must be a table of \"layer\" = [fwd_s, bwd_s], got " + type_name(m));
    for (auto&& [k, v] : *m.as_table()) {
      const std::string key = "measured." + std::string(k.str());
      const auto line = line_of(v.source());
      lines_[key] = line;
      const toml::array* a = v.as_array();
      if (!a || a->size() != 2)
        fail(line, key, "must be an array of two numbers [fwd_s, bwd_s] (seconds per sample)");
      p.measured[std::string(k.str())] = {number((*a)[0], key), number((*a)[1], key)};
    }
  }

  std::string path_;
  std::map<std::string, int64_t> lines_;  // key -> line, for range errors after reading
};

// ---- TOML writing ----------------------------------------------------------------------------
// A TOML basic string: quotes, backslashes and control characters escaped.
std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

// Shortest text that reads back to the same double, always a TOML float.
std::string toml_float(double v) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, res.ptr);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

}  // namespace

void validate_profile(const ComputeProfile& p) {
  if (auto problem = first_problem(p))
    throw UsageError("compute profile '" + p.name + "': " + problem->key + " " + problem->message);
}

LayerTimes layer_times(const ModelSpec& model, const ComputeProfile& profile, int64_t batch,
                       bool half_precision) {
  GS_USAGE_CHECK(batch >= 1, "layer_times: batch must be >= 1, got ", batch);
  validate_profile(profile);
  const double peak = half_precision ? profile.peak_flops_half : profile.peak_flops;
  const double rate = peak * profile.efficiency;
  const double bwd_rate = peak * (profile.backward_efficiency > 0 ? profile.backward_efficiency : profile.efficiency);
  const double b = static_cast<double>(batch);
  LayerTimes t;
  t.fwd_s.reserve(model.layers.size());
  t.bwd_s.reserve(model.layers.size());
  for (const auto& l : model.layers) {
    double fwd = l.fwd_flops / rate;
    double bwd = l.bwd_flops / bwd_rate;
    if (auto it = profile.measured.find(l.name); it != profile.measured.end()) {
      fwd = it->second.first;
      bwd = it->second.second;
    }
    t.fwd_s.push_back(profile.per_layer_overhead_s + b * fwd);
    t.bwd_s.push_back(profile.per_layer_overhead_s + b * bwd);
  }
  return t;
}

double optimizer_step_s(const ModelSpec& model, const ComputeProfile& profile,
                        double bytes_per_param) {
  GS_USAGE_CHECK(bytes_per_param >= 0, "optimizer_step_s: bytes_per_param must be >= 0, got ",
                 bytes_per_param);
  validate_profile(profile);
  return static_cast<double>(model.num_parameters()) * bytes_per_param /
         profile.optimizer_bytes_per_s;
}

const std::vector<std::string>& profile_names() { return registry().names(); }

ComputeProfile builtin_profile(const std::string& name) {
  if (auto p = registry().build(name)) return *p;
  throw UsageError("unknown compute profile '" + name + "'; built-in profiles: " + registry().joined());
}

ComputeProfile load_profile(const std::string& name_or_path) {
  if (auto p = registry().build(name_or_path)) return *p;
  std::error_code ec;
  if (!std::filesystem::exists(name_or_path, ec))
    throw UsageError("unknown compute profile '" + name_or_path + "': not a built-in (" +
                     registry().joined() + ") and no such file");
  return ProfileReader(name_or_path).read();
}

void save_profile(const ComputeProfile& p, const std::string& path) {
  validate_profile(p);
  std::ostringstream os;
  os << "# gradsync compute profile (format: models/compute_profile.hpp, models/README.md)\n"
     << "name = " << toml_string(p.name) << "\n"
     << "device = " << toml_string(p.device) << "\n"
     << "source = " << toml_string(p.source) << "\n"
     << "peak_flops = " << toml_float(p.peak_flops) << "            # FLOP/s fp32\n"
     << "peak_flops_half = " << toml_float(p.peak_flops_half) << "       # FLOP/s fp16/bf16\n"
     << "efficiency = " << toml_float(p.efficiency) << "\n";
  if (p.backward_efficiency > 0)
    os << "backward_efficiency = " << toml_float(p.backward_efficiency) << "  # backward's own fraction of peak\n";
  os
     << "per_layer_overhead_s = " << toml_float(p.per_layer_overhead_s) << "\n"
     << "optimizer_bytes_per_s = " << toml_float(p.optimizer_bytes_per_s) << "\n";
  if (p.reducer_per_step_s > 0 || p.reducer_per_bucket_s > 0)
    os << "reducer_per_step_s = " << toml_float(p.reducer_per_step_s) << "\n"
       << "reducer_per_bucket_s = " << toml_float(p.reducer_per_bucket_s) << "\n";
  if (p.rank_jitter > 0)
    os << "rank_jitter = " << toml_float(p.rank_jitter) << "  # sigma of a rank's step / its compute\n";
  if (p.codec_wait_s > 0 || p.codec_wait_frac > 0)
    os << "codec_wait_s = " << toml_float(p.codec_wait_s) << "  # the slowest rank's codec per bucket, beyond the median,\n"
       << "codec_wait_frac = " << toml_float(p.codec_wait_frac) << "  # over E[max of p]: codec_wait_s + codec_wait_frac x codec\n";
  if (!p.measured.empty()) {
    os << "\n[measured]  # layer = [fwd_s, bwd_s], seconds per sample\n";
    for (const auto& [layer, t] : p.measured)
      os << toml_string(layer) << " = [" << toml_float(t.first) << ", " << toml_float(t.second)
         << "]\n";
  }
  // Atomic: write a temp file next to the target, then rename over it.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error("save_profile: cannot create '" + tmp + "': " + std::strerror(errno));
    out << os.str();
    out.close();
    if (!out) throw Error("save_profile: cannot write '" + tmp + "'");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    const std::string why = ec.message();
    std::filesystem::remove(tmp, ec);
    throw Error("save_profile: cannot rename '" + tmp + "' to '" + path + "': " + why);
  }
}

}  // namespace gradsync::models
