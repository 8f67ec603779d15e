#include "bench/report.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "core/error.hpp"
#include "core/json.hpp"

namespace gradsync::bench {

namespace {

// nccl-tests' time column: fewer decimals as the number grows, always 7 wide.
std::string time_text(double us) {
  char buf[64];
  if (us >= 10000.0) std::snprintf(buf, sizeof buf, "%7.0f", us);
  else if (us >= 100.0) std::snprintf(buf, sizeof buf, "%7.1f", us);
  else std::snprintf(buf, sizeof buf, "%7.2f", us);
  return buf;
}

std::string wrong_text(std::int64_t nwrong) { return nwrong < 0 ? "N/A" : std::to_string(nwrong); }

bool show_algo_column(const RunInfo& info) { return info.opts.algo == "auto"; }

std::string dtype_text(const RunInfo& info) { return info.pingpong() ? "byte" : dtype_name(info.opts.dtype); }

}  // namespace

std::string RunInfo::redop_text() const { return has_redop ? redop_name(opts.redop) : "none"; }

std::int64_t total_wrong(const std::vector<SizeResult>& rows) {
  std::int64_t total = 0;
  for (const auto& r : rows) {
    for (const PhaseResult* p : {&r.oop, &r.ip}) {
      if (p->nwrong < 0 && p->time_us.empty()) continue;  // pingpong's unused in-place half
      if (p->nwrong < 0) return -1;
      total += p->nwrong;
    }
  }
  return total;
}

double avg_busbw(const RunInfo& info, const std::vector<SizeResult>& rows) {
  double sum = 0;
  int n = 0;
  for (const auto& r : rows) {
    sum += r.oop.busbw_GBps;
    ++n;
    if (!info.pingpong()) {
      sum += r.ip.busbw_GBps;
      ++n;
    }
  }
  return n > 0 ? sum / n : 0.0;
}

// ---- table -----------------------------------------------------------------------------------

void Table::header() const {
  const BenchOptions& o = info_.opts;
  std::FILE* f = out_;
  std::fprintf(f, "# gradsync-bench: %s, algo %s, %d rank%s on %d node%s (%d per node)", o.op.c_str(), o.algo.c_str(),
               info_.nranks, info_.nranks == 1 ? "" : "s", info_.nnodes, info_.nnodes == 1 ? "" : "s",
               info_.ranks_per_node);
  if (!info_.pingpong()) std::fprintf(f, ", dtype %s, redop %s", dtype_name(o.dtype), info_.redop_text().c_str());
  std::fprintf(f, "\n");
  std::fprintf(f, "# minBytes %lld maxBytes %lld step: %lld(%s) warmup iters: %d iters: %d validation: %d",
               static_cast<long long>(o.min_bytes), static_cast<long long>(o.max_bytes),
               static_cast<long long>(o.step_bytes > 0 ? o.step_bytes : o.step_factor),
               o.step_bytes > 0 ? "bytes" : "factor", o.warmup, o.iters, o.check ? 1 : 0);
  if (!info_.pingpong())
    std::fprintf(f, " chunkBytes %lld channels %d buffers %s", static_cast<long long>(o.chunk_bytes), o.channels,
                 o.buffers.c_str());
  std::fprintf(f, "\n");
  if (info_.chunk.bytes > 0)
    std::fprintf(f, "# chunk used: %lld bytes (%s)\n", static_cast<long long>(info_.chunk.bytes),
                 info_.chunk.reason.c_str());
  if (info_.pingpong())
    std::fprintf(f, "# time: half the round trip (rank 0 sends, rank 1 sends it back), mean over iterations\n");
  else
    std::fprintf(f, "# time: barrier, then one call; the slowest rank's time, mean over iterations; busbw factor %g\n",
                 info_.bus_factor);
  if (o.busy_threads > 0)  // only then: the header of a plain run stays nccl-tests' own
    std::fprintf(f, "# busy threads: %d per rank spinning on the CPU during the sweep\n", o.busy_threads);
  for (const std::string& line : info_.device_lines) std::fprintf(f, "# %s\n", line.c_str());
  std::fprintf(f, "#\n# Using ranks\n");
  for (int r = 0; r < info_.nranks; ++r)
    std::fprintf(f, "#  Rank %2d Pid %6s on %10s\n", r, info_.pids[static_cast<std::size_t>(r)].c_str(),
                 info_.hostnames[static_cast<std::size_t>(r)].c_str());
  std::fprintf(f, "#\n");
  if (info_.pingpong()) {
    std::fprintf(f, "# %10s  %7s  %8s  %6s\n", "size", "time", "bw", "#wrong");
    std::fprintf(f, "# %10s  %7s  %8s  %6s\n", "(B)", "(us)", "(GB/s)", "");
  } else {
    const bool algo_col = show_algo_column(info_);
    std::fprintf(f, "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "",
                 "", "", "", "");
    std::fprintf(f, "# %10s  %12s  %8s  %6s  %6s", "size", "count", "type", "redop", "root");
    for (int m = 0; m < 2; ++m) std::fprintf(f, "  %7s  %6s  %6s %6s", "time", "algbw", "busbw", "#wrong");
    std::fprintf(f, "%s\n", algo_col ? "  algo" : "");
    std::fprintf(f, "# %10s  %12s  %8s  %6s  %6s", "(B)", "(elements)", "", "", "");
    for (int m = 0; m < 2; ++m) std::fprintf(f, "  %7s  %6s  %6s  %5s", "(us)", "(GB/s)", "(GB/s)", "");
    std::fprintf(f, "\n");
  }
  std::fflush(f);
}

void Table::row(const SizeResult& r) const {
  std::FILE* f = out_;
  if (info_.pingpong()) {
    std::fprintf(f, "%12lld  %7s  %8.3f  %6s\n", static_cast<long long>(r.size_bytes),
                 time_text(r.oop.time_us_avg).c_str(), r.oop.busbw_GBps, wrong_text(r.oop.nwrong).c_str());
  } else {
    std::fprintf(f, "%12lld  %12lld  %8s  %6s  %6i", static_cast<long long>(r.size_bytes),
                 static_cast<long long>(r.count), dtype_name(info_.opts.dtype), info_.redop_text().c_str(),
                 info_.root_value());
    for (const PhaseResult* p : {&r.oop, &r.ip})
      std::fprintf(f, "  %7s  %6.2f  %6.2f  %5s", time_text(p->time_us_avg).c_str(), p->algbw_GBps, p->busbw_GBps,
                   wrong_text(p->nwrong).c_str());
    if (show_algo_column(info_)) std::fprintf(f, "  %s", r.algo_used.c_str());
    std::fprintf(f, "\n");
  }
  std::fflush(f);
}

void Table::footer(const std::vector<SizeResult>& rows) const {
  if (!info_.device_footer.empty()) std::fprintf(out_, "# %s\n", info_.device_footer.c_str());
  // Which interfaces carried the sweep (those with traffic; the file has them all).
  for (const std::string& line : net_traffic_lines(info_.net, info_.hostnames))
    std::fprintf(out_, "# Interface bytes, %s\n", line.c_str());
  const std::int64_t wrong = total_wrong(rows);
  if (wrong < 0) std::fprintf(out_, "# Out of bounds values : 0 OK (not checked: -c 0)\n");
  else std::fprintf(out_, "# Out of bounds values : %lld %s\n", static_cast<long long>(wrong), wrong ? "FAILED" : "OK");
  std::fprintf(out_, "# Avg bus bandwidth    : %g\n\n", avg_busbw(info_, rows));
  std::fprintf(out_, "# Results written to %s\n", info_.out_path.c_str());
  std::fflush(out_);
}

// ---- JSON -------------------------------------------------------------------------------------

std::string to_json(const RunInfo& info, const std::vector<SizeResult>& rows) {
  const BenchOptions& o = info.opts;
  auto nwrong = [](std::int64_t n) { return n < 0 ? Json() : Json(static_cast<long long>(n)); };
  Json hosts = Json::array();
  for (const auto& h : info.hostnames) hosts.push(h);
  Json j = Json::object();
  j.set("program", "gradsync-bench")
      .set("op", o.op)
      .set("algo", o.algo)
      .set("device", o.device)
      .set("buffers", o.buffers)
      .set("dtype", dtype_text(info))
      .set("redop", info.redop_text())
      .set("root", info.root_value())
      .set("nranks", info.nranks)
      .set("nnodes", info.nnodes)
      .set("ranks_per_node", info.ranks_per_node)
      .set("hostnames", hosts)
      .set("chunk_bytes", static_cast<long long>(o.chunk_bytes))
      .set("chunk_bytes_used", static_cast<long long>(info.chunk.bytes))
      .set("chunk_reason", info.chunk.reason)
      .set("channels", o.channels)
      .set("iters", o.iters)
      .set("warmup", o.warmup)
      .set("check", o.check ? 1 : 0)
      .set("off_cache_bytes", o.off_cache_bytes)
      .set("busy_threads", o.busy_threads)
      .set("bus_factor", info.bus_factor);
  Json list = Json::array();
  for (const auto& r : rows) {
    Json row = Json::object();
    row.set("size_bytes", static_cast<long long>(r.size_bytes)).set("count", static_cast<long long>(r.count));
    if (info.pingpong()) {
      row.set("half_rtt_us", r.oop.time_us_avg).set("bw_GBps", r.oop.busbw_GBps).set("nwrong", nwrong(r.oop.nwrong));
    } else {
      const std::pair<const char*, const PhaseResult*> modes[] = {{"oop", &r.oop}, {"ip", &r.ip}};
      for (const auto& [name, p] : modes) {
        Json m = Json::object();
        m.set("time_us", p->time_us_avg)
            .set("algbw_GBps", p->algbw_GBps)
            .set("busbw_GBps", p->busbw_GBps)
            .set("nwrong", nwrong(p->nwrong));
        row.set(name, m);
      }
      row.set("algo_used", r.algo_used);
    }
    list.push(row);
  }
  j.set("rows", list);
  j.set("out_of_bounds", nwrong(total_wrong(rows)));
  j.set("avg_busbw_GBps", avg_busbw(info, rows));
  j.set("out", info.out_path);
  return j.dump();
}

// ---- nccl-tests -J JSON ------------------------------------------------------------------------

namespace {

std::string now_text() {
  char buf[64];
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);  // nccl-tests' TIME_STRING_FORMAT
  return buf;
}

}  // namespace

