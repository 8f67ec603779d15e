// gradsync/netmodel/grid.cpp — list/range parsing and the cross-product evaluation.
#include "netmodel/grid.hpp"

#include <unistd.h>

#include <cctype>
#include <cmath>

#include "core/error.hpp"
#include "core/h5io.hpp"
#include "core/provenance.hpp"
#include "core/units.hpp"
#include "plan/algos.hpp"

namespace gradsync::netmodel {

namespace {
constexpr std::size_t kMaxValues = 10'000'000;

double number(const std::string& text, const std::string& option) {
  // Sizes with suffixes are accepted where a plain number is ("4M" for --chunk-bytes).
  if (!text.empty() && std::isalpha(static_cast<unsigned char>(text.back())))
    return static_cast<double>(parse_size(text, option));
  return parse_double(text, option);
}
}  // namespace

std::vector<double> parse_number_list(const std::string& text, const std::string& option) {
  GS_USAGE_CHECK(!text.empty(), "option ", option, ": empty value");
  std::vector<double> out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t comma = text.find(',', pos);
    const std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    GS_USAGE_CHECK(!item.empty(), "option ", option, ": empty item in '", text, "'");
    const std::size_t dots = item.find("..");
    if (dots == std::string::npos) {
      out.push_back(number(item, option));
    } else {
      const std::size_t colon = item.find(':', dots);
      const std::string a = item.substr(0, dots);
      const std::string b = item.substr(dots + 2, colon == std::string::npos ? std::string::npos : colon - dots - 2);
      const double lo = parse_double(a, option), hi = parse_double(b, option);
      const double step = colon == std::string::npos ? 1.0 : parse_double(item.substr(colon + 1), option);
      GS_USAGE_CHECK(lo == std::floor(lo) && hi == std::floor(hi) && step == std::floor(step), "option ", option,
                     ": range '", item, "' must be integers A..B or A..B:S");
      GS_USAGE_CHECK(step > 0, "option ", option, ": range step must be > 0 in '", item, "'");
      GS_USAGE_CHECK(hi >= lo, "option ", option, ": range '", item, "' is empty (B < A)");
      GS_USAGE_CHECK((hi - lo) / step < kMaxValues, "option ", option, ": range '", item, "' has too many values");
      for (double v = lo; v <= hi; v += step) out.push_back(v);
    }
    GS_USAGE_CHECK(out.size() <= kMaxValues, "option ", option, ": too many values");
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

std::vector<std::string> parse_string_list(const std::string& text, const std::string& option, char sep) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t at = text.find(sep, pos);
    std::string item = text.substr(pos, at == std::string::npos ? std::string::npos : at - pos);
    GS_USAGE_CHECK(!item.empty(), "option ", option, ": empty item in '", text, "'");
    out.push_back(std::move(item));
    if (at == std::string::npos) break;
    pos = at + 1;
  }
  return out;
}

std::vector<double> parse_chunk_list(const std::string& text, const std::string& option) {
  std::vector<double> out;
  for (const auto& item : parse_string_list(text, option)) {
    if (item == "auto") {
      out.push_back(kAutoChunk);
      continue;
    }
    const auto v = parse_number_list(item, option);
    for (double x : v) GS_USAGE_CHECK(x >= 0, "option ", option, ": must be >= 0 bytes or auto, got '", item, "'");
    out.insert(out.end(), v.begin(), v.end());
  }
  GS_USAGE_CHECK(out.size() <= kMaxValues, "option ", option, ": too many values");
  return out;
}

namespace {
int as_int(double v, const std::string& option) {
  GS_USAGE_CHECK(v == std::floor(v) && std::abs(v) < 2e9, "option --", option, ": ", v, " is not an integer");
  return static_cast<int>(v);
}
}  // namespace

void apply_axis(const Axis& a, std::size_t i, PredictConfig& c) {
  const std::string& n = a.name;
  if (!a.numbers.empty()) {
    const double v = a.numbers[i];
    if (n == "nodes") c.nodes = as_int(v, n);
    else if (n == "ranks-per-node") c.ranks_per_node = as_int(v, n);
    else if (n == "batch-per-rank") c.batch_per_rank = as_int(v, n);
    else if (n == "bucket-mb") c.bucket_mb = v;
    else if (n == "first-bucket-mb") c.first_bucket_mb = v;
    else if (n == "chunk-bytes") c.chunk_bytes = v;
    else if (n == "channels") c.channels = as_int(v, n);
    else if (n == "loader-workers") c.loader_workers = as_int(v, n);
    else if (n == "data-time-us") c.data_time_s = v * 1e-6;
    else if (n == "compute-threads") {
      GS_USAGE_CHECK(v >= 0 && std::isfinite(v), "option --compute-threads: must be >= 0, got ", v);
      c.compute_threads = v;
    }
    else if (n == "machine-ranks") {
      GS_USAGE_CHECK(v >= 1, "option --machine-ranks: must be >= 1, got ", v);
      c.machine_ranks = as_int(v, n);
    } else if (n == "machine-cores") {
      GS_USAGE_CHECK(v >= 1, "option --machine-cores: must be >= 1, got ", v);
      c.machine_cores = as_int(v, n);
    }
    else if (n == "samples-per-epoch") c.samples_per_epoch = static_cast<int64_t>(v);
    else if (n == "accumulate") c.accumulate = as_int(v, n);
    else if (n == "overlap") {
      GS_USAGE_CHECK(v == 0 || v == 1, "option --overlap: must be 1 (on) or 0 (off), got ", v);
      c.overlap = v != 0;
    }
    else throw Error("apply_axis: unknown numeric axis '" + n + "'");
  } else {
    const std::string& v = a.strings[i];
    if (n == "fabric") c.fabric = v;
    else if (n == "buffers") c.registered_buckets = plan::parse_buffers(v);
    else if (n == "intra") c.intra = v;
    else if (n == "algo") c.algo = v;
    else if (n == "precision") c.precision = v;
    else if (n == "model") c.model = v;
    else if (n == "compute-profile") c.compute_profile = v;
    else if (n == "kernels") c.kernels = v;
    else if (n == "optimizer") c.optimizer = v;
    else if (n == "compress") c.compress = v;
    else throw Error("apply_axis: unknown string axis '" + n + "'");
  }
}

