// gradsync/netmodel/compare.cpp — predicting measured runs and summarizing the errors.
#include "netmodel/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "core/error.hpp"
#include "core/h5io.hpp"
#include "core/provenance.hpp"
#include "netmodel/grid.hpp"
#include "netmodel/replay.hpp"
#include "models/zoo.hpp"

namespace gradsync::netmodel {

namespace {

bool in_zoo(const std::string& model) {
  for (const auto& n : models::zoo_names())
    if (n == model) return true;
  return false;
}

}  // namespace

CompareReport compare_runs(const std::vector<std::string>& files, const std::string& fabric_name,
                           const std::string& intra, const std::string& profile_override, const std::string& kernels,
                           const std::string& compute_from) {
  GS_USAGE_CHECK(!files.empty(), "compare: no train files given");
  CompareReport rep;
  Predictor predictor;
  const Fabric& fabric = predictor.fabric(fabric_name, intra);
  rep.fabric = fabric.name;
  rep.compute_from = compute_from;
  TrainRun ref;
  if (!compute_from.empty()) ref = read_train_file(compute_from);
  std::vector<double> abs_err;
  for (const auto& path : files) {
    CompareRow row;
    row.run = read_train_file(path);
    PredictConfig c = row.run.config;
    c.fabric = fabric_name;
    c.intra = intra;
    if (!profile_override.empty()) c.compute_profile = profile_override;
    c.kernels = kernels;
    row.compute_measured = !compute_from.empty() || row.run.compute == "real" || !in_zoo(c.model);
    row.run.config = c;
    row.predicted = row.compute_measured
                        ? replay_recorded(row.run, c, fabric, predictor, compute_from.empty() ? nullptr : &ref)
                        : predictor.predict(c);
    row.step_error_pct = 100.0 * (row.predicted.step_time_s - row.run.step_time_s) / row.run.step_time_s;
    row.epoch_error_pct = std::isnan(row.run.epoch_time_s) || row.predicted.epoch_time_s <= 0
                              ? std::numeric_limits<double>::quiet_NaN()
                              : 100.0 * (row.predicted.epoch_time_s - row.run.epoch_time_s) / row.run.epoch_time_s;
    abs_err.push_back(std::abs(row.step_error_pct));
    std::vector<double> steps;
    for (const auto& r : row.run.rows) steps.push_back(r.step_time_s);
    row.measured_p10_s = percentile(steps, 0.1);
    row.measured_p90_s = percentile(steps, 0.9);
    if (row.inside_spread()) ++rep.inside_spread;
    rep.rows.push_back(std::move(row));
  }
  rep.median_abs_error_pct = median(abs_err);
  rep.p90_abs_error_pct = percentile(abs_err, 0.9);
  return rep;
}

namespace {
Json num_or_null(double v) { return std::isnan(v) ? Json(nullptr) : Json(v); }

// Per step, summed over buckets: the codec time (measured from /buckets/codec_s, NaN when
// absent or not attributed; predicted from the compressor's plan and kernel rates) and the
// buckets' waits for the slowest rank's codec beyond the ranks' median (measured from
// /buckets/by_rank/codec_s, NaN without it; predicted from the compute profile's codec_wait).
struct CodecSums {
  double measured = 0, predicted = 0, measured_wait = 0, predicted_wait = 0;
};
CodecSums codec_sums(const CompareRow& row) {
  CodecSums s;
  if (row.run.bucket_codec_s.empty()) s.measured = std::nan("");
  if (row.run.bucket_codec_wait_s.empty()) s.measured_wait = std::nan("");
  for (double c : row.run.bucket_codec_s) s.measured += c;
  for (double c : row.run.bucket_codec_wait_s) s.measured_wait += c;
  for (const auto& b : row.predicted.buckets) {
    s.predicted += b.codec_s;
    s.predicted_wait += b.codec_wait_s;
  }
  return s;
}
}  // namespace

Json bucket_timings_json(const std::vector<BucketTiming>& buckets) {
  Json bs = Json::array();
  for (const auto& b : buckets) {
    Json x = Json::object();
    x.set("grad_bytes", static_cast<long long>(b.grad_bytes)).set("wire_bytes", b.wire_bytes).set("tensors", b.ntensors);
    x.set("ready_s", b.ready_s).set("start_s", b.start_s).set("end_s", b.end_s).set("comm_s", b.comm_s).set("codec_s", b.codec_s);
    x.set("contention_s", b.contention_s).set("codec_wait_s", b.codec_wait_s);
    bs.push(x);
  }
  return bs;
}

Json compare_json(const CompareReport& r) {
  Json runs = Json::array();
  for (const auto& row : r.rows) {
    const auto& c = row.run.config;
    Json j = Json::object();
    j.set("file", row.run.path)
        .set("model", c.model)
        .set("compute", row.run.compute)
        .set("compute_modelled", !row.compute_measured)
        .set("nodes", c.nodes)
        .set("ranks_per_node", c.ranks_per_node)
        .set("batch_per_rank", static_cast<long long>(c.batch_per_rank))
        .set("algo", c.algo)
        .set("chunk_bytes", c.chunk_bytes)  // what the model priced: the run's chunk_bytes_used
        .set("compress", c.compress)
        .set("precision", c.precision)
        .set("bucket_mb", c.bucket_mb)
        .set("overlap", c.overlap)
        .set("measured_step_time_s", row.run.step_time_s)
        .set("predicted_step_time_s", row.predicted.step_time_s)
        .set("step_error_pct", row.step_error_pct)
        .set("measured_step_p10_s", num_or_null(row.measured_p10_s))
        .set("measured_step_p90_s", num_or_null(row.measured_p90_s))
        .set("measured_epoch_time_s", num_or_null(row.run.epoch_time_s))
        .set("predicted_epoch_time_s", row.predicted.epoch_time_s)
        .set("epoch_error_pct", num_or_null(row.epoch_error_pct))
        .set("measured_comm_exposed_s", num_or_null(row.run.comm_exposed_s))
        .set("predicted_comm_exposed_s", row.predicted.comm_exposed_s)
        .set("measured_comm_total_s", num_or_null(row.run.comm_total_s))
        .set("predicted_comm_total_s", row.predicted.comm_total_s)
        .set("measured_forward_s", num_or_null(row.run.forward_s))
        .set("predicted_forward_s", row.predicted.forward_s)
        .set("measured_backward_s", num_or_null(row.run.backward_s))
        .set("predicted_backward_s", row.predicted.backward_s)
        .set("measured_optimizer_s", num_or_null(row.run.optimizer_s))
        .set("predicted_optimizer_s", row.predicted.optimizer_s)
        .set("measured_data_s", num_or_null(row.run.data_s))
        .set("predicted_data_s", row.predicted.data_s)
        .set("measured_bytes_sent", num_or_null(row.run.bytes_sent))
        .set("predicted_bytes_sent", row.predicted.bytes_sent)
        .set("steps_used", static_cast<long long>(row.run.steps_used));
    const CodecSums codec = codec_sums(row);
    j.set("measured_codec_s", num_or_null(codec.measured)).set("predicted_codec_s", codec.predicted);
    j.set("measured_codec_wait_s", num_or_null(codec.measured_wait)).set("predicted_codec_wait_s", codec.predicted_wait);
    // A rank's process CPU per step (/steps/cpu_s), the ranks that shared one machine's
    // CPUs, and the share of those CPUs they kept busy (TrainRun::machine_cpu_busy).
    j.set("measured_cpu_s", num_or_null(row.run.cpu_s));
    j.set("machine_ranks", row.run.machine_ranks).set("machine_cores", row.run.machine_cores);
    j.set("machine_cpu_busy", num_or_null(row.run.machine_cpu_busy()));
    j.set("machine_saturated", row.run.machine_saturated());
    j.set("predicted_buckets", bucket_timings_json(row.predicted.buckets));
    runs.push(j);
  }
  Json out = Json::object();
  out.set("fabric", r.fabric)
      .set("compute_from", r.compute_from.empty() ? Json(nullptr) : Json(r.compute_from))
      .set("median_abs_error_pct", r.median_abs_error_pct)
      .set("p90_abs_error_pct", r.p90_abs_error_pct)
      .set("inside_spread", r.inside_spread)
      .set("runs", runs);
  return out;
}

std::string compare_table(const CompareReport& r) {
  std::ostringstream os;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-28s %-14s %-9s %-12s %-14s %-5s %10s %10s %8s %15s %10s %10s %8s\n", "# file",
                "model", "ranks", "algo", "compress", "prec", "meas_step", "pred_step", "err%", "steps_p10..p90%",
                "meas_epoch", "pred_epoch", "err%");
  os << buf;
  bool any_measured = false;
  for (const auto& row : r.rows) {
    const auto& c = row.run.config;
    std::string file = row.run.path;
    if (file.size() > 28) file = "..." + file.substr(file.size() - 25);
    const std::string ranks = std::to_string(c.nodes) + "x" + std::to_string(c.ranks_per_node);
    // The run's own steps, p10..p90, in percent of its median: an error inside is noise.
    char spread[32];
    const double m = row.run.step_time_s;
    if (std::isfinite(row.measured_p10_s) && m > 0)
      std::snprintf(spread, sizeof spread, "%+.1f..%+.1f", 100 * (row.measured_p10_s / m - 1),
                    100 * (row.measured_p90_s / m - 1));
    else
      std::snprintf(spread, sizeof spread, "n/a");
    std::snprintf(buf, sizeof buf,
                  "%-28s %-14s %-9s %-12s %-14s %-5s %10.4f %10.4f %+8.2f %15s %10.2f %10.2f %+8.2f%s\n",
                  file.c_str(), c.model.c_str(), ranks.c_str(), c.algo.c_str(), c.compress.c_str(),
                  c.precision.c_str(), row.run.step_time_s, row.predicted.step_time_s, row.step_error_pct, spread,
                  row.run.epoch_time_s, row.predicted.epoch_time_s, row.epoch_error_pct,
                  row.compute_measured ? "  *" : "");
    os << buf;
    any_measured = any_measured || row.compute_measured;
  }
  std::snprintf(buf, sizeof buf,
                "# fabric %s; %zu runs; step time |error|: median %.2f%%, p90 %.2f%%; %d of %zu predicted inside "
                "the run's own steps' p10..p90\n",
                r.fabric.c_str(), r.rows.size(), r.median_abs_error_pct, r.p90_abs_error_pct, r.inside_spread,
                r.rows.size());
  os << buf;
  // Runs whose ranks outnumbered the cores of the machine they shared and kept them busy: the
  // model prices a node's CPU share (fabric cores_per_node) but not ranks of several nodes
  // (testbed hosts, containers) competing for one machine's cores.
  int saturated = 0, ranks = 0, cores = 0;
  double least = 1;
  for (const auto& row : r.rows) {
    if (row.run.machine_saturated()) {
      ++saturated;
      ranks = row.run.machine_ranks;
      cores = row.run.machine_cores;
      least = std::min(least, row.run.machine_cpu_busy());
    }
  }
  if (saturated > 0) {
    std::snprintf(buf, sizeof buf,
                  "# %d run(s) CPU-bound: %d ranks on one machine's %d cores used %.0f%% of them or more "
                  "(/steps/cpu_s, waiting included); the model prices the codecs' share of the machine's cores and, "
                  "with a compute profile's codec_wait, each bucket's wait for the slowest rank's codec, not other "
                  "waits of exchanges for a rank the scheduler has not run yet, so such steps can run longer "
                  "than predicted\n",
                  saturated, ranks, cores, 100 * least);
    os << buf;
  }
  if (!r.compute_from.empty())
    os << "# * compute from " << r.compute_from
       << ": its recorded steps replayed (data, forward, backward, optimizer, reducer, and each tensor's gradient "
          "ready time) under each run's buckets, compressor and algorithm; communication, overlap and codec are "
          "modelled\n";
  else if (any_measured)
    os << "# * compute=real: each recorded step replayed with its measured compute (and, with /ranks, its slowest "
          "rank); only communication and overlap are modelled\n";
  return os.str();
}

