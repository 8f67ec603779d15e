// gradsync-train — data-parallel training with a DDP-style bucketed gradient reducer.
//
//   mpirun -np N gradsync-train --model NAME [options]     (see --help)
//   gradsync-train --list-models [--json]                   (no mpirun needed)
//
// Exit status: 0 on success; 2 for usage errors (bad options are refused before MPI is
// initialised; the few that depend on the rank count right after, identically on every
// rank; --device cuda in a build without CUDA); 1 for run-time errors (one line per failing
// rank, then MPI_Abort), and for --device cuda where a rank has no usable GPU (decided by all
// ranks together before anything else: one line from the lowest such rank, a normal exit).
// Progress goes to stderr (rank 0); the summary and the result path to stdout.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "comm/mpi_comm.hpp"
#include "comm/net_traffic.hpp"
#include "core/cpus.hpp"
#include "core/error.hpp"
#include "core/h5io.hpp"
#include "core/json.hpp"
#include "core/params.hpp"
#include "core/units.hpp"
#include "device/host.hpp"
#include "train/options.hpp"
#include "train/results.hpp"
#include "train/trainer.hpp"
#ifdef GRADSYNC_HAVE_CUDA
#include "cuda/device.hpp"
#include "device/cuda.hpp"
#endif

namespace {

using namespace gradsync;
using namespace gradsync::train;

void usage_error(const std::string& msg) { std::fprintf(stderr, "gradsync-train: error: %s\n", msg.c_str()); }

double median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// "auto: shm (3 buckets), mpi (1 bucket)": the algorithms the buckets' all-reduces ran,
// in first-use order with their bucket counts.
std::string algorithm_line(const std::string& algo, const std::vector<std::string>& per_bucket) {
  std::vector<std::pair<std::string, int>> counts;
  for (const auto& a : per_bucket) {
    const std::string name = a.empty() ? "no all-reduce" : a;
    auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == name; });
    if (it == counts.end()) counts.emplace_back(name, 1);
    else ++it->second;
  }
  if (counts.size() == 1 && counts[0].first == algo) return algo;
  std::string s = algo + ":";
  for (std::size_t i = 0; i < counts.size(); ++i)
    s += (i ? ", " : " ") + counts[i].first + " (" + std::to_string(counts[i].second) +
         (counts[i].second == 1 ? " bucket)" : " buckets)");
  return s;
}

