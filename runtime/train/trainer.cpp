// gradsync/train/trainer.cpp — see trainer.hpp.
#include "train/trainer.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <type_traits>

#include "algos/allreduce.hpp"
#include "compress/compressor.hpp"
#include "compress/loss_scaler.hpp"
#include "core/cpus.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"
#include "device/host.hpp"
#include "models/compute_profile.hpp"
#include "models/zoo.hpp"
#include "train/dataset.hpp"
#include "train/emulated.hpp"
#include "train/loader.hpp"
#include "train/network.hpp"
#include "train/optimizer.hpp"
#include "train/precision.hpp"
#include "train/sampler.hpp"
#include "plan/algos.hpp"
#include "plan/buckets.hpp"
#include "plan/compress.hpp"

namespace gradsync::train {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Rank 0's progress on stderr: an updating line on a terminal, a plain line every ~10% of
// the steps otherwise. Loss and times are rank 0's own (no collective per step).
class Progress {
 public:
  Progress(bool enabled, std::int64_t total) : enabled_(enabled), total_(total), tty_(isatty(2) != 0) {}
  void update(std::int64_t step, double loss, double step_s, double exposed_s, double elapsed_s) {
    if (!enabled_) return;
    const std::int64_t done = step + 1;
    const bool last = done == total_;
    if (tty_) {
      const double now = now_s();
      if (!last && now - last_print_ < 0.1) return;
      last_print_ = now;
    } else {
      const std::int64_t every = std::max<std::int64_t>(1, total_ / 10);
      if (!last && done % every != 0) return;
    }
    const double eta = elapsed_s / static_cast<double>(done) * static_cast<double>(total_ - done);
    char loss_text[32] = "-";  // emulated compute has no loss
    if (std::isfinite(loss)) std::snprintf(loss_text, sizeof loss_text, "%.4f", loss);
    std::fprintf(stderr, "%sstep %lld/%lld  loss %s  step %.2f ms  exposed comm %.2f ms  ETA %.1f s%s",
                 tty_ ? "\r" : "", static_cast<long long>(done), static_cast<long long>(total_), loss_text,
                 step_s * 1e3, exposed_s * 1e3, eta, tty_ ? (last ? "\n" : "\x1b[K") : "\n");
    std::fflush(stderr);
  }

 private:
  bool enabled_;
  std::int64_t total_;
  bool tty_;
  double last_print_ = -1;
};

// The test hook GRADSYNC_TEST_INJECT_INF (trainer.hpp): the one place it is read.
std::set<std::int64_t> inject_inf_steps() {
  std::set<std::int64_t> steps;
  const char* v = std::getenv("GRADSYNC_TEST_INJECT_INF");
  if (v == nullptr) return steps;
  const std::string text(v);
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    if (!item.empty()) {
      char* end = nullptr;
      const long long s = std::strtoll(item.c_str(), &end, 10);
      GS_USAGE_CHECK(end == item.c_str() + item.size() && s >= 0, "GRADSYNC_TEST_INJECT_INF: '", item,
                     "' is not a step number (want s1,s2,... from 0)");
      steps.insert(s);
    }
    pos = comma + 1;
  }
  return steps;
}

// Rows as raw bytes, for allgather_strings (binary-safe).
template <typename Row>
std::string pack(const std::vector<Row>& rows) {
  static_assert(std::is_trivially_copyable_v<Row>);
  std::string s(rows.size() * sizeof(Row), '\0');
  if (!rows.empty()) std::memcpy(s.data(), rows.data(), s.size());
  return s;
}
template <typename Row>
std::vector<Row> unpack(const std::string& s) {
  std::vector<Row> rows(s.size() / sizeof(Row));
  if (!rows.empty()) std::memcpy(rows.data(), s.data(), rows.size() * sizeof(Row));
  return rows;
}

}  // namespace

LoaderOptions loader_options(const TrainOptions& o, std::int64_t steps_per_epoch, std::int64_t steps) {
  LoaderOptions lo;
  lo.batch = o.batch_per_rank;
  lo.batches_per_epoch = steps_per_epoch * o.accumulate;
  lo.total_batches = steps * o.accumulate;
  lo.workers = static_cast<int>(o.loader_workers);
  lo.prefetch = static_cast<int>(o.prefetch);
  lo.data_time_s = o.data_time_us * 1e-6;
  return lo;
}