void write_compare(const CompareReport& r, const std::string& path, const std::vector<std::string>& argv) {
  h5::Writer w(path);
  write_provenance(w, model_provenance(argv));
  std::vector<std::string> file, model, algo, compress, precision, compute;
  std::vector<std::int64_t> nodes, rpn, modelled, inside;
  std::vector<double> ms, ps, es, me, pe, ee, mc, pc, p10, p90, busy, mcodec, pcodec, mwait, pwait;
  std::vector<std::int64_t> mranks, mcores, saturated;
  for (const auto& row : r.rows) {
    const auto& c = row.run.config;
    busy.push_back(row.run.machine_cpu_busy());
    mranks.push_back(row.run.machine_ranks);
    mcores.push_back(row.run.machine_cores);
    saturated.push_back(row.run.machine_saturated() ? 1 : 0);
    file.push_back(row.run.path);
    model.push_back(c.model);
    algo.push_back(c.algo);
    compress.push_back(c.compress);
    precision.push_back(c.precision);
    compute.push_back(row.run.compute);
    nodes.push_back(c.nodes);
    rpn.push_back(c.ranks_per_node);
    modelled.push_back(row.compute_measured ? 0 : 1);
    ms.push_back(row.run.step_time_s);
    ps.push_back(row.predicted.step_time_s);
    es.push_back(row.step_error_pct);
    me.push_back(row.run.epoch_time_s);
    pe.push_back(row.predicted.epoch_time_s);
    ee.push_back(row.epoch_error_pct);
    mc.push_back(row.run.comm_exposed_s);
    pc.push_back(row.predicted.comm_exposed_s);
    p10.push_back(row.measured_p10_s);
    p90.push_back(row.measured_p90_s);
    inside.push_back(row.inside_spread() ? 1 : 0);
    const CodecSums codec = codec_sums(row);
    mcodec.push_back(codec.measured);
    pcodec.push_back(codec.predicted);
    mwait.push_back(codec.measured_wait);
    pwait.push_back(codec.predicted_wait);
  }
  w.group("/compare");
  w.attr("/compare", "fabric", r.fabric);
  if (!r.compute_from.empty()) w.attr("/compare", "compute_from", r.compute_from);
  w.attr("/compare", "median_abs_error_pct", r.median_abs_error_pct);
  w.attr("/compare", "p90_abs_error_pct", r.p90_abs_error_pct);
  w.attr("/compare", "inside_spread", static_cast<std::int64_t>(r.inside_spread));
  w.write("/compare/file", file);
  w.write("/compare/model", model);
  w.write("/compare/compute", compute);
  w.write("/compare/compute_modelled", modelled);
  w.write("/compare/algo", algo);
  w.write("/compare/compress", compress);
  w.write("/compare/precision", precision);
  w.write("/compare/nodes", nodes);
  w.write("/compare/ranks_per_node", rpn);
  w.write("/compare/measured_step_time_s", ms);
  w.write("/compare/predicted_step_time_s", ps);
  w.write("/compare/step_error_pct", es);
  w.write("/compare/measured_step_p10_s", p10);
  w.write("/compare/measured_step_p90_s", p90);
  w.write("/compare/inside_spread", inside);  // per run 1/0; the group attribute is their sum
  // The ranks that shared one machine's CPUs, those CPUs (0: not recorded), the share of
  // them the ranks used over a step (NaN: not recorded; TrainRun::machine_cpu_busy), and 1
  // where that made the run CPU-bound (TrainRun::machine_saturated).
  w.write("/compare/machine_ranks", mranks);
  w.write("/compare/machine_cores", mcores);
  w.write("/compare/machine_cpu_busy", busy);
  w.write("/compare/machine_saturated", saturated);
  w.write("/compare/measured_epoch_time_s", me);
  w.write("/compare/predicted_epoch_time_s", pe);
  w.write("/compare/epoch_error_pct", ee);
  w.write("/compare/measured_comm_exposed_s", mc);
  w.write("/compare/predicted_comm_exposed_s", pc);
  // Per step, summed over buckets (NaN: not recorded): the codec, and the buckets' waits for
  // the slowest rank's codec beyond the ranks' median (compare --json's same keys).
  w.write("/compare/measured_codec_s", mcodec);
  w.write("/compare/predicted_codec_s", pcodec);
  w.write("/compare/measured_codec_wait_s", mwait);
  w.write("/compare/predicted_codec_wait_s", pwait);
  w.commit();
}

}  // namespace gradsync::netmodel