std::string to_nccl_tests_json(const RunInfo& info, const std::vector<SizeResult>& rows) {
  const BenchOptions& o = info.opts;
  auto flag = [](bool b) { return Json(b ? "true" : "false"); };  // nccl-tests writes bools as text
  Json args = Json::array();
  for (const auto& a : o.argv) args.push(a);
  if (o.argv.empty()) args.push("gradsync-bench");
  Json env = Json::array();
  for (const auto& [k, v] : communication_environment()) env.push(k + "=" + v);
  Json devices = Json::array();
  for (int r = 0; r < info.nranks; ++r) {
    Json d = Json::object();
    d.set("rank", r).set("group", 0).set("pid", std::atoi(info.pids[static_cast<std::size_t>(r)].c_str()));
    d.set("hostname", info.hostnames[static_cast<std::size_t>(r)]).set("device", 0).set("device_hex", "");
    d.set("device_info", o.device == "cuda" ? "cuda" : "cpu");
    devices.push(d);
  }
  Json config = Json::object();
  config.set("nthreads", 1).set("ngpus", 1).set("minimum_bytes", static_cast<long long>(o.min_bytes));
  config.set("maximum_bytes", static_cast<long long>(o.max_bytes));
  if (o.step_bytes > 0) config.set("step_bytes", static_cast<long long>(o.step_bytes));
  else config.set("step_factor", static_cast<long long>(o.step_factor));
  config.set("warmup_iters", o.warmup).set("iterations", o.iters).set("aggregated_iterations", 1);
  config.set("validation", o.check ? 1 : 0).set("graph", 0).set("blocking_collectives", flag(true));
  config.set("per_iter_timing", flag(false)).set("parallel_init", flag(false)).set("devices", devices);
  char root[16];
  std::snprintf(root, sizeof root, "%6i", info.pingpong() ? -1 : info.root_value());
  Json results = Json::array();
  for (const auto& r : rows) {
    Json x = Json::object();
    x.set("size", static_cast<long long>(r.size_bytes)).set("count", static_cast<long long>(info.pingpong() ? r.size_bytes : r.count));
    x.set("type", dtype_text(info)).set("redop", info.pingpong() ? std::string("none") : info.redop_text()).set("root", root);
    auto phase = [](const PhaseResult& p) {
      Json m = Json::object();
      m.set("time", p.time_us_avg).set("alg_bw", p.algbw_GBps).set("bus_bw", p.busbw_GBps);
      m.set("nwrong", p.nwrong < 0 ? Json() : Json(static_cast<double>(p.nwrong)));
      return m;
    };
    x.set("out_of_place", phase(r.oop));
    x.set("in_place", info.pingpong() ? Json() : phase(r.ip));
    x.set("actual_iterations", o.iters).set("experiment_name", "");
    if (!r.algo_used.empty()) x.set("algo_used", r.algo_used);  // ours: what ran at this size
    results.push(x);
  }
  const std::int64_t wrong = total_wrong(rows);
  Json oob = Json::object();
  oob.set("count", static_cast<long long>(std::max<std::int64_t>(0, wrong))).set("okay", flag(wrong <= 0));
  Json avg = Json::object();
  avg.set("bandwidth", avg_busbw(info, rows)).set("okay", "unchecked");
  Json ours = Json::object();
  ours.set("op", o.op).set("algo", o.algo).set("nranks", info.nranks).set("nnodes", info.nnodes);
  ours.set("ranks_per_node", info.ranks_per_node).set("h5", info.out_path).set("busy_threads", o.busy_threads);
  Json j = Json::object();
  j.set("version", 2).set("start_time", now_text()).set("args", args).set("env", env).set("nccl_version", 0);
  j.set("config", config).set("results", results).set("out_of_bounds", oob).set("average_bus_bandwidth", avg);
  j.set("errors", Json::array()).set("end_time", now_text()).set("gradsync", ours);
  return j.dump();
}