namespace {

// res.steps and res.epochs from every rank's rows (finish_run).
void combine_step_statistics(Communicator& world, const std::vector<StepRow>& mine,
                             const std::vector<double>& epoch_eval, std::int64_t steps_per_epoch, RunResult& res) {
  const double nranks = static_cast<double>(world.size());
  const std::vector<std::string> all = world.allgather_strings(pack(mine));
  res.steps.assign(mine.size(), StepRow{});
  res.rank_steps.clear();
  for (const auto& blob : all) {
    const std::vector<StepRow>& r = res.rank_steps.emplace_back(unpack<StepRow>(blob));
    GS_CHECK(r.size() == mine.size(), "ranks ran different numbers of steps");
    for (std::size_t i = 0; i < r.size(); ++i) {
      StepRow& a = res.steps[i];
      a.step_time_s = std::max(a.step_time_s, r[i].step_time_s);
      a.loss += r[i].loss / nranks;
      a.data_s += r[i].data_s / nranks;
      a.forward_s += r[i].forward_s / nranks;
      a.backward_s += r[i].backward_s / nranks;
      a.comm_exposed_s += r[i].comm_exposed_s / nranks;
      a.optimizer_s += r[i].optimizer_s / nranks;
      a.bytes_sent += r[i].bytes_sent / nranks;
      a.comm_total_s += r[i].comm_total_s / nranks;
      a.encode_s += r[i].encode_s / nranks;
      a.decode_s += r[i].decode_s / nranks;
      a.reducer_s += r[i].reducer_s / nranks;
      a.reducer_launch_wall_s += r[i].reducer_launch_wall_s / nranks;
      a.unscale_s += r[i].unscale_s / nranks;
      a.backward_sync_s += r[i].backward_sync_s / nranks;
      a.cpu_s += r[i].cpu_s / nranks;
    }
  }
  for (std::size_t i = 0; i < mine.size(); ++i) {  // equal on all ranks (agreed flag)
    res.steps[i].loss_scale = mine[i].loss_scale;
    res.steps[i].skipped = mine[i].skipped;
  }
  for (std::size_t e = 0; e < epoch_eval.size(); ++e) {
    EpochRow er;
    er.epoch = static_cast<std::int64_t>(e);
    er.eval_accuracy = epoch_eval[e];
    for (std::int64_t s = static_cast<std::int64_t>(e) * steps_per_epoch;
         s < static_cast<std::int64_t>(e + 1) * steps_per_epoch; ++s) {
      er.epoch_time_s += res.steps[static_cast<std::size_t>(s)].step_time_s;
      er.loss += res.steps[static_cast<std::size_t>(s)].loss / static_cast<double>(steps_per_epoch);
    }
    res.epochs.push_back(er);
  }
}

// The algorithm each bucket's all-reduces run with in a compressed step: the compressor's
// wire plan (plan/compress.hpp) sized for p ranks, each all-reduce phase named by what the
// algorithm picks at its size (auto's choice, or the given name), "+"-joined where they
// differ (PowerSGD's rest, P and Q); "" for a bucket whose plan sends no all-reduce (top-k,
// QSGD and 1-bit all-gather and all-to-all).
std::vector<std::string> bucket_algorithms(const AllreduceAlgorithm& algo, const std::string& compress_effective,
                                           const std::vector<models::TensorSpec>& tensors,
                                           const std::vector<std::vector<std::size_t>>& assignment, int p) {
  const plan::CompressorSpec spec = plan::parse_compressor(compress_effective);
  std::vector<std::string> out;
  out.reserve(assignment.size());
  for (const auto& bucket : assignment) {
    std::vector<plan::TensorShape> shapes;
    shapes.reserve(bucket.size());
    for (std::size_t i : bucket) {
      const auto& t = tensors[i];
      shapes.push_back({t.numel(), t.shape.empty() ? 1 : t.shape[0], static_cast<int>(t.shape.size())});
    }
    std::vector<std::string> names;  // distinct, in phase order
    for (const auto& ph : plan::wire_plan(spec, shapes, 4, p).phases) {
      if (ph.op != plan::Coll::Allreduce || ph.bytes == 0) continue;
      const std::string a = algo.chosen(static_cast<std::size_t>(ph.bytes));
      if (std::find(names.begin(), names.end(), a) == names.end()) names.push_back(a);
    }
    std::string joined;
    for (const auto& a : names) joined += (joined.empty() ? "" : "+") + a;
    out.push_back(joined);
  }
  return out;
}

}  // namespace