void print_summary(const TrainOptions& o, const RunResult& r, const std::string& path) {
  const std::size_t skip = std::min<std::size_t>(static_cast<std::size_t>(o.warmup_steps), r.steps.size() > 1 ? r.steps.size() - 1 : 0);
  std::vector<double> step, exposed, total, bytes, reducer_pct;
  for (std::size_t i = skip; i < r.steps.size(); ++i) {
    const StepRow& s = r.steps[i];
    step.push_back(s.step_time_s);
    exposed.push_back(s.comm_exposed_s);
    total.push_back(s.comm_total_s);
    bytes.push_back(s.bytes_sent);
    reducer_pct.push_back(s.step_time_s > 0 ? 100.0 * s.reducer_s / s.step_time_s : 0.0);
  }
  const double final_loss = r.steps.empty() ? std::nan("") : r.steps.back().loss;
  if (o.json) {
    Json algos_json = Json::array();
    for (const auto& a : r.bucket_algo_used) algos_json.push(a);
    Json j = Json::object();
    j.set("model", o.model)
        .set("compute", o.compute)
        .set("device", r.device)
        .set("backend", r.backend)
        .set("nranks", r.nranks)
        .set("steps", static_cast<long long>(r.steps_run))
        .set("median_step_time_s", median(step))
        .set("median_comm_exposed_s", median(exposed))
        .set("median_comm_total_s", median(total))
        .set("median_bytes_sent", median(bytes))
        .set("median_reducer_pct", median(reducer_pct))
        .set("algo", run_algo(o, r))
        .set("bucket_algo_used", algos_json)
        .set("final_loss", std::isfinite(final_loss) ? Json(final_loss) : Json())
        .set("final_eval_accuracy", std::isfinite(r.final_eval_accuracy) ? Json(r.final_eval_accuracy) : Json())
        .set("final_param_norm", r.final_param_norm)
        .set("precision", r.precision)
        .set("final_loss_scale", r.steps.empty() ? 1.0 : r.steps.back().loss_scale)
        .set("skipped_steps", static_cast<long long>(r.skipped_steps))
        .set("out", path);
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("gradsync-train: %s, %s compute, %d rank(s) x batch %lld, %lld steps (%zu warm-up left out)\n",
              o.model.c_str(), o.compute.c_str(), r.nranks, static_cast<long long>(o.batch_per_rank),
              static_cast<long long>(r.steps_run), skip);
  if (r.device == "cuda")
    std::printf("  device         cuda (%s), backend %s, %s in use on the GPU at the end\n", r.gpu_name.c_str(),
                r.backend.c_str(), format_bytes(static_cast<double>(r.gpu_memory_used_bytes)).c_str());
  const double me = median(exposed), mt = median(total);
  std::printf("  step time      %.3f ms (median)\n", median(step) * 1e3);
  if (r.nranks > 1 && mt > 0)
    std::printf("  exposed comm   %.3f ms of %.3f ms total comm (%.0f%% exposed)\n", me * 1e3, mt * 1e3,
                100.0 * me / mt);
  else
    std::printf("  exposed comm   %.3f ms (1 rank: nothing to communicate)\n", me * 1e3);
  std::printf("  sent per step  %s per rank in %zu bucket(s)\n", format_bytes(median(bytes)).c_str(),
              r.bucket_bytes.size());
  if (r.nranks > 1 && !r.bucket_algo_used.empty())
    std::printf("  algorithm      %s\n", algorithm_line(run_algo(o, r), r.bucket_algo_used).c_str());
  std::printf("  reducer        %.2f%% of step time (bookkeeping, median)\n", median(reducer_pct));
  // Which interfaces carried the run (those with traffic; the file has them all).
  for (const std::string& line : net_traffic_lines(r.net, r.hostnames))
    std::printf("  interfaces     %s\n", line.c_str());
  if (r.precision != "fp32") {
    const double first = r.steps.empty() ? 1.0 : r.steps.front().loss_scale;
    const double last = r.steps.empty() ? 1.0 : r.steps.back().loss_scale;
    const bool cast = r.compress_effective == "fp16" || r.compress_effective == "bf16";
    std::printf("  precision      %s (wire: %s%s), loss scale %s %g -> %g, %lld skipped step(s)\n", r.precision.c_str(),
                r.compress_effective.c_str(), cast ? " cast" : " of the unscaled fp32 gradients",
                r.loss_scale_mode.c_str(), first, last, static_cast<long long>(r.skipped_steps));
  }
  if (o.compute == "real")
    std::printf("  final loss     %.4f, eval accuracy %.2f%%\n", final_loss, 100.0 * r.final_eval_accuracy);
  else if (r.replay.overruns > 0)
    std::printf("  emulation      %lld backward pass(es) (all ranks) ran longer than modelled, by %.3f s in all\n",
                static_cast<long long>(r.replay.overruns), r.replay.overrun_s);
}

}  // namespace