GridTable run_grid(const PredictConfig& base, const std::vector<Axis>& all_axes, Predictor& predictor) {
  GridTable g;
  for (const auto& a : all_axes) {
    GS_USAGE_CHECK(a.size() > 0, "option --", a.name, ": no values");
    if (a.size() > 1) g.axes.push_back(a);
  }
  PredictConfig c = base;
  for (const auto& a : all_axes)
    if (a.size() == 1) apply_axis(a, 0, c);
  std::size_t total = 1;
  for (const auto& a : g.axes) {
    GS_USAGE_CHECK(total <= 100'000'000 / a.size(), "grid: more than 10^8 configurations");
    total *= a.size();
  }
  g.rows = total;
  for (const auto& a : g.axes) {
    if (a.numbers.empty()) g.axis_strings.emplace_back().reserve(total);
    else g.axis_numbers.emplace_back().reserve(total);
  }
  for (auto* v : {&g.step_time_s, &g.epoch_time_s, &g.comm_exposed_s, &g.comm_total_s, &g.data_s, &g.compute_s,
                  &g.optimizer_s, &g.bytes_sent})
    v->reserve(total);
  g.steps_per_epoch.reserve(total);
  std::vector<std::size_t> idx(g.axes.size(), 0);
  for (std::size_t a = 0; a < g.axes.size(); ++a) apply_axis(g.axes[a], 0, c);
  for (std::size_t row = 0; row < total; ++row) {
    const StepResult r = predictor.predict(c, false);
    std::size_t ni = 0, si = 0;
    for (std::size_t a = 0; a < g.axes.size(); ++a) {
      if (g.axes[a].numbers.empty()) g.axis_strings[si++].push_back(g.axes[a].strings[idx[a]]);
      else g.axis_numbers[ni++].push_back(g.axes[a].numbers[idx[a]]);
    }
    g.step_time_s.push_back(r.step_time_s);
    g.epoch_time_s.push_back(r.epoch_time_s);
    g.comm_exposed_s.push_back(r.comm_exposed_s);
    g.comm_total_s.push_back(r.comm_total_s);
    g.data_s.push_back(r.data_s);
    g.compute_s.push_back(r.forward_s + r.backward_s);
    g.optimizer_s.push_back(r.optimizer_s);
    g.bytes_sent.push_back(r.bytes_sent);
    g.steps_per_epoch.push_back(r.steps_per_epoch);
    // Odometer: last axis fastest.
    for (std::size_t a = g.axes.size(); a-- > 0;) {
      if (++idx[a] < g.axes[a].size()) {
        apply_axis(g.axes[a], idx[a], c);
        break;
      }
      idx[a] = 0;
      apply_axis(g.axes[a], 0, c);
    }
  }
  return g;
}

Provenance model_provenance(const std::vector<std::string>& argv) {
  Provenance p;
  p.program = "gradsync-model";
  p.argv = argv;
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  p.hostnames = {host[0] ? host : "unknown"};
  return p;
}

void write_grid(const GridTable& g, const std::string& path, const std::vector<std::string>& argv) {
  h5::Writer w(path);
  write_provenance(w, model_provenance(argv));
  w.group("/grid");
  std::vector<std::string> names;
  std::size_t ni = 0, si = 0;
  for (const auto& a : g.axes) {
    std::string col = a.name;
    for (auto& ch : col)
      if (ch == '-') ch = '_';
    names.push_back(col);
    if (a.numbers.empty()) w.write("/grid/" + col, g.axis_strings[si++]);
    else w.write("/grid/" + col, g.axis_numbers[ni++]);
  }
  w.attr("/grid", "axes", names);
  w.attr("/grid", "rows", static_cast<std::int64_t>(g.rows));
  w.write("/grid/step_time_s", g.step_time_s);
  w.write("/grid/epoch_time_s", g.epoch_time_s);
  w.write("/grid/comm_exposed_s", g.comm_exposed_s);
  w.write("/grid/comm_total_s", g.comm_total_s);
  w.write("/grid/data_s", g.data_s);
  w.write("/grid/compute_s", g.compute_s);
  w.write("/grid/optimizer_s", g.optimizer_s);
  w.write("/grid/bytes_sent", g.bytes_sent);
  w.write("/grid/steps_per_epoch", g.steps_per_epoch);
  w.commit();
}

}  // namespace gradsync::netmodel