void describe_run(Communicator& world, const std::vector<models::TensorSpec>& tensors,
                  const std::vector<std::vector<std::size_t>>& assignment, std::vector<std::int64_t> bucket_bytes,
                  const std::string& compress_spec, const std::string& compress_effective, DType precision,
                  const LossScaler* scaler, RunResult& res) {
  res.nranks = world.size();
  res.nnodes = world.node_count();
  res.ranks_per_node = static_cast<int>(world.max_int64(world.local_size()));
  res.hostnames = world.allgather_strings(world.hostname());
  res.cpus = world.allgather_strings(cpu_list(affinity_cpus()));
  res.machine_ids = world.allgather_strings(machine_id());
  res.bucket_bytes = std::move(bucket_bytes);
  res.tensors = tensors;
  res.tensor_bucket.assign(tensors.size(), -1);
  for (std::size_t b = 0; b < assignment.size(); ++b)
    for (std::size_t i : assignment[b]) res.tensor_bucket[i] = static_cast<std::int64_t>(b);
  res.compress_spec = compress_spec;
  res.compress_effective = compress_effective;
  res.precision = precision_name(precision);
  if (scaler) {
    res.loss_scale_mode = loss_scale_mode(scaler->options());
    res.loss_scale_spec = scaler->spec();
  }
}

void finish_run(Communicator& world, const std::vector<StepRow>& mine, const std::vector<BucketRow>& my_buckets,
                const std::vector<double>& epoch_eval, std::int64_t steps, std::int64_t steps_per_epoch, const LossScaler* scaler, std::uint64_t uncompressed,
                std::uint64_t compressed, const ReplayStats& replay, const std::function<double()>& evaluate,
                RunResult& res) {
  combine_step_statistics(world, mine, epoch_eval, steps_per_epoch, res);
  res.rank_buckets.clear();
  for (const auto& blob : world.allgather_strings(pack(my_buckets))) res.rank_buckets.push_back(unpack<BucketRow>(blob));
  res.skipped_steps = scaler ? scaler->skipped_steps() : 0;
  res.steps_run = steps;
  res.epochs_done = static_cast<std::int64_t>(epoch_eval.size());
  const bool last_was_epoch_end = steps > 0 && steps % steps_per_epoch == 0;
  res.final_eval_accuracy = last_was_epoch_end ? epoch_eval.back() : evaluate();
  res.compression_ratio = compressed > 0 ? static_cast<double>(uncompressed) / static_cast<double>(compressed) : 1.0;
  res.replay.overruns = static_cast<std::int64_t>(world.sum_double(static_cast<double>(replay.overruns)));
  res.replay.overrun_s = world.sum_double(replay.overrun_s);
  res.replay.busy_s = world.sum_double(replay.busy_s);
  res.replay.backward_s = world.sum_double(replay.backward_s);
}

struct Trainer::Impl {
  TrainOptions o;
  Communicator& world;
  device::Device& dev;  // where parameters, gradients and compute live (device/device.hpp)
  std::unique_ptr<Communicator> reducer_comm;
  // Reduces device buckets in place (NCCL), with its algorithm; null on the host and when
  // every bucket is staged. Declared before the reducer: destroyed after it.
  std::unique_ptr<Communicator> device_comm;
  std::unique_ptr<AllreduceAlgorithm> device_allreduce;
  int rank = 0, nranks = 1;

  models::ModelSpec spec;
  std::unique_ptr<SyntheticDataset> dataset;
  std::unique_ptr<Workload> workload;
  std::vector<models::TensorSpec> tensors;
  std::unique_ptr<device::Array> params;  // flat, forward order, in dev's memory
  std::unique_ptr<AllreduceAlgorithm> allreduce;
  std::unique_ptr<Compressor> compressor;
  std::unique_ptr<Reducer> reducer;
  std::unique_ptr<Optimizer> optimizer;
  std::vector<ParamSlot> slots;
  std::unique_ptr<DistributedSampler> sampler;
  std::unique_ptr<Loader> loader;