void write_nccl_tests_json(const std::string& path, const RunInfo& info, const std::vector<SizeResult>& rows) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) throw gradsync::Error("-J " + path + ": cannot create '" + tmp + "': " + std::strerror(errno));
    const std::string text = to_nccl_tests_json(info, rows) + "\n";
    const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    if (std::fclose(f) != 0 || !ok) {
      std::remove(tmp.c_str());
      throw gradsync::Error("-J " + path + ": cannot write '" + tmp + "'");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw gradsync::Error("-J " + path + ": cannot rename '" + tmp + "' to it: " + ec.message());
  }
}

// ---- HDF5 -------------------------------------------------------------------------------------

void write_results(h5::Writer& w, const RunInfo& info, const std::vector<SizeResult>& rows) {
  const BenchOptions& o = info.opts;
  write_provenance(w, Provenance{"gradsync-bench", o.argv, info.hostnames, info.nranks, info.nnodes, info.cpus,
                                     info.machine_ids});

  w.attr("/", "op", o.op);
  w.attr("/", "algo", o.algo);
  w.attr("/", "device", o.device);
  w.attr("/", "buffers", o.buffers);  // shared: registered in the node's shared memory
  w.attr("/", "dtype", dtype_text(info));
  w.attr("/", "redop", info.redop_text());
  w.attr("/", "ranks_per_node", static_cast<std::int64_t>(info.ranks_per_node));
  w.attr("/", "chunk_bytes", static_cast<std::int64_t>(o.chunk_bytes));  // as given; 0: auto
  w.attr("/", "chunk_bytes_used", static_cast<std::int64_t>(info.chunk.bytes));
  w.attr("/", "chunk_reason", info.chunk.reason);
  w.attr("/", "channels", static_cast<std::int64_t>(o.channels));
  w.attr("/", "iters", static_cast<std::int64_t>(o.iters));
  w.attr("/", "warmup", static_cast<std::int64_t>(o.warmup));
  w.attr("/", "check", static_cast<std::int64_t>(o.check ? 1 : 0));
  w.attr("/", "off_cache_bytes", o.off_cache_bytes);
  w.attr("/", "busy_threads", static_cast<std::int64_t>(o.busy_threads));
  w.attr("/", "root", static_cast<std::int64_t>(info.root_value()));
  w.attr("/", "bus_factor", info.bus_factor);
  w.attr("/", "min_bytes", static_cast<std::int64_t>(o.min_bytes));
  w.attr("/", "max_bytes", static_cast<std::int64_t>(o.max_bytes));
  w.attr("/", "step_factor", static_cast<std::int64_t>(o.step_bytes > 0 ? 0 : o.step_factor));
  w.attr("/", "step_bytes", static_cast<std::int64_t>(o.step_bytes));
  w.attr("/", "timing", std::string(info.pingpong() ? "half round trip on rank 0, per iteration"
                                                    : "barrier then one call per iteration; max over ranks") +
                            info.timing_note);
  w.attr("/", "out_of_bounds", total_wrong(rows));
  w.attr("/", "avg_busbw_GBps", avg_busbw(info, rows));
  write_net_traffic(w, info.net);

  const std::uint64_t s = rows.size(), iters = static_cast<std::uint64_t>(o.iters);
  std::vector<std::int64_t> size_bytes, count;
  std::vector<std::string> algo_used;
  for (const auto& r : rows) {
    size_bytes.push_back(r.size_bytes);
    count.push_back(r.count);
    algo_used.push_back(r.algo_used);
  }
  w.write("/size_bytes", size_bytes);
  w.write("/count", count);
  w.write("/algo_used", algo_used);

  auto write_phase = [&](const std::string& group, const std::string& time_name, const std::string& bw_name,
                         auto phase_of) {
    std::vector<double> raw, avg, algbw, busbw;
    std::vector<std::int64_t> nwrong;
    for (const auto& r : rows) {
      const PhaseResult& p = phase_of(r);
      raw.insert(raw.end(), p.time_us.begin(), p.time_us.end());
      avg.push_back(p.time_us_avg);
      algbw.push_back(p.algbw_GBps);
      busbw.push_back(p.busbw_GBps);
      nwrong.push_back(p.nwrong);
    }
    w.group(group);
    w.write(group + "/" + time_name, raw, {s, iters});
    w.write(group + "/" + time_name + "_avg", avg);
    if (bw_name == "busbw_GBps") w.write(group + "/algbw_GBps", algbw);
    w.write(group + "/" + bw_name, busbw);
    w.write(group + "/nwrong", nwrong);
  };
  if (info.pingpong()) {
    write_phase("/pingpong", "half_rtt_us", "bw_GBps", [](const SizeResult& r) -> const PhaseResult& { return r.oop; });
  } else {
    write_phase("/oop", "time_us", "busbw_GBps", [](const SizeResult& r) -> const PhaseResult& { return r.oop; });
    write_phase("/ip", "time_us", "busbw_GBps", [](const SizeResult& r) -> const PhaseResult& { return r.ip; });
  }
  w.commit();
}

std::string default_out_path(const BenchOptions& o) {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  const std::string base = "results/bench-" + o.op + "-" + o.algo + "-" + stamp;
  std::string path = base + ".h5";
  for (int k = 2; std::filesystem::exists(path); ++k) path = base + "-" + std::to_string(k) + ".h5";
  return path;
}

}  // namespace gradsync::bench
