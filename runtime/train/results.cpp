// gradsync/train/results.cpp — see results.hpp.
#include "train/results.hpp"

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <utility>

#include "core/h5io.hpp"
#include "core/netif.hpp"
#include "core/provenance.hpp"

namespace gradsync::train {

std::string run_algo(const TrainOptions& o, const RunResult& r) { return r.backend == "nccl" ? "nccl" : o.algo; }

namespace {

// A [rows, ranks] table, row-major, of value(i, k) for row i of rank k (/ranks,
// /buckets/by_rank).
template <typename F>
std::vector<double> rows_by_rank(std::size_t rows, std::size_t ranks, F&& value) {
  std::vector<double> v(rows * ranks);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t k = 0; k < ranks; ++k) v[i * ranks + k] = value(i, k);
  return v;
}

}  // namespace

std::string default_result_path(const std::string& model) {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  std::filesystem::create_directories("results");
  return "results/train-" + model + "-" + buf + ".h5";
}

std::string write_train_results(const std::string& path, const TrainOptions& o, const RunResult& r,
                                const std::vector<std::string>& argv, bool unique_name,
                                const h5::PathState* at_start) {
  if (const auto parent = std::filesystem::path(path).parent_path(); !parent.empty())
    std::filesystem::create_directories(parent);
  h5::Writer w(path, unique_name ? h5::Writer::Naming::Unique : h5::Writer::Naming::Exact, at_start);
  Provenance p;
  p.program = "gradsync-train";
  p.argv = argv;
  p.hostnames = r.hostnames;
  p.cpus = r.cpus;
  p.machine_ids = r.machine_ids;
  p.nranks = r.nranks;
  p.nnodes = r.nnodes;
  write_provenance(w, p);

  // ---- root attributes: the run's configuration (read by gradsync-model compare) -------
  using I = std::int64_t;
  w.attr("/", "model", o.model);
  w.attr("/", "compute", o.compute);
  w.attr("/", "compute_profile", o.compute_profile);
  w.attr("/", "device", r.device);
  w.attr("/", "backend", r.backend);
  w.attr("/", "gpu_name", r.gpu_name);
  w.attr("/", "gpu_memory_used_bytes", static_cast<I>(r.gpu_memory_used_bytes));
  w.attr("/", "nranks", static_cast<I>(r.nranks));
  w.attr("/", "nnodes", static_cast<I>(r.nnodes));
  w.attr("/", "ranks_per_node", static_cast<I>(r.ranks_per_node));
  w.attr("/", "batch_per_rank", static_cast<I>(o.batch_per_rank));
  w.attr("/", "bucket_mb", o.bucket_mb);
  w.attr("/", "first_bucket_mb", o.first_bucket_mb);
  w.attr("/", "overlap", static_cast<I>(o.overlap ? 1 : 0));
  w.attr("/", "accumulate", static_cast<I>(o.accumulate));
  w.attr("/", "algo", run_algo(o, r));
  w.attr("/", "chunk_bytes", static_cast<I>(o.chunk_bytes));  // 0: auto, by transport
  w.attr("/", "chunk_bytes_used", static_cast<I>(r.chunk_bytes_used));  // what the all-reduce ran with
  w.attr("/", "chunk_reason", r.chunk_reason);
  w.attr("/", "buffers", r.buffers);  // shared: the buckets were registered shared buffers
  // --tune: the fabric the model tuned for, the options it applied, its predicted step
  // (and the default configuration's), and what bounds it ("" / 0 without --tune).
  w.attr("/", "tune_fabric", o.tune);
  w.attr("/", "tune_choice", o.tune_choice);
  w.attr("/", "tune_bound", o.tune_bound);
  w.attr("/", "tune_predicted_step_s", o.tune_predicted_step_s);
  w.attr("/", "tune_default_predicted_step_s", o.tune_default_step_s);
  w.attr("/", "channels", static_cast<I>(o.channels));
  w.attr("/", "compress", r.compress_spec);
  w.attr("/", "compress_effective", r.compress_effective);
  w.attr("/", "precision", r.precision);
  w.attr("/", "loss_scale_mode", r.loss_scale_mode);
  w.attr("/", "loss_scale_spec", r.loss_scale_spec);
  w.attr("/", "skipped_steps", static_cast<I>(r.skipped_steps));
  w.attr("/", "loader_workers", static_cast<I>(o.loader_workers));
  w.attr("/", "prefetch", static_cast<I>(o.prefetch));
  w.attr("/", "data_time_s", o.data_time_us * 1e-6);
  w.attr("/", "optimizer", o.optimizer);
  w.attr("/", "lr", o.lr);
  w.attr("/", "seed", static_cast<I>(o.seed));
  w.attr("/", "steps", static_cast<I>(r.steps_run));
  w.attr("/", "epochs", static_cast<I>(r.epochs_done));
  w.attr("/", "samples_per_epoch", static_cast<I>(r.samples_per_epoch));
  w.attr("/", "steps_per_epoch", static_cast<I>(r.steps_per_epoch));
  w.attr("/", "warmup_steps", static_cast<I>(o.warmup_steps));
  w.attr("/", "num_buckets", static_cast<I>(r.bucket_bytes.size()));
  w.attr("/", "bucket_bytes", r.bucket_bytes);
  w.attr("/", "bucket_algo_used", r.bucket_algo_used);
  w.attr("/", "final_param_norm", r.final_param_norm);
  w.attr("/", "final_eval_accuracy", r.final_eval_accuracy);
  w.attr("/", "compression_ratio", r.compression_ratio);
  w.attr("/", "emulation_overruns", static_cast<I>(r.replay.overruns));
  w.attr("/", "emulation_overrun_s", r.replay.overrun_s);
  w.attr("/", "compute_threads", r.compute_threads);
  write_net_traffic(w, r.net);

  // ---- /steps -------------------------------------------------------------------------------
  const std::size_t n = r.steps.size();
  std::vector<I> step(n), skipped(n);
  std::vector<double> loss_scale(n);
  std::vector<double> cols[StepRow::kFields];
  for (auto& c : cols) c.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const StepRow& s = r.steps[i];
    step[i] = static_cast<I>(i);
    skipped[i] = s.skipped != 0 ? 1 : 0;
    loss_scale[i] = s.loss_scale;
    const double v[StepRow::kFields] = {s.loss,        s.step_time_s, s.data_s,      s.forward_s,
                                        s.backward_s,  s.comm_exposed_s, s.optimizer_s, s.bytes_sent,
                                        s.comm_total_s, s.encode_s,   s.decode_s,    s.reducer_s,
                                        s.reducer_launch_wall_s, s.unscale_s, s.backward_sync_s, s.cpu_s};
    for (int f = 0; f < StepRow::kFields; ++f) cols[f][i] = v[f];
  }
  static const char* names[StepRow::kFields] = {"loss",        "step_time_s",  "data_s",   "forward_s",
                                                "backward_s",  "comm_exposed_s", "optimizer_s", "bytes_sent",
                                                "comm_total_s", "encode_s",    "decode_s", "reducer_s",
                                                "reducer_launch_wall_s", "unscale_s", "backward_sync_s", "cpu_s"};
  w.group("/steps");
  w.write("/steps/step", step);
  for (int f = 0; f < StepRow::kFields; ++f) w.write(std::string("/steps/") + names[f], cols[f]);
  w.write("/steps/loss_scale", loss_scale);
  w.write("/steps/skipped", skipped);
  w.attr("/steps", "aggregation",
         std::string("step_time_s: max over ranks; loss_scale, skipped: the same on all ranks; "
                     "other columns: mean over ranks"));

  // ---- /ranks: every rank's own columns, [steps, nranks] -------------------------------------
  if (!r.rank_steps.empty()) {
    const std::size_t p = r.rank_steps.size();
    const std::pair<const char*, double StepRow::*> per_rank[] = {
        {"step_time_s", &StepRow::step_time_s}, {"data_s", &StepRow::data_s},
        {"forward_s", &StepRow::forward_s},     {"backward_s", &StepRow::backward_s},
        {"comm_exposed_s", &StepRow::comm_exposed_s}, {"optimizer_s", &StepRow::optimizer_s},
        {"reducer_s", &StepRow::reducer_s},     {"encode_s", &StepRow::encode_s},
        {"decode_s", &StepRow::decode_s},       {"backward_sync_s", &StepRow::backward_sync_s},
        {"cpu_s", &StepRow::cpu_s}};
    w.group("/ranks");
    for (const auto& [name, field] : per_rank)
      w.write(std::string("/ranks/") + name,
              rows_by_rank(n, p, [&, f = field](std::size_t i, std::size_t k) { return r.rank_steps[k].at(i).*f; }), {n, p});
  }

  // ---- /buckets: rank 0's timeline -----------------------------------------------------------
  static const std::vector<BucketRow> kNone;
  const std::vector<BucketRow>& rank0 = r.rank_buckets.empty() ? kNone : r.rank_buckets.front();
  std::vector<I> bstep, bidx, bbytes;
  std::vector<double> ready, start, end, codec;
  for (const auto& b : rank0) {
    bstep.push_back(b.step);
    bidx.push_back(b.bucket);
    bbytes.push_back(b.rec.bytes);
    ready.push_back(b.rec.ready_s);
    start.push_back(b.rec.start_s);
    end.push_back(b.rec.end_s);
    codec.push_back(b.rec.codec_s);
  }
  w.group("/buckets");
  w.write("/buckets/step", bstep);
  w.write("/buckets/bucket", bidx);
  w.write("/buckets/bytes", bbytes);
  w.write("/buckets/ready_s", ready);
  w.write("/buckets/start_s", start);
  w.write("/buckets/end_s", end);
  w.write("/buckets/codec_s", codec);
  w.attr("/buckets", "timeline", std::string("rank 0; seconds from the start of the step"));
  // Every rank's timeline of the same rows, [rows, nranks]: which rank's codec or exchange a
  // bucket waited for. Ranks run the same steps and buckets; a mismatch writes nothing here.
  const bool aligned = std::all_of(r.rank_buckets.begin(), r.rank_buckets.end(), [&](const auto& v) {
    if (v.size() != rank0.size()) return false;
    for (std::size_t i = 0; i < v.size(); ++i)
      if (v[i].step != rank0[i].step || v[i].bucket != rank0[i].bucket) return false;
    return true;
  });
  if (aligned && !rank0.empty()) {
    const std::size_t rows = rank0.size(), p = r.rank_buckets.size();
    const std::pair<const char*, double BucketRecord::*> per_rank[] = {
        {"ready_s", &BucketRecord::ready_s}, {"start_s", &BucketRecord::start_s},
        {"end_s", &BucketRecord::end_s}, {"codec_s", &BucketRecord::codec_s}};
    w.group("/buckets/by_rank");
    for (const auto& [name, field] : per_rank)
      w.write(std::string("/buckets/by_rank/") + name,
              rows_by_rank(rows, p, [&, f = field](std::size_t i, std::size_t k) { return r.rank_buckets[k][i].rec.*f; }),
              {rows, p});
  }

  // ---- /model: the parameter tensors, forward (registration) order --------------------------
  {
    std::vector<std::string> tname;
    std::vector<I> tnumel, tndim, tshape, tbucket;
    for (std::size_t i = 0; i < r.tensors.size(); ++i) {
      const auto& t = r.tensors[i];
      tname.push_back(t.name);
      tnumel.push_back(static_cast<I>(t.numel()));
      tndim.push_back(static_cast<I>(t.shape.size()));
      for (auto d : t.shape) tshape.push_back(static_cast<I>(d));
      tbucket.push_back(i < r.tensor_bucket.size() ? r.tensor_bucket[i] : I{-1});
    }
    w.group("/model");
    w.write("/model/tensor_names", tname);
    w.write("/model/tensor_numel", tnumel);
    w.write("/model/tensor_ndim", tndim);
    w.write("/model/tensor_shape", tshape);
    w.write("/model/tensor_bucket", tbucket);
    w.attr("/model", "order", std::string("forward (registration) order; tensor_shape: the shapes concatenated "
                                          "(tensor_ndim entries each); tensor_bucket: index into /buckets"));
  }

  // ---- /epochs ------------------------------------------------------------------------------
  std::vector<I> ep;
  std::vector<double> et, el, ea;
  for (const auto& e : r.epochs) {
    ep.push_back(e.epoch);
    et.push_back(e.epoch_time_s);
    el.push_back(e.loss);
    ea.push_back(e.eval_accuracy);
  }
  w.group("/epochs");
  w.write("/epochs/epoch", ep);
  w.write("/epochs/epoch_time_s", et);
  w.write("/epochs/loss", el);
  w.write("/epochs/eval_accuracy", ea);
  w.attr("/epochs", "epoch_time_s", std::string("sum of the epoch's step times (evaluation excluded)"));
  w.commit();
  return w.final_path();
}

}  // namespace gradsync::train