  // Mixed precision: the compute/gradient type, the scaler (fp16/bf16 only), the user's
  // compressor spec (canonical), and the steps where rank 0 injects an inf (test hook).
  DType precision = DType::F32;
  std::optional<LossScaler> scaler;
  std::string user_compress;
  std::set<std::int64_t> inject_steps;

  std::int64_t samples_per_epoch = 0, steps_per_epoch = 0, steps = 0;

  Impl(const TrainOptions& opts, Communicator& w, device::Device& d) : o(opts), world(w), dev(d) {
    rank = world.rank();
    nranks = world.size();
    // First, before anything can fail differently on different ranks: the options that
    // define the run must be equal everywhere. One gather of the whole fingerprint; only
    // when it differs, one check_same_on_all_ranks per option, so the error names the
    // option and the ranks (every rank sees the same gather and takes the same path).
    // After this, usage errors are deterministic and every rank raises the same one.
    const std::vector<std::string> fps = world.allgather_strings(train_fingerprint(o));
    if (std::any_of(fps.begin(), fps.end(), [&](const std::string& f) { return f != fps[0]; })) {
      for (const auto& [key, value] : fingerprint_items(o)) check_same_on_all_ranks(world, "option --" + key, value);
      check_same_on_all_ranks(world, "run configuration", train_fingerprint(o));  // not reached
    }
    // ---- workload and data -------------------------------------------------------------
    spec = is_trainable(o.model) ? make_network<float>(o.model)->spec() : models::zoo_model(o.model);
    samples_per_epoch = o.samples_per_epoch > 0 ? o.samples_per_epoch : spec.samples_per_epoch;
    const std::int64_t micro_per_epoch = (samples_per_epoch / nranks) / o.batch_per_rank;
    steps_per_epoch = micro_per_epoch / o.accumulate;
    GS_USAGE_CHECK(steps_per_epoch >= 1, "option --samples-per-epoch: ", samples_per_epoch,
                   " samples give no full step for ", nranks, " ranks x --batch-per-rank ", o.batch_per_rank,
                   " x --accumulate ", o.accumulate);
    steps = o.epochs > 0 ? o.epochs * steps_per_epoch : o.steps;
    // The reducer's communication thread gets a communicator of its own, so nothing the
    // training thread does on `world` (evaluation, statistics) can interleave with it.
    reducer_comm = world.split(0, rank);
    precision = parse_precision(o.precision);
    if (precision != DType::F32) scaler.emplace(parse_loss_scale(o.loss_scale));
    inject_steps = inject_inf_steps();
    if (o.compute == "real") {
      dataset = std::make_unique<SyntheticDataset>(data_spec_for(o.model, samples_per_epoch), o.seed);
      workload = dev.make_real_workload(o.model, *dataset, o.batch_per_rank, precision);
    } else {
      workload = make_emulated_workload(spec, models::load_profile(o.compute_profile), o.batch_per_rank, o.seed, rank,
                                        precision, &dev.generator());
    }
    tensors = spec.tensors();

    // ---- parameters, reducer, optimizer --------------------------------------------------
    params = dev.zeros(static_cast<std::size_t>(spec.num_parameters()));
    allreduce = make_allreduce(o.algo, *reducer_comm,
                               AlgoOptions{static_cast<std::size_t>(o.chunk_bytes), static_cast<int>(o.channels)});
    // NCCL reduces in place with its own algorithm ("mpi" = the library's native call);
    // --algo then applies to staged buckets.
    device_comm = dev.make_communicator(*reducer_comm, o.backend);
    if (device_comm) device_allreduce = make_allreduce("mpi", *device_comm);
    compressor = make_compressor(o.compress, o.seed, rank);
    user_compress = compressor->spec();
    ReducerOptions ro;
    ro.bucket_bytes = plan::bucket_limit_bytes(o.bucket_mb);
    ro.first_bucket_bytes = plan::bucket_limit_bytes(o.first_bucket_mb);
    ro.overlap = o.overlap;
    ro.shared_buckets = plan::parse_buffers(o.buffers);
    if (precision != DType::F32) {
      // Half precision communicates in half: "none" becomes the precision's cast
      // compressor, which carries the *scaled* gradients (unscaled after the all-reduce).
      // Every other compressor encodes the unscaled fp32 view (precision.hpp).
      if (user_compress == "none") compressor = make_compressor(precision_name(precision), o.seed, rank);
      const std::string eff = compressor->spec();
      ro.unscale = eff == "fp16" || eff == "bf16" ? Unscale::AfterReduce : Unscale::BeforeReduce;
    }
    reducer = std::make_unique<Reducer>(
        dev, ReducerComms{reducer_comm.get(), allreduce.get(), device_comm.get(), device_allreduce.get()}, *compressor,
        tensors, ro);
    std::vector<float*> pv, gv;
    std::size_t off = 0;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      pv.push_back(params->data() + off);
      gv.push_back(reducer->grad(i));
      slots.push_back(ParamSlot{params->data() + off, reducer->grad(i), tensors[i].numel()});
      off += static_cast<std::size_t>(tensors[i].numel());
    }
    workload->bind(pv, gv);
    workload->init_params(o.seed);
    OptimizerOptions oo;
    oo.lr = o.lr;
    optimizer = dev.make_optimizer(o.optimizer, oo);