int main(int argc, char** argv) {
  TrainOptions o;
  try {
    o = parse_train_options(argc, argv);
    if (o.help) {
      std::printf("%s", train_usage().c_str());
      return 0;
    }
    if (o.list_models) {
      std::printf("%s", list_models_text(o.json).c_str());
      return 0;
    }
    // "--tune X" as two words under Open MPI's mpirun: mpirun 4.x also took it as its own
    // --tune (an MCA parameter file X) and each process printed "Unable to locate the variable
    // file" before this one started. The run goes on; one line says what those messages were.
    if (!o.tune.empty() && std::getenv("OMPI_COMM_WORLD_SIZE") && launcher_rank_zero())
      for (int i = 1; i + 1 < argc; ++i)
        if (std::string(argv[i]) == "--tune")
          std::fprintf(stderr,
                       "gradsync-train: note: '--tune %s' as two words: Open MPI 4's mpirun also reads it as its own "
                       "option (an MCA parameter file) and each process prints 'Unable to locate the variable file'; "
                       "gradsync-train tunes for fabric %s all the same. Write --tune=%s to keep mpirun out of it\n",
                       argv[i + 1], o.tune.c_str(), o.tune.c_str());
    validate_params();  // first: a bad GRADSYNC_* default is named as the variable, not as its option
    validate_train_options(o);
#ifndef GRADSYNC_HAVE_CUDA
    GS_USAGE_CHECK(o.device != "cuda",
                   "option --device cuda: this gradsync-train was built without CUDA support (GRADSYNC_WITH_CUDA=OFF)");
#endif
  } catch (const UsageError& e) {
    if (launcher_rank_zero()) usage_error(e.what());  // every rank finds the same error
    return usage_exit_status(2);
  } catch (const std::exception& e) {
    if (launcher_rank_zero()) usage_error(e.what());
    return usage_exit_status(1);
  }

  const std::vector<std::string> args(argv, argv + argc);
  MpiRuntime mpi(&argc, &argv);
  MpiCommunicator world;
  // Declared outside the try: on a run-time error we abort *before* their destructors run,
  // which would join a communication thread that may be waiting on a dead peer. The device
  // (device/device.hpp) outlives the trainer.
  std::unique_ptr<device::Device> dev;
  std::unique_ptr<Trainer> trainer;
  try {
#ifdef GRADSYNC_HAVE_CUDA
    if (o.device == "cuda") {
      // A GPU on every rank, checked by all ranks together before anything else.
      device::require_cuda_on_all_ranks(world);
      dev = device::make_cuda_device(world.local_rank());
    }
#endif
    if (!dev) dev = device::make_host_device();
    if (!o.tune.empty()) {  // --tune: the same choice on every rank (every rank has the same options)
      const MachineShare m =
          machine_share(world.allgather_strings(machine_id()), world.allgather_strings(cpu_list(affinity_cpus())));
      apply_tune(o, world.node_count(), static_cast<int>(world.max_int64(world.local_size())), m.ranks, m.cores);
    }
    GS_CHECK(mpi.thread_level() >= MPI_THREAD_MULTIPLE, "the MPI library provides thread level ", mpi.thread_level(),
             " but the reducer's communication thread needs MPI_THREAD_MULTIPLE (", MPI_THREAD_MULTIPLE, ")");
    // The result path is checked before any step runs (rank 0 writes it; every rank
    // learns the verdict and refuses together: a UsageError, status 2).
    std::string path, refusal;   // rank 0's; refusal empty when the path is fine
    h5::PathState out_at_start;  // what the run may replace (rank 0)
    if (world.rank() == 0) {
      path = o.out.empty() ? default_result_path(o.model) : o.out;
      try {
        out_at_start = h5::check_output_path(path);
      } catch (const Error& e) {
        refusal = std::string(o.out.empty() ? "default result file: " : "option --out: ") + e.what();
      }
    }
    std::vector<char> verdict(refusal.begin(), refusal.end());
    world.broadcast_bytes(verdict, 0);
    if (!verdict.empty()) throw UsageError(std::string(verdict.begin(), verdict.end()));
    trainer = std::make_unique<Trainer>(o, world, *dev);
    const NetTrafficMeter meter;  // interface counters from the first step to the last
    RunResult r = trainer->run();
    r.net = meter.gather(world, "the whole run: every step, warm-up included, and the evaluations");
    if (world.rank() == 0) {
      path = write_train_results(path, o, r, args, o.out.empty(), &out_at_start);
      if (!o.quiet) print_summary(o, r, path);
      if (!o.json || o.quiet) std::printf("wrote %s\n", path.c_str());
      std::fflush(stdout);
    }
    world.barrier();
#ifdef GRADSYNC_HAVE_CUDA
  } catch (const NoCudaDeviceError& e) {
    // Every rank gets here together; the message is non-empty on one rank only (rank 0
    // when no rank has a GPU). A normal exit (MPI_Finalize), status 1.
    if (*e.what()) usage_error(e.what());
    return 1;
#endif
  } catch (const UsageError& e) {
    // Raised identically on every rank (options were checked equal across ranks first),
    // before any bucket was launched.
    if (world.rank() == 0) usage_error(e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gradsync-train: error: %s\n", e.what());
    MpiRuntime::abort(1);
  }
  return 0;
}
