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
#include "models/compute_profile.hpp"
#include "netmodel/grid.hpp"
#include "models/zoo.hpp"
#include "plan/precision.hpp"

namespace gradsync::netmodel {

namespace {

bool in_zoo(const std::string& model) {
  for (const auto& n : models::zoo_names())
    if (n == model) return true;
  return false;
}

// compute=real: measured compute, measured buckets; the network part is modelled.
// "Compute" is everything local that the run timed: data loading, forward, backward,
// optimizer, the reducer's own per-step work (/steps/reducer_s: gradsync's bucket copies and
// launches; for PyTorch DDP the time from the end of communication to the optimizer), and
// the compressor's encode/decode kernels (the modelled per-bucket codec
// times are scaled so that their step total equals the measured encode_s + decode_s; where
// decode_s was not measured -- the PyTorch recorder with overlapping buckets, whose hooks
// decode in future callbacks -- the step total of the buckets' measured codec time
// (/buckets/codec_s: rank 0's time in the bucket outside its collectives), else the scale
// is encode_s (the hooks' synchronous part) over the modelled work before each bucket's
// first collective, and the codec's later work is priced at the same ratio; without those
// columns the device-rate estimates stay).
//
// Replay: every recorded step after warmup is simulated with that step's own compute and
// bucket ready times, and the prediction is the step whose predicted time is the median
// (a median of sums, as the measured step time is; the sum of the columns' medians is
// smaller by 3-8% for PyTorch runs on this 2-core host, whose slow steps are slow in every
// phase). With per-rank columns (/ranks, train_file.hpp) a step is the synchronous step of
// its ranks: rank r starts after its previous step's optimizer and reducer (o_r), its last
// bucket is ready o_r + pre_r after the last communication ended, so the all-reduce waits
// for the rank with the largest o_r + pre_r (the critical rank: its backward and rank 0's
// bucket ready times scaled to it); the step, timed as the slowest rank's (/steps/
// step_time_s), ends max_r(post_r - o_r) after the communication. Without /ranks the
// step's means stand for every rank. The row shows the median step whole (its parts add up).
struct MeasuredStep {
  double data_s = 0, forward_s = 0, backward_s = 0, bwd_start_s = 0, optimizer_s = 0, reducer_s = 0;
  double encode_s = 0, decode_s = 0;  // measured codec time (NaN: not measured)
  double codec_s = 0;  // rank 0's buckets' codec time (/buckets/codec_s; NaN: not measured)
  std::vector<double> ready_s;  // per bucket, relative to the step start (NaN: take the end of backward)
};

double or0(double v) { return std::isnan(v) ? 0.0 : v; }

// The workload of one recorded row (see above).
MeasuredStep measured_step(const TrainStepRow& row, const TrainRun& run) {
  const int acc = std::max(1, run.config.accumulate);
  MeasuredStep m;
  m.forward_s = or0(row.forward_s);
  m.optimizer_s = or0(row.optimizer_s);
  m.encode_s = row.encode_s;
  m.decode_s = row.decode_s;
  m.codec_s = row.codec_s;
  m.ready_s = row.bucket_ready_s;
  const double bwd_all = or0(row.backward_s);
  if (row.rank_pre_s.empty()) {
    m.data_s = or0(row.data_s);
    m.backward_s = bwd_all / acc;
    m.reducer_s = or0(row.reducer_s);
    m.bwd_start_s = m.data_s + m.forward_s + (acc - 1) * m.backward_s;
    return m;
  }
  // A bucket's collectives wait for every rank's codec: the slowest rank's, where measured.
  if (!std::isnan(row.rank_max_encode_s)) m.encode_s = row.rank_max_encode_s;
  if (!std::isnan(row.rank_max_decode_s)) m.decode_s = row.rank_max_decode_s;
  const std::size_t p = row.rank_pre_s.size();
  std::size_t c = 0;
  double post = -std::numeric_limits<double>::infinity();
  for (std::size_t k = 0; k < p; ++k) {
    if (row.rank_prev_post_s[k] + row.rank_pre_s[k] > row.rank_prev_post_s[c] + row.rank_pre_s[c]) c = k;
    post = std::max(post, row.rank_post_s[k] - row.rank_prev_post_s[k]);
  }
  const double crit = row.rank_prev_post_s[c] + row.rank_pre_s[c];
  const double bwd_c = row.rank_backward_s[c];
  m.backward_s = bwd_c / acc;
  m.data_s = crit - m.forward_s - bwd_c;
  if (m.data_s < 0) {
    m.forward_s = std::max(0.0, m.forward_s + m.data_s);
    m.data_s = 0;
  }
  m.reducer_s = post - m.optimizer_s;
  if (m.reducer_s < 0) {
    m.data_s = std::max(0.0, m.data_s + m.reducer_s);
    m.reducer_s = 0;
  }
  m.bwd_start_s = m.data_s + m.forward_s + (acc - 1) * m.backward_s;
  // Rank 0's ready times, moved from its backward onto the critical rank's.
  const double bwd0 = row.rank_backward_s[0], start0 = row.rank_pre_s[0] - bwd0;
  for (auto& t : m.ready_s) {
    if (std::isnan(t)) continue;
    const double into = bwd0 > 0 ? std::clamp(t - start0, 0.0, bwd0) / bwd0 * bwd_c : bwd_c;
    t = m.bwd_start_s + into - (acc - 1) * m.backward_s;
  }
  return m;
}

// --compute-from: for each tensor of `run` (by /model name), the bucket it went to in `ref`.
// Both runs must be the same model (every tensor of run in ref, same element count) on the
// same number of ranks.
std::vector<int64_t> ref_buckets(const TrainRun& run, const TrainRun& ref) {
  GS_USAGE_CHECK(!ref.tensors.empty(), ref.path, ": --compute-from needs /model (tensor names and buckets) in the file");
  GS_USAGE_CHECK(!run.tensors.empty(), run.path,
                 ": --compute-from needs /model (tensor names and buckets) in every compared file");
  const int ranks = run.config.nodes * run.config.ranks_per_node;
  const int ref_ranks = ref.config.nodes * ref.config.ranks_per_node;
  GS_USAGE_CHECK(ranks == ref_ranks, run.path, ": ", ranks, " ranks, but the --compute-from run ", ref.path, " has ",
                 ref_ranks);
  std::vector<int64_t> out;
  for (const auto& t : run.tensors) {
    const auto it = std::find_if(ref.tensors.begin(), ref.tensors.end(),
                                 [&](const TrainTensor& r) { return r.name == t.name; });
    GS_USAGE_CHECK(it != ref.tensors.end() && it->numel == t.numel && it->bucket >= 0 &&
                       static_cast<std::size_t>(it->bucket) < ref.bucket_bytes.size(),
                   run.path, ": tensor '", t.name, "' (", t.numel, " elements) is not in the --compute-from run ",
                   ref.path, " (another model?)");
    out.push_back(it->bucket);
  }
  return out;
}

// `ref` (compare --compute-from): the steps replayed are ref's -- its data, forward,
// backward, optimizer and reducer time, and each tensor's gradient ready time (the ready time
// of the bucket it went to in ref) -- while the buckets, the compressor and the algorithm are
// run's. A bucket of run is ready when its last tensor is. The codec is modelled (device
// rates), as no codec of run is measured then.
StepResult predict_measured_compute(const TrainRun& run, const Fabric& fabric, Predictor& predictor,
                                    const TrainRun* ref = nullptr) {
  const PredictConfig& c = run.config;
  const TrainRun& src = ref ? *ref : run;  // whose recorded steps are replayed
  GS_USAGE_CHECK(!std::isnan(src.forward_s) && !std::isnan(src.backward_s), src.path,
                 ": compute=real needs /steps/forward_s and /steps/backward_s");
  GS_USAGE_CHECK(!run.bucket_bytes.empty(), run.path, ": compute=real needs /buckets (sizes and ready times)");
  GS_USAGE_CHECK(!ref || !ref->bucket_bytes.empty(), src.path, ": --compute-from needs /buckets (ready times)");
  const std::vector<int64_t> from = ref ? ref_buckets(run, *ref) : std::vector<int64_t>{};
  const Compressor comp(c.compress);
  const DType precision = plan::parse_precision(c.precision);
  const int e = static_cast<int>(dtype_size(precision));
  models::ComputeProfile prof;
  try {
    prof = models::load_profile(c.compute_profile);
  } catch (const UsageError&) {
    prof = models::builtin_profile("cpu");
  }
  DeviceRates rates{prof.peak_flops * prof.efficiency, prof.optimizer_bytes_per_s, predictor.kernels(c.kernels)};
  double params = 0;
  for (double b : run.bucket_bytes) params += b / e;
  try {
    rates.working_set_bytes = working_set_bytes(params, c.optimizer, c.ranks_per_node);
  } catch (const UsageError&) {  // a PyTorch optimizer gradsync has no byte count for: SGD's
    rates.working_set_bytes = working_set_bytes(params, "sgd", c.ranks_per_node);
  }
  // With /model (tensor shapes and their buckets) each bucket holds its real tensors, in
  // gradient-ready (descending forward) order as the reducer's assign_buckets; without it
  // (older files) a bucket is one 1-D tensor of its measured bytes at fp32.
  const std::size_t nb = run.bucket_bytes.size();
  bool shapes = !run.tensors.empty();
  for (const auto& t : run.tensors)
    shapes = shapes && t.bucket >= 0 && static_cast<std::size_t>(t.bucket) < nb;
  std::vector<std::vector<GradShape>> per_bucket(nb);
  if (shapes) {
    for (std::size_t i = run.tensors.size(); i-- > 0;) {
      const auto& t = run.tensors[i];
      GradShape g;
      g.numel = t.numel;
      g.ndim = static_cast<int>(t.shape.size());
      g.rows = t.shape.empty() ? 1 : t.shape[0];
      per_bucket[static_cast<std::size_t>(t.bucket)].push_back(g);
    }
    for (const auto& v : per_bucket) shapes = shapes && !v.empty();
  }
  std::vector<Bucket> planned;
  for (std::size_t i = 0; i < nb; ++i) {
    Bucket b;
    if (shapes) {
      b.tensors = per_bucket[i];
    } else {
      GradShape g;
      g.numel = static_cast<int64_t>(run.bucket_bytes[i] / 4);  // bucket bytes at fp32 (shapes unknown: 1-D)
      g.rows = g.numel;
      b.tensors.push_back(g);
    }
    for (const auto& g : b.tensors) b.grad_bytes += g.numel * 4;
    b.plan = comp.plan(b.tensors, e, c.nodes * c.ranks_per_node, rates, precision);
    planned.push_back(std::move(b));
  }
  double codec_model = 0, codec_before_first = 0;  // all of it; up to the first collective
  for (const auto& b : planned) {
    codec_model += b.plan.tail_s;
    bool first = true;
    for (const auto& ph : b.plan.phases) {
      codec_model += ph.compute_s;
      if (first) codec_before_first += ph.compute_s;
      first = first && ph.compute_s <= 0;  // a leading phase without codec work (PowerSGD's plain batch)
    }
  }
  NetConfig net{c.nodes, c.ranks_per_node, c.algo, c.chunk_bytes, c.channels};
  // The measured loading time is exposed as measured (the loader settings are in it).
  StepConfig st{c.batch_per_rank, c.overlap, c.accumulate, c.loader_workers, 0.0, c.compute_threads};
  // A no-overlap reference timed backward with no communication beside it.
  st.compute_shares_cpu = ref && !ref->config.overlap;
  st.comm_preempts_compute = c.comm_preempts;
  auto simulate = [&](MeasuredStep m) {
    if (ref) {
      // ref's per-bucket ready times onto run's buckets: the latest of each bucket's tensors.
      std::vector<double> ready(nb, -std::numeric_limits<double>::infinity());
      for (std::size_t i = 0; i < run.tensors.size(); ++i) {
        const auto rb = static_cast<std::size_t>(from[i]);
        const double t = rb < m.ready_s.size() && !std::isnan(m.ready_s[rb]) ? m.ready_s[rb] : ref->bucket_ready_s[rb];
        const auto b = static_cast<std::size_t>(run.tensors[i].bucket);
        if (b < nb) ready[b] = std::max(ready[b], t);
      }
      for (auto& t : ready)
        if (!std::isfinite(t)) t = std::numeric_limits<double>::quiet_NaN();
      m.ready_s = ready;
      m.encode_s = m.decode_s = m.codec_s = std::numeric_limits<double>::quiet_NaN();
    }
    Workload w;
    w.model = c.model;
    w.forward_s = m.forward_s;
    w.backward_s = m.backward_s;
    w.optimizer_s = m.optimizer_s;
    w.reducer_per_step_s = m.reducer_s;
    w.data_s = m.data_s;
    std::vector<Bucket> buckets = planned;
    double f = 1.0;
    const double enc = or0(m.encode_s), dec = or0(m.decode_s);
    if (std::isnan(m.decode_s) && m.codec_s > 0 && codec_model > 0) f = m.codec_s / codec_model;
    else if (std::isnan(m.decode_s) && enc > 0 && codec_before_first > 0) f = enc / codec_before_first;
    else if (enc + dec > 0 && codec_model > 0) f = (enc + dec) / codec_model;
    for (std::size_t i = 0; i < nb; ++i) {
      auto& b = buckets[i];
      // A bucket this step has no row for takes its median ready time.
      const double ready = i < m.ready_s.size() && !std::isnan(m.ready_s[i]) ? m.ready_s[i] : run.bucket_ready_s[i];
      b.ready_s = std::clamp(ready - m.bwd_start_s, 0.0, m.backward_s);
      b.plan.tail_s *= f;
      for (auto& ph : b.plan.phases) ph.compute_s *= f;
    }
    return simulate_step(w, buckets, fabric, net, st, c.samples_per_epoch, true);
  };
  // Every row with forward and backward (the checks above guarantee at least one).
  std::vector<StepResult> steps;
  for (const auto& row : src.rows)
    if (!std::isnan(row.forward_s) && !std::isnan(row.backward_s))
      steps.push_back(simulate(measured_step(row, src)));
  GS_CHECK(!steps.empty(), src.path, ": no step has forward_s and backward_s");
  const auto mid = steps.begin() + static_cast<std::ptrdiff_t>(steps.size() / 2);  // upper middle of an even count
  std::nth_element(steps.begin(), mid, steps.end(),
                   [](const StepResult& a, const StepResult& b) { return a.step_time_s < b.step_time_s; });
  return *mid;
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
                        ? predict_measured_compute(row.run, fabric, predictor, compute_from.empty() ? nullptr : &ref)
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
}  // namespace

Json bucket_timings_json(const std::vector<BucketTiming>& buckets) {
  Json bs = Json::array();
  for (const auto& b : buckets) {
    Json x = Json::object();
    x.set("grad_bytes", static_cast<long long>(b.grad_bytes)).set("wire_bytes", b.wire_bytes).set("tensors", b.ntensors);
    x.set("ready_s", b.ready_s).set("start_s", b.start_s).set("end_s", b.end_s).set("comm_s", b.comm_s).set("codec_s", b.codec_s);
    x.set("contention_s", b.contention_s);
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
    // Codec time per step, summed over buckets: measured from /buckets/codec_s (null when
    // absent or not attributed), predicted from the compressor's plan and kernel rates.
    double measured_codec = row.run.bucket_codec_s.empty() ? std::nan("") : 0.0, predicted_codec = 0;
    for (double c : row.run.bucket_codec_s) measured_codec += c;
    for (const auto& b : row.predicted.buckets) predicted_codec += b.codec_s;
    j.set("measured_codec_s", num_or_null(measured_codec)).set("predicted_codec_s", predicted_codec);
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
  std::vector<double> ms, ps, es, me, pe, ee, mc, pc, p10, p90;
  for (const auto& row : r.rows) {
    const auto& c = row.run.config;
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
  w.write("/compare/measured_epoch_time_s", me);
  w.write("/compare/predicted_epoch_time_s", pe);
  w.write("/compare/epoch_error_pct", ee);
  w.write("/compare/measured_comm_exposed_s", mc);
  w.write("/compare/predicted_comm_exposed_s", pc);
  w.commit();
}

}  // namespace gradsync::netmodel