    // ---- the bucket layout must match too (it also depends on the model tables) ----------
    check_same_on_all_ranks(world, "bucket layout", reducer->layout());

    // ---- data loading ---------------------------------------------------------------------
    sampler = std::make_unique<DistributedSampler>(samples_per_epoch, nranks, rank, o.seed);
    loader = std::make_unique<Loader>(*sampler, dataset.get(), loader_options(o, steps_per_epoch, steps));
  }

  // Accuracy on the held-out set, each rank evaluating positions rank, rank+N, ...
  double evaluate() {
    if (!workload->real()) return kNaN;
    const double correct = world.sum_double(static_cast<double>(workload->evaluate(rank, nranks)));
    return correct / static_cast<double>(dataset->size(Split::Eval));
  }

  RunResult run() {
    RunResult res;
    describe_run(world, tensors, reducer->assignment(), reducer->bucket_bytes(), user_compress, compressor->spec(),
                 precision, scaler ? &*scaler : nullptr, res);
    res.samples_per_epoch = samples_per_epoch;
    res.steps_per_epoch = steps_per_epoch;
    res.backend = o.backend;
    const ChunkChoice chunk = allreduce->chunk();
    res.chunk_bytes_used = static_cast<std::int64_t>(chunk.bytes);
    res.chunk_reason = chunk.reason;
    res.bucket_algo_used = device_comm ? std::vector<std::string>(reducer->assignment().size(), "nccl")
                                       : bucket_algorithms(*allreduce, compressor->spec(), tensors,
                                                           reducer->assignment(), reducer_comm->size());
    res.buffers = reducer->shared_buckets() ? "shared" : "private";
    res.device = dev.name();
    res.gpu_name = dev.gpu_name();

    std::vector<StepRow> mine;
    mine.reserve(static_cast<std::size_t>(steps));
    std::vector<BucketRow> my_buckets;  // this rank's bucket timeline
    std::vector<double> epoch_eval;
    std::uint64_t uncompressed = 0, compressed = 0;
    Progress progress(rank == 0 && !o.quiet, steps);
    const std::int64_t K = o.accumulate;
    // Test hook: in an injected step, the first gradient ready on rank 0 gets an +inf.
    bool inject_now = false;
    const GradReadyFn ready = [this, &inject_now](std::size_t i) {
      if (inject_now) {
        dev.set_value(reducer->grad(i), std::numeric_limits<float>::infinity());
        inject_now = false;
      }
      reducer->mark_ready(i);
    };

    world.barrier();  // start the clocks together
    const double run_start = now_s();
    for (std::int64_t s = 0; s < steps; ++s) {
      StepRow row;
      const double t0 = now_s(), cpu0 = process_cpu_s();
      double loss_sum = 0;
      // The loss scale S of this step multiplies the backward's seed gradient; the
      // reducer unscales with float(1/double(S)), as GradScaler does.
      const float loss_scale = scaler ? scaler->scale() : 1.0f;
      const float scale = loss_scale / static_cast<float>(K);
      const float inv_scale = scaler ? scaler->inv_scale() : 1.0f;
      bool found_inf = false;
      for (std::int64_t k = 0; k < K; ++k) {
        double t = now_s();
        const Batch batch = loader->next();
        row.data_s += now_s() - t;
        t = now_s();
        loss_sum += workload->forward(batch);
        row.forward_s += now_s() - t;
        const bool sync = k == K - 1;
        reducer->begin_backward(t0, s, sync, sync ? inv_scale : 1.0f);
        inject_now = sync && rank == 0 && inject_steps.count(s) != 0;
        t = now_s();
        workload->backward(s * K + k, scale, /*accumulate=*/k > 0, ready);
        const double t_bwd_end = now_s();
        row.backward_s += t_bwd_end - t;
        if (sync) row.backward_sync_s = t_bwd_end - t;
        const StepComm sc = reducer->finish_backward();
        // Every rank must take the same decision: agree on the flag (a plain all-reduce
        // spreads an inf to all ranks, but a compressor's local check need not).
        if (sync && scaler) found_inf = world.max_int64(sc.found_inf ? 1 : 0) != 0;
        if (sync) row.comm_exposed_s = now_s() - t_bwd_end;
        row.reducer_s += sc.overhead_s;
        row.reducer_launch_wall_s += sc.launch_wall_s;
        if (sync) {
          row.bytes_sent = static_cast<double>(sc.stats.wire_bytes);
          row.comm_total_s = sc.comm_busy_s;
          row.encode_s = sc.stats.encode_s;
          row.decode_s = sc.stats.decode_s;
          row.unscale_s = sc.unscale_s;
          // compression_ratio counts compressed steps only (results/README.md): PowerSGD's
          // plain steps before start=K, and plain all-reduces, send the payload unchanged.
          if (sc.stats.compressed) {
            uncompressed += sc.stats.uncompressed_bytes;
            compressed += sc.stats.compressed_bytes;
          }
          for (std::size_t b = 0; b < sc.buckets.size(); ++b)
            my_buckets.push_back(BucketRow{s, static_cast<std::int64_t>(b), sc.buckets[b]});
        }
      }
      double t = now_s();
      row.loss_scale = loss_scale;
      if (scaler) row.skipped = scaler->update(found_inf).skipped ? 1 : 0;
      if (row.skipped == 0) optimizer->step(slots);  // a skipped step leaves weights and optimizer state
      row.optimizer_s = now_s() - t;
      row.loss = loss_sum / static_cast<double>(K);
      row.step_time_s = now_s() - t0;
      row.cpu_s = process_cpu_s() - cpu0;
      mine.push_back(row);
      progress.update(s, row.loss, row.step_time_s, row.comm_exposed_s, now_s() - run_start);
      if ((s + 1) % steps_per_epoch == 0) epoch_eval.push_back(evaluate());  // collective, outside step times
    }

    // ---- statistics over ranks ---------------------------------------------------------------
    finish_run(world, mine, my_buckets, epoch_eval, steps, steps_per_epoch, scaler ? &*scaler : nullptr, uncompressed, compressed,
               workload->replay_stats(), [this] { return evaluate(); }, res);
    res.gpu_memory_used_bytes = dev.memory_used_bytes();
    if (res.device == "cpu")
      res.compute_threads = workload->real() ? 1.0
                            : res.replay.backward_s > 0 ? res.replay.busy_s / res.replay.backward_s : 0.0;
    res.final_param_norm = std::sqrt(device::norm2(dev, params->data(), params->count()));
    return res;
  }
};

Trainer::Trainer(const TrainOptions& opts, Communicator& world)
    : impl_(std::make_unique<Impl>(opts, world, device::host_device())) {}
Trainer::Trainer(const TrainOptions& opts, Communicator& world, device::Device& dev)
    : impl_(std::make_unique<Impl>(opts, world, dev)) {}
Trainer::~Trainer() = default;
RunResult Trainer::run() { return impl_->run(); }

}  // namespace gradsync::train
