// gradsync-model — the analytic network cost model's command line.
//
//   gradsync-model fabrics [--show NAME|FILE] [--json]
//   gradsync-model collective --op allreduce --algo ring --ranks 8 [--nodes 2] --bytes N
//                             (--fabric NAME|FILE | --alpha-us A --bw-GBps B [--gamma-GBps G])
//                             [--chunk-bytes C] [--channels H] [--json]
//   gradsync-model predict --model resnet50 --fabric roce-100g --nodes 16 --ranks-per-node 8
//                          --batch-per-rank 32 [...] [--json] [--out pred.h5]
//   gradsync-model predict --from-run RUN.h5 --fabric seed-tcp,seed-roce --nodes 1..8 [...]
//   gradsync-model calibrate FILE.h5|LOG... -o fabric.toml [--base FABRIC] [--intra FABRIC] [--nodes N
//                            --ranks-per-node G] [--nics-per-node R] [--op OP] [--points-only] [--burst-bytes B]
//                            [--cores-per-node C] [--json]
//   gradsync-model calibrate --compute train*.h5 -o profile.toml [--json]
//   gradsync-model compare train*.h5 --fabric FILE [--json] [--out report.h5] [--trace trace.json]
//
// Exit status: 0 ok, 1 run-time error (data that cannot determine a fit, a failed write),
// 2 a wrong request: a bad option or an input file that is missing, unreadable or of the
// wrong kind ("gradsync-model: error: <message naming the option or file>").
#include <boost/program_options.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/h5io.hpp"
#include "core/json.hpp"
#include "core/provenance.hpp"
#include "core/units.hpp"
#include "models/zoo.hpp"
#include "netmodel/calibrate.hpp"
#include "netmodel/inputs/nccl_tests.hpp"
#include "netmodel/collectives.hpp"
#include "netmodel/compare.hpp"
#include "netmodel/trace.hpp"
#include "netmodel/fabric.hpp"
#include "netmodel/grid.hpp"
#include "netmodel/predict.hpp"
#include "netmodel/train_file.hpp"
#include "netmodel/tune.hpp"
#include "plan/algos.hpp"

namespace po = boost::program_options;
using namespace gradsync;
using namespace gradsync::netmodel;

namespace {

constexpr const char* kUsage =
    "usage: gradsync-model <command> [options]\n"
    "commands:\n"
    "  fabrics      list the built-in fabric profiles (--show NAME prints one as TOML)\n"
    "  collective   cost of one collective (--op --algo --ranks [--nodes] --bytes, --fabric or --alpha-us/--bw-GBps)\n"
    "  predict      step and epoch time of a training configuration (numeric options take lists and A..B[:S] ranges)\n"
    "  calibrate    fit a fabric (or with --compute a compute profile) to gradsync-bench / gradsync-train files\n"
    "  compare      predict measured gradsync-train runs and report the errors\n"
    "  tune         search bucket, algorithm, chunk, channels, compressor, precision (and interface) for a cluster\n"
    "Run 'gradsync-model <command> --help' for the options of a command.\n";

std::vector<std::string> g_argv;

po::variables_map parse(const std::vector<std::string>& args, const po::options_description& desc,
                        const po::positional_options_description* pos = nullptr) {
  po::variables_map vm;
  auto parser = po::command_line_parser(args).options(desc);
  if (pos) parser.positional(*pos);
  po::store(parser.run(), vm);
  po::notify(vm);
  return vm;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// ---- fabrics ---------------------------------------------------------------------------------

int cmd_fabrics(const std::vector<std::string>& args) {
  po::options_description d("gradsync-model fabrics");
  d.add_options()("help,h", "this help")("show", po::value<std::string>(), "print one fabric (name or file) as TOML")(
      "json", "print one JSON object");
  const auto vm = parse(args, d);
  if (vm.count("help")) {
    std::cout << d;
    return 0;
  }
  auto level_json = [](const Level& l) {
    Json j = Json::object();
    j.set("alpha_us", l.alpha_s * 1e6).set("bw_GBps", l.bw_Bps / 1e9);
    j.set("gamma_GBps", std::isfinite(l.gamma_Bps) ? Json(l.gamma_Bps / 1e9) : Json(nullptr));
    j.set("conn_bw_GBps", std::isfinite(l.conn_bw_Bps) ? Json(l.conn_bw_Bps / 1e9) : Json(nullptr));
    j.set("connections", l.connections).set("regimes", static_cast<int>(l.regimes.size())).set("source", l.source);
    j.set("duplex", l.duplex(kInf));
    j.set("contention", l.contention).set("contention_us", l.contention_alpha_s * 1e6);
    return j;
  };
  if (vm.count("show")) {
    const Fabric f = load_fabric(vm["show"].as<std::string>());
    if (vm.count("json")) {
      Json j = Json::object();
      j.set("name", f.name).set("description", f.description).set("intra", level_json(f.intra)).set("inter", level_json(f.inter));
      std::cout << j.dump() << "\n";
    } else {
      std::cout << fabric_to_toml(f);
    }
    return 0;
  }
  if (vm.count("json")) {
    Json arr = Json::array();
    for (const auto& n : fabric_names()) {
      const Fabric f = builtin_fabric(n);
      Json j = Json::object();
      j.set("name", f.name).set("description", f.description).set("intra", level_json(f.intra)).set("inter", level_json(f.inter));
      arr.push(j);
    }
    Json out = Json::object();
    out.set("fabrics", arr);
    std::cout << out.dump() << "\n";
    return 0;
  }
  std::printf("%-12s %10s %10s %10s %10s %10s  %s\n", "# name", "inter_us", "inter_GBps", "conn_GBps", "intra_us",
              "intra_GBps", "description");
  for (const auto& n : fabric_names()) {
    const Fabric f = builtin_fabric(n);
    std::printf("%-12s %10.2f %10.2f %10s %10.2f %10.2f  %s\n", n.c_str(), f.inter.alpha_s * 1e6, f.inter.bw_Bps / 1e9,
                std::isfinite(f.inter.conn_bw_Bps) ? fmt("%.2f", f.inter.conn_bw_Bps / 1e9).c_str() : "-",
                f.intra.alpha_s * 1e6, f.intra.bw_Bps / 1e9, f.description.c_str());
  }
  std::printf("# sources: gradsync-model fabrics --show NAME; regimes (eager/rendezvous) are listed there too\n");
  return 0;
}

// ---- collective ------------------------------------------------------------------------------

int cmd_collective(const std::vector<std::string>& args) {
  po::options_description d("gradsync-model collective");
  d.add_options()("help,h", "this help")("op", po::value<std::string>()->default_value("allreduce"),
                                         "allreduce|allgather|reducescatter|alltoall|broadcast|pingpong|sendrecv")(
      "algo", po::value<std::string>()->default_value("ring"), "ring|rd|rabenseifner|tree|hier|shm|mpi|auto|dbtree|nccl (NCCL's own ring/tree and protocol choice)")(
      "ranks", po::value<std::string>(), "total ranks (required)")("nodes", po::value<std::string>()->default_value("1"),
                                                                   "nodes (ranks are split evenly)")(
      "bytes", po::value<std::string>(), "size per rank (nccl-tests convention); list or range allowed, e.g. 8,1K,1M")(
      "fabric", po::value<std::string>(), "built-in name or TOML file")("alpha-us", po::value<std::string>(),
                                                                         "latency per message (one level)")(
      "bw-GBps", po::value<std::string>(), "bandwidth, GB/s = 1e9 B/s")("gamma-GBps", po::value<std::string>(),
                                                                       "reduction throughput (optional)")(
      "chunk-bytes", po::value<std::string>()->default_value("0"),
      "ring pipelining chunk (0: none; auto: the runtime's own for --algo on --nodes, e.g. 32K between nodes "
      "over TCP, 4M on one node)")(
      "channels", po::value<std::string>()->default_value("1"), "concurrent rings")(
      "buffers", po::value<std::string>()->default_value("shared"),
      "shared (gradsync-bench's default on one node: shm reads the peers' registered buffers in place from 256 KiB "
      "on) or private (shm copies each input into its segment first)")("json", "print one JSON object");
  const auto vm = parse(args, d);
  if (vm.count("help")) {
    std::cout << d;
    return 0;
  }
  GS_USAGE_CHECK(vm.count("ranks"), "option --ranks is required");
  GS_USAGE_CHECK(vm.count("bytes"), "option --bytes is required");
  const Op op = parse_op(vm["op"].as<std::string>());
  const std::string algo = vm["algo"].as<std::string>();
  check_algo_name(algo);
  const int64_t ranks = parse_int(vm["ranks"].as<std::string>(), "--ranks");
  const int64_t nodes = parse_int(vm["nodes"].as<std::string>(), "--nodes");
  GS_USAGE_CHECK(ranks >= 1, "option --ranks must be >= 1, got ", ranks);
  GS_USAGE_CHECK(nodes >= 1, "option --nodes must be >= 1, got ", nodes);
  GS_USAGE_CHECK(ranks % nodes == 0, "option --ranks (", ranks, ") must be a multiple of --nodes (", nodes, ")");
  const Topology topo{static_cast<int>(nodes), static_cast<int>(ranks / nodes)};
  Fabric fabric;
  const bool ab = vm.count("alpha-us") || vm.count("bw-GBps") || vm.count("gamma-GBps");
  if (vm.count("fabric")) {
    GS_USAGE_CHECK(!ab, "option --fabric cannot be combined with --alpha-us/--bw-GBps/--gamma-GBps");
    fabric = load_fabric(vm["fabric"].as<std::string>());
  } else {
    GS_USAGE_CHECK(vm.count("alpha-us") && vm.count("bw-GBps"),
                   "give --fabric NAME|FILE, or both --alpha-us and --bw-GBps");
    const double a = parse_double(vm["alpha-us"].as<std::string>(), "--alpha-us");
    const double b = parse_double(vm["bw-GBps"].as<std::string>(), "--bw-GBps");
    GS_USAGE_CHECK(a >= 0, "option --alpha-us must be >= 0, got ", a);
    GS_USAGE_CHECK(b > 0, "option --bw-GBps must be > 0, got ", b);
    double g = kInf;
    if (vm.count("gamma-GBps")) {
      g = parse_double(vm["gamma-GBps"].as<std::string>(), "--gamma-GBps");
      GS_USAGE_CHECK(g > 0, "option --gamma-GBps must be > 0, got ", g);
      g *= 1e9;
    }
    fabric = simple_fabric(a * 1e-6, b * 1e9, g);
  }
  CollOptions opt;
  const std::string chunk_text = vm["chunk-bytes"].as<std::string>();
  opt.chunk_bytes = chunk_text == "auto" ? static_cast<double>(plan::chunk_used(algo, topo.nodes, 0))
                                         : static_cast<double>(parse_size(chunk_text, "--chunk-bytes"));
  opt.channels = static_cast<int>(parse_int(vm["channels"].as<std::string>(), "--channels"));
  GS_USAGE_CHECK(opt.channels >= 1, "option --channels must be >= 1");
  opt.registered = plan::parse_buffers(vm["buffers"].as<std::string>());
  const auto sizes = parse_number_list(vm["bytes"].as<std::string>(), "--bytes");
  Json results = Json::array();
  const bool json = vm.count("json");
  if (!json)
    std::printf("# %s %s on %s, %d nodes x %d ranks\n# %12s %-18s %12s %12s %12s\n", op_name(op), algo.c_str(),
                fabric.name.c_str(), topo.nodes, topo.ranks_per_node, "bytes", "algo_used", "time_us", "algbw_GBps",
                "busbw_GBps");
  Json last;
  for (double n : sizes) {
    GS_USAGE_CHECK(n >= 0, "option --bytes must be >= 0");
    const double t = collective_time(fabric, op, algo, topo, n, opt);
    const double algbw = t > 0 ? n / t / 1e9 : 0;
    const double busbw = algbw * busbw_factor(op, topo.ranks());
    const std::string used = resolve_algo_on(fabric, algo, op, n, topo);
    Json j = Json::object();
    j.set("op", op_name(op)).set("algo", algo).set("algo_used", used).set("ranks", topo.ranks()).set("nodes", topo.nodes);
    j.set("bytes", n).set("time_us", t * 1e6).set("algbw_GBps", algbw).set("busbw_GBps", busbw).set("fabric", fabric.name);
    results.push(j);
    last = j;
    if (!json) std::printf("  %12.0f %-18s %12.3f %12.4f %12.4f\n", n, used.c_str(), t * 1e6, algbw, busbw);
  }
  if (json) {
    if (sizes.size() == 1) {
      std::cout << last.dump() << "\n";
    } else {
      Json out = Json::object();
      out.set("results", results);
      std::cout << out.dump() << "\n";
    }
  }
  return 0;
}

// ---- predict ---------------------------------------------------------------------------------

// Default bound on predict's grid (--max-configs): 1e6 configurations took 4.1 s and 102 MB.
constexpr std::int64_t kDefaultMaxConfigs = 2'000'000;

std::string format_count(double n) {
  char buf[32];
  if (n < 1e15) std::snprintf(buf, sizeof buf, "%.0f", n);
  else std::snprintf(buf, sizeof buf, "%.3g", n);
  return buf;
}

struct AxisOpt {
  const char* name;
  const char* def;  // nullptr: no default (then the config's own)
  bool numeric;
  const char* help;
};

// A numeric axis' values: --chunk-bytes also takes "auto" (parse_chunk_list).
std::vector<double> axis_numbers(const AxisOpt& a, const std::string& text, const std::string& option) {
  return std::string(a.name) == "chunk-bytes" ? parse_chunk_list(text, option) : parse_number_list(text, option);
}

const std::vector<AxisOpt>& predict_axes() {
  static const std::vector<AxisOpt> a = {
      {"model", "resnet50", false, "zoo model (list allowed)"},
      {"fabric", nullptr, false, "fabric name or TOML file (required; list allowed)"},
      {"intra", nullptr, false, "take the intra-node level from this fabric (e.g. nvlink-h100)"},
      {"compute-profile", "h200", false, "compute profile name or TOML file"},
      {"nodes", "1", true, "nodes"},
      {"ranks-per-node", "1", true, "ranks per node"},
      {"batch-per-rank", "32", true, "samples per rank per step"},
      {"bucket-mb", "25", true, "DDP bucket cap, MiB"},
      {"first-bucket-mb", "1", true, "first bucket cap, MiB"},
      {"overlap", "1", true, "overlap communication with backward (1/0)"},
      {"accumulate", "1", true, "gradient accumulation steps"},
      {"algo", "auto", false, "all-reduce algorithm"},
      {"chunk-bytes", "0", true, "ring pipelining chunk (0: none; auto: the runtime's own for the algorithm and node count, e.g. 32K between nodes over TCP, 4M on one node; list allowed; a grid table writes auto as -1)"},
      {"channels", "1", true, "concurrent rings"},
      {"buffers", "shared", false, "shared (gradsync-train's default: buckets registered in the node's shared memory, so shm reduces a plain fp32 bucket straight from the peers' buckets) or private"},
      {"compress", "none", false, "compressor spec (none, fp16, bf16, powersgd:rank=R, qsgd:levels=S, onebit, topk:ratio=F; a list separated by ';')"},
      {"precision", "fp32", false, "fp32|fp16|bf16"},
      {"loader-workers", "4", true, "data loader workers (0: loading is serial)"},
      {"data-time-us", "0", true, "data loading work per sample, us"},
      {"compute-threads", "0", true, "threads per rank busy computing during backward (with the fabric's cores_per_node: CPU-share contention; 0: none)"},
      {"machine-ranks", nullptr, true, "ranks sharing one machine's cores when nodes share a machine (the namespace testbed: every host's rank; a train file's machine_ranks), with --machine-cores: the codecs take ceil(ranks/cores) their time alone (default: a node is a machine)"},
      {"machine-cores", nullptr, true, "the cores those --machine-ranks share (a train file's machine_cores)"},
      {"optimizer", "sgd", false, "sgd|adam|adamw"},
      {"samples-per-epoch", nullptr, true, "samples per epoch (default: the model's data set)"},
      {"kernels", nullptr, false, "measured compression-kernel rates (TOML from calibrate --kernels; default: the compute profile's rates)"},
  };
  return a;
}

// "none", "64 KiB", or "auto (32 KiB)": the chunk predict priced.
std::string chunk_words(const PredictConfig& c) {
  const double used = chunk_priced(c);
  const std::string bytes = used > 0 ? format_bytes(used) : std::string("none");
  return c.chunk_bytes == kAutoChunk ? "auto (" + bytes + ")" : bytes;
}

void print_prediction(const PredictConfig& c, const StepResult& r, Predictor& pred) {
  const Fabric& f = pred.fabric(c.fabric, c.intra);
  const int p = c.nodes * c.ranks_per_node;
  std::printf("gradsync-model predict: %s on %s, %d nodes x %d ranks = %d, batch %lld/rank (global %lld)\n",
              c.model.c_str(), f.name.c_str(), c.nodes, c.ranks_per_node, p,
              static_cast<long long>(c.batch_per_rank), static_cast<long long>(c.batch_per_rank * p * c.accumulate));
  std::printf("  fabric: inter %.2f us, %.2f GB/s; intra %.2f us, %.2f GB/s (%s)\n", f.inter.alpha_s * 1e6,
              f.inter.bw_Bps / 1e9, f.intra.alpha_s * 1e6, f.intra.bw_Bps / 1e9, f.description.c_str());
  if (!c.from_run.empty()) {
    const TrainRun& run = pred.recorded(c.from_run);
    double bytes = 0;
    for (double b : run.bucket_bytes) bytes += b;
    std::printf("  what-if of %s: recorded %d x %d ranks (%s, compress %s), step %.3f ms measured; its steps "
                "replayed (%lld after warmup: data, forward, backward with its buckets' ready times, optimizer; "
                "%zu buckets, %s); precision %s\n",
                run.path.c_str(), run.config.nodes, run.config.ranks_per_node, run.config.algo.c_str(),
                run.config.compress.c_str(), run.step_time_s * 1e3, static_cast<long long>(run.steps_used),
                run.bucket_bytes.size(), format_bytes(bytes).c_str(), c.precision.c_str());
    const int acc = std::max(1, run.config.accumulate);
    if (c.accumulate != acc) {
      // The replay's own split (split_backward): where the earlier backwards' time comes from.
      const double nosync_ms = split_backward(run.backward_s, run.backward_sync_s, acc).second * 1e3;
      char bwd[256];
      if (acc > 1 && std::isfinite(run.backward_sync_s))
        std::snprintf(bwd, sizeof bwd, "the recorded no_sync() micro-steps' (%.3f ms each)", nosync_ms);
      else if (acc > 1)
        std::snprintf(bwd, sizeof bwd, "the recorded backward / %d (%.3f ms; the file has no backward_sync_s)", acc,
                      nosync_ms);
      else if (!run.config.overlap)
        std::snprintf(bwd, sizeof bwd, "the recorded backward's (%.3f ms, no communication beside it: overlap off)",
                      nosync_ms);
      else
        std::snprintf(bwd, sizeof bwd,
                      "the recorded backward's (%.3f ms), which ran beside its buckets' communication (overlap on): "
                      "an upper bound; a run recorded with --accumulate 2 or more holds it alone",
                      nosync_ms);
      std::printf("  accumulate %d -> %d micro-steps per step: data and forward per micro-step as recorded; the "
                  "backward of each before the synchronized one: %s\n",
                  acc, c.accumulate, bwd);
    }
  } else {
    const auto model = models::zoo_model(c.model);
    std::printf("  model: %lld parameters in %lld tensors (%s fp32); compute profile %s, precision %s\n",
                static_cast<long long>(model.num_parameters()), static_cast<long long>(model.num_tensors()),
                format_bytes(static_cast<double>(model.grad_bytes())).c_str(), c.compute_profile.c_str(),
                c.precision.c_str());
  }
  std::printf("  reducer: %zu buckets (first %g MiB, then %g MiB), overlap %s, algo %s, chunk %s, compress %s\n",
              r.buckets.size(), c.first_bucket_mb, c.bucket_mb, c.overlap ? "on" : "off", c.algo.c_str(),
              chunk_words(c).c_str(), c.compress.c_str());
  if (c.machine_ranks > 0) {
    // The timeline's own factor (codec_cpu_share), outside backward.
    StepConfig st;
    st.machine_ranks = c.machine_ranks;
    st.machine_cores = c.machine_cores;
    const double share = codec_cpu_share(f, NetConfig{c.nodes, c.ranks_per_node, c.algo}, st);
    if (share > 1)
      std::printf("  machine: %d ranks share %d cores: each codec takes %g x its time alone (more inside backward "
                  "with --compute-threads)\n",
                  c.machine_ranks, c.machine_cores, share);
    else
      std::printf("  machine: %d ranks share %d cores\n", c.machine_ranks, c.machine_cores);
  }
  // comm_ms holds contend_ms (collectives inside backward, slower) and wait_ms (the wait for
  // the slowest rank's codec, compute profile's codec_wait).
  std::printf("  %6s %7s %12s %12s %10s %10s %10s %10s %10s %10s %10s\n", "bucket", "tensors", "grad_bytes",
              "wire_bytes", "ready_ms", "start_ms", "end_ms", "comm_ms", "codec_ms", "contend_ms", "wait_ms");
  for (std::size_t i = 0; i < r.buckets.size(); ++i) {
    const auto& b = r.buckets[i];
    std::printf("  %6zu %7d %12lld %12.0f %10.3f %10.3f %10.3f %10.3f %10.3f %10.3f %10.3f\n", i, b.ntensors,
                static_cast<long long>(b.grad_bytes), b.wire_bytes, b.ready_s * 1e3, b.start_s * 1e3, b.end_s * 1e3,
                b.comm_s * 1e3, b.codec_s * 1e3, b.contention_s * 1e3, b.codec_wait_s * 1e3);
  }
  const double hidden = r.comm_total_s - r.comm_exposed_s;
  std::printf("  step: data %.3f + forward %.3f + backward %.3f + exposed comm %.3f + optimizer %.3f + reducer %.3f"
              " + slowest rank %.3f = %.3f ms\n",
              r.data_s * 1e3, r.forward_s * 1e3, r.backward_s * 1e3, r.comm_exposed_s * 1e3, r.optimizer_s * 1e3,
              r.reducer_s * 1e3, r.straggler_s * 1e3, r.step_time_s * 1e3);
  std::printf("  communication: %.3f ms in total, %.3f ms hidden behind backward (%.0f%%), %.3f ms exposed\n",
              r.comm_total_s * 1e3, hidden * 1e3, r.comm_total_s > 0 ? 100 * hidden / r.comm_total_s : 100.0,
              r.comm_exposed_s * 1e3);
  if (r.steps_per_epoch > 0)
    std::printf("  epoch: %lld steps x %.3f ms = %.2f s\n", static_cast<long long>(r.steps_per_epoch),
                r.step_time_s * 1e3, r.epoch_time_s);
  else
    std::printf("  epoch: no samples per epoch recorded (--samples-per-epoch N gives one)\n");
}

Json prediction_json(const PredictConfig& c, const StepResult& r) {
  Json j = Json::object();
  j.set("model", c.model).set("fabric", c.fabric).set("nodes", c.nodes).set("ranks_per_node", c.ranks_per_node);
  j.set("from_run", c.from_run.empty() ? Json(nullptr) : Json(c.from_run));
  j.set("batch_per_rank", static_cast<long long>(c.batch_per_rank)).set("algo", c.algo).set("compress", c.compress);
  j.set("precision", c.precision).set("bucket_mb", c.bucket_mb).set("first_bucket_mb", c.first_bucket_mb);
  j.set("overlap", c.overlap).set("accumulate", c.accumulate);
  j.set("machine_ranks", c.machine_ranks).set("machine_cores", c.machine_cores);
  j.set("step_time_s", r.step_time_s).set("epoch_time_s", r.epoch_time_s).set("comm_exposed_s", r.comm_exposed_s);
  j.set("comm_total_s", r.comm_total_s).set("data_s", r.data_s).set("forward_s", r.forward_s);
  j.set("backward_s", r.backward_s).set("optimizer_s", r.optimizer_s).set("reducer_s", r.reducer_s);
  j.set("straggler_s", r.straggler_s);
  j.set("steps_per_epoch", static_cast<long long>(r.steps_per_epoch)).set("bytes_sent", r.bytes_sent);
  j.set("buckets", bucket_timings_json(r.buckets));
  return j;
}

void write_prediction(const PredictConfig& c, const StepResult& r, const std::string& path) {
  h5::Writer w(path);
  write_provenance(w, model_provenance(g_argv));
  w.attr("/", "model", c.model);
  if (!c.from_run.empty()) w.attr("/", "from_run", c.from_run);
  w.attr("/", "fabric", c.fabric);
  w.attr("/", "compute_profile", c.compute_profile);
  w.attr("/", "ranks_per_node", static_cast<int64_t>(c.ranks_per_node));
  w.attr("/", "batch_per_rank", static_cast<int64_t>(c.batch_per_rank));
  w.attr("/", "bucket_mb", c.bucket_mb);
  w.attr("/", "first_bucket_mb", c.first_bucket_mb);
  w.attr("/", "overlap", static_cast<int64_t>(c.overlap));
  w.attr("/", "accumulate", static_cast<int64_t>(c.accumulate));
  w.attr("/", "algo", c.algo);
  w.attr("/", "compress", c.compress);
  w.attr("/", "precision", c.precision);
  w.attr("/", "step_time_s", r.step_time_s);
  w.attr("/", "epoch_time_s", r.epoch_time_s);
  w.attr("/", "comm_exposed_s", r.comm_exposed_s);
  w.attr("/", "steps_per_epoch", static_cast<int64_t>(r.steps_per_epoch));
  std::vector<int64_t> idx, bytes;
  std::vector<double> wire, ready, start, end, comm, codec;
  for (std::size_t i = 0; i < r.buckets.size(); ++i) {
    const auto& b = r.buckets[i];
    idx.push_back(static_cast<int64_t>(i));
    bytes.push_back(b.grad_bytes);
    wire.push_back(b.wire_bytes);
    ready.push_back(b.ready_s);
    start.push_back(b.start_s);
    end.push_back(b.end_s);
    comm.push_back(b.comm_s);
    codec.push_back(b.codec_s);
  }
  w.write("/buckets/bucket", idx);
  w.write("/buckets/bytes", bytes);
  w.write("/buckets/wire_bytes", wire);
  w.write("/buckets/ready_s", ready);
  w.write("/buckets/start_s", start);
  w.write("/buckets/end_s", end);
  w.write("/buckets/comm_s", comm);
  w.write("/buckets/codec_s", codec);
  w.commit();
}

int cmd_predict(const std::vector<std::string>& args) {
  po::options_description d("gradsync-model predict (numeric options: value, list 1,2,4 or range A..B[:S])");
  d.add_options()("help,h", "this help");
  for (const auto& a : predict_axes()) d.add_options()(a.name, po::value<std::string>(), a.help);
  d.add_options()("from-run", po::value<std::string>(),
                  "a what-if of a recorded run (a gradsync-train or PyTorch-recorded file): its steps, buckets "
                  "and data loading replayed as recorded, priced on --fabric and any of --nodes, "
                  "--ranks-per-node, --algo, --chunk-bytes, --channels, --compress (another compressor: its codec "
                  "modelled), --kernels, --samples-per-epoch, --accumulate K (K micro-steps per step: the recorded "
                  "micro-step's compute K times, the last one synchronized; lists allowed); the other options are the run's own "
                  "and refused")(
      "json", "print one JSON object")("out", po::value<std::string>(), "write an HDF5 file")(
      "max-configs", po::value<std::string>(),
      "largest grid (product of the list/range sizes) to evaluate (default 2000000: about 8 s and 200 MB)");
  const auto vm = parse(args, d);
  if (vm.count("help")) {
    std::cout << d;
    return 0;
  }
  GS_USAGE_CHECK(vm.count("fabric"), "option --fabric is required (a built-in name, see 'gradsync-model fabrics', or a TOML file)");
  Predictor predictor;
  PredictConfig base;
  if (vm.count("from-run")) {
    const std::string path = vm["from-run"].as<std::string>();
    GS_USAGE_CHECK(!path.empty(), "option --from-run: empty file name");
    static const std::vector<std::string> what_if = {"fabric", "intra", "nodes", "ranks-per-node", "algo",
                                                     "chunk-bytes", "channels", "buffers", "compress", "kernels",
                                                     "samples-per-epoch", "accumulate"};
    std::string allowed;
    for (const auto& n : what_if) allowed += (allowed.empty() ? "--" : ", --") + n;
    for (const auto& a : predict_axes())
      GS_USAGE_CHECK(!vm.count(a.name) || std::find(what_if.begin(), what_if.end(), a.name) != what_if.end(),
                     "option --", a.name, ": not with --from-run (", path, "'s own is replayed; a what-if changes ",
                     allowed, ")");
    base = predictor.recorded(path).config;
    base.from_run = path;
  }
  std::vector<Axis> axes;
  for (const auto& a : predict_axes()) {
    std::string text;
    if (vm.count(a.name)) text = vm[a.name].as<std::string>();
    else if (a.def && base.from_run.empty()) text = a.def;
    else continue;
    Axis ax;
    ax.name = a.name;
    const std::string option = std::string("--") + a.name;
    if (a.numeric) ax.numbers = axis_numbers(a, text, option);
    else ax.strings = parse_string_list(text, option, ax.name == "compress" ? ';' : ',');  // specs contain commas
    axes.push_back(std::move(ax));
  }
  // The grid is the product of the axes: refused above a bound (1e7 configurations took
  // > 120 s and 600 MB), computed without overflow.
  const std::int64_t max_configs =
      vm.count("max-configs") ? parse_int(vm["max-configs"].as<std::string>(), "--max-configs") : kDefaultMaxConfigs;
  GS_USAGE_CHECK(max_configs >= 1, "option --max-configs: must be >= 1, got ", max_configs);
  std::size_t total = 1;
  double product = 1;
  for (const auto& a : axes) {
    product *= static_cast<double>(a.size());
    total *= a.size();
  }
  if (product > static_cast<double>(max_configs)) {
    std::string dims;
    for (const auto& a : axes)
      if (a.size() > 1) dims += (dims.empty() ? "" : " x ") + std::string("--") + a.name + "(" + std::to_string(a.size()) + ")";
    throw UsageError("predict: the grid has " + format_count(product) + " configurations (" + dims +
                     "), more than --max-configs " + std::to_string(max_configs) + "; narrow a range or raise --max-configs");
  }
  if (total == 1) {
    PredictConfig c = base;
    for (const auto& a : axes) apply_axis(a, 0, c);
    const StepResult r = predictor.predict(c);
    if (vm.count("json")) std::cout << prediction_json(c, r).dump() << "\n";
    else print_prediction(c, r, predictor);
    if (vm.count("out")) write_prediction(c, r, vm["out"].as<std::string>());
    return 0;
  }
  const GridTable g = run_grid(base, axes, predictor);
  if (vm.count("out")) write_grid(g, vm["out"].as<std::string>(), g_argv);
  std::size_t best = 0, worst = 0;
  for (std::size_t i = 0; i < g.rows; ++i) {
    if (g.step_time_s[i] < g.step_time_s[best]) best = i;
    if (g.step_time_s[i] > g.step_time_s[worst]) worst = i;
  }
  auto row_json = [&](std::size_t i) {
    Json j = Json::object();
    std::size_t ni = 0, si = 0;
    for (const auto& a : g.axes) {
      if (a.numbers.empty()) j.set(a.name, g.axis_strings[si++][i]);
      else j.set(a.name, g.axis_numbers[ni++][i]);
    }
    j.set("step_time_s", g.step_time_s[i]).set("epoch_time_s", g.epoch_time_s[i]).set("comm_exposed_s", g.comm_exposed_s[i]);
    return j;
  };
  if (vm.count("json")) {
    Json out = Json::object();
    out.set("configs", static_cast<long long>(g.rows));
    out.set("out", vm.count("out") ? Json(vm["out"].as<std::string>()) : Json(nullptr));
    out.set("best", row_json(best)).set("worst", row_json(worst));
    if (g.rows <= 1000) {
      Json rows = Json::array();
      for (std::size_t i = 0; i < g.rows; ++i) rows.push(row_json(i));
      out.set("rows", rows);
    }
    std::cout << out.dump() << "\n";
    return 0;
  }
  std::printf("# grid: %zu configurations over", g.rows);
  for (const auto& a : g.axes) std::printf(" %s(%zu)", a.name.c_str(), a.size());
  std::printf("\n");
  const std::size_t show = g.rows <= 200 ? g.rows : 0;
  if (show) {
    std::printf("#");
    for (const auto& a : g.axes) std::printf(" %14s", a.name.c_str());
    std::printf(" %12s %12s %12s\n", "step_ms", "epoch_s", "exposed_ms");
    for (std::size_t i = 0; i < show; ++i) {
      std::printf(" ");
      std::size_t ni = 0, si = 0;
      for (const auto& a : g.axes) {
        if (a.numbers.empty()) std::printf(" %14s", g.axis_strings[si++][i].c_str());
        else std::printf(" %14g", g.axis_numbers[ni++][i]);
      }
      std::printf(" %12.3f %12.2f %12.3f\n", g.step_time_s[i] * 1e3, g.epoch_time_s[i], g.comm_exposed_s[i] * 1e3);
    }
  }
  std::cout << "# fastest step: " << row_json(best).dump() << "\n# slowest step: " << row_json(worst).dump() << "\n";
  if (vm.count("out")) std::printf("# table written to %s (group /grid)\n", vm["out"].as<std::string>().c_str());
  else if (!show) std::printf("# give --out FILE.h5 for the full table\n");
  return 0;
}

// ---- calibrate -------------------------------------------------------------------------------

std::string stem(const std::string& path) { return std::filesystem::path(path).stem().string(); }

int cmd_calibrate(const std::vector<std::string>& args) {
  po::options_description d(
      "gradsync-model calibrate FILE... -o OUT.toml\n"
      "  a fabric from gradsync-bench sweeps, nccl-tests logs (text or -J JSON) and/or the bucket\n"
      "  all-reduces of gradsync-train runs with overlap off and no compressor (others are listed as skipped)");
  d.add_options()("help,h", "this help")("output,o", po::value<std::string>(), "fabric (or compute profile) TOML to write")(
      "compute",
      "fit a compute profile from gradsync-train files instead: FLOP rate(s) and per-layer overhead, the "
      "optimizer rate, the reducer's cost per step and bucket, the ranks' step-time jitter (the wait for the "
      "slowest rank, from /ranks/step_time_s) and each bucket's wait for the slowest rank's codec (from "
      "/buckets/by_rank/codec_s)")(
      "kernels", "fit compression-kernel rates from Google Benchmark JSON instead: gradsync-kernels-bench "
                 "--benchmark_format=json output, or gradsync_torch.codecs --out (PyTorch's DDP hooks)")(
      "contention", "fit the contention factor (communication during backward) from overlap-on gradsync-train files "
                    "on top of the fabric --base (e.g. one fitted from microbenchmarks)")(
      "strict", "exit 1 when the fit is poor (R^2 < 0.9 or a relative residual above 50%)")("name", po::value<std::string>(),
                                                                           "name in the written file (default: its stem)")(
      "base", po::value<std::string>(), "fabric that supplies a level the data do not cover")(
      "intra", po::value<std::string>(), "fabric (name or file) whose intra level is taken as known; the data fit the inter level")(
      "nodes", po::value<int>(), "nccl-tests logs: nodes (overrides the '# Using devices' block)")(
      "ranks-per-node", po::value<int>(), "nccl-tests logs: ranks per node (overrides the devices block)")(
      "nics-per-node", po::value<int>(), "nccl-tests logs: NICs (rails) per node the inter level spreads over (default: from NCCL INFO lines, else 1)")(
      "op", po::value<std::string>(), "nccl-tests logs: the collective, when neither the program name nor the columns say")(
      "points-only", "read the inputs, print what was inferred and every point read (no fit, nothing written)")(
      "burst-bytes", po::value<std::string>(), "the inter-node link is a token-bucket shaper with this burst (e.g. the testbed's tbf burst, 64KiB): written to the fabric; points that ran on the burst are not fitted, and a ping-pong's message of m bytes is fitted as passing min(burst, m/2) of them on the tokens its reply refilled")(
      "cores-per-node", po::value<int>(),
      "the CPUs a node gives its ranks, written to the fabric in place of the count the files recorded (emulated "
      "hosts sharing one machine's cores: 2 testbed hosts on 2 cores have 1 each); the fit itself uses the files' count")(
      "peak-bw-GBps", po::value<double>(), "rate of the shaper's burst (default unlimited: only alpha is paid)")(
      "json", "print one JSON object")("files", po::value<std::vector<std::string>>(), "input files");
  po::positional_options_description pos;
  pos.add("files", -1);
  const auto vm = parse(args, d, &pos);
  if (vm.count("help")) {
    std::cout << d
              << "\nInputs: gradsync-bench / gradsync-train HDF5 files, nccl-tests text logs (all_reduce_perf & co., any\n"
                 "launcher prefix) or nccl-tests -J JSON, gradsync-bench's stdout table. What was inferred from each\n"
                 "log (op, nodes x ranks per node, NICs) is printed; --nodes/--ranks-per-node/--nics-per-node/--op\n"
                 "override it.\n"
                 "All-reduce / reduce-scatter sweeps of 16-bit elements (gradsync-bench or the torch bench with\n"
                 "-d half|bfloat16, nccl-tests with -d half|bfloat16) fit that type's reduction rate\n"
                 "(gamma_fp16_GBps / gamma_bf16_GBps) on top of the fp32 fit; the casts' all-reduces use it.\n"
                 "Sweeps measured while the host computes (gradsync-bench or the torch bench with --busy-threads N)\n"
                 "fit the level's contention on top of it: time = contention_us + contention x time alone, what a\n"
                 "collective that starts inside backward costs.\n";
    return 0;
  }
  GS_USAGE_CHECK(vm.count("files"), "calibrate: no input files given");
  GS_USAGE_CHECK(vm.count("output") || vm.count("points-only"), "option -o/--output is required");
  const auto files = vm["files"].as<std::vector<std::string>>();
  const std::string out = vm.count("output") ? vm["output"].as<std::string>() : "";
  const std::string name = vm.count("name") ? vm["name"].as<std::string>() : stem(out);
  const bool json = vm.count("json");
  GS_USAGE_CHECK(!(vm.count("points-only") && (vm.count("kernels") || vm.count("compute"))),
                 "option --points-only reads collective points (not with --compute or --kernels)");
  if (vm.count("contention")) {
    GS_USAGE_CHECK(vm.count("base"), "option --contention needs --base FABRIC (what 'alone' means)");
    ContentionFit cf = calibrate_contention(files, load_fabric(vm["base"].as<std::string>()));
    cf.fabric.name = name;
    cf.fabric.description += "; contention from " + std::to_string(files.size()) + " train file(s)";
    save_fabric(cf.fabric, out);
    if (json) {
      Json j = Json::object(), notes = Json::array(), sk = Json::array();
      for (const auto& n : cf.notes) notes.push(n);
      for (const auto& n : cf.skipped) sk.push(n);
      j.set("output", out).set("intra_contention", cf.fabric.intra.contention).set("inter_contention", cf.fabric.inter.contention);
      j.set("notes", notes).set("skipped", sk);
      std::cout << j.dump() << "\n";
    } else {
      for (const auto& n : cf.notes) std::printf("%s\n", n.c_str());
      for (const auto& n : cf.skipped) std::printf("  skipped %s\n", n.c_str());
      std::printf("wrote %s\n", out.c_str());
    }
    return 0;
  }
  if (vm.count("kernels")) {
    GS_USAGE_CHECK(files.size() == 1, "calibrate --kernels takes one JSON file, got ", files.size());
    const KernelRates k = calibrate_kernels(files[0], name);
    save_kernel_rates(k, out);
    if (json) {
      Json j = Json::object();
      Json b = Json::object();
      for (const auto& [kn, v] : k.Bps) b.set(kn, v);
      Json notes = Json::array();
      for (const auto& n : k.notes) notes.push(n);
      j.set("output", out).set("Bps", b).set("powersgd_encode_flops", k.powersgd_encode_flops);
      j.set("powersgd_decode_flops", k.powersgd_decode_flops);
      j.set("powersgd_encode_s_per_matrix", k.powersgd_encode_s_per_matrix)
          .set("powersgd_decode_s_per_matrix", k.powersgd_decode_s_per_matrix);
      j.set("powersgd_encode_s_per_bucket", k.powersgd_encode_s_per_bucket)
          .set("powersgd_decode_s_per_bucket", k.powersgd_decode_s_per_bucket)
          .set("powersgd_collective_s", k.powersgd_collective_s)
          .set("powersgd_collective_extra_s", k.powersgd_collective_extra_s);
      Json hc = Json::object();
      for (const auto& [hook, v] : k.hook_extra_s) {
        Json pts = Json::array();
        for (const auto& [bytes, t] : v) pts.push(Json::array().push(bytes).push(t));
        hc.set(hook, pts);
      }
      j.set("hook_extra_s", hc);
      Json cs = Json::object();
      for (const auto& [hook, v] : k.codec_sigma) cs.set(hook, v);
      j.set("codec_sigma", cs);
      j.set("notes", notes);
      std::cout << j.dump() << "\n";
    } else {
      for (const auto& n : k.notes) std::printf("  %s\n", n.c_str());
      std::printf("wrote %s\n", out.c_str());
    }
    return 0;
  }
  if (vm.count("compute")) {
    const ComputeFit fit = calibrate_compute(files, name);
    const bool poor = fit.r2 < kPoorR2 || fit.max_abs_rel_residual > kPoorResidual;
    if (poor)
      std::fprintf(stderr,
                   "gradsync-model: WARNING: poor compute fit: R^2 %.3f, largest |relative residual| %.1f%% "
                   "(forward/backward are not per-layer overhead + FLOPs / rate here; emulated runs add CPU "
                   "gradient generation to backward, see netmodel/README.md)\n",
                   fit.r2, 100 * fit.max_abs_rel_residual);
    if (poor && vm.count("strict")) {
      std::fprintf(stderr, "gradsync-model: error: calibrate --strict: poor fit, %s not written\n", out.c_str());
      return 1;
    }
    models::save_profile(fit.profile, out);
    if (json) {
      Json j = Json::object();
      j.set("output", out).set("per_layer_overhead_s", fit.overhead_s).set("flops_per_s", fit.flops_per_s);
      j.set("backward_flops_per_s", fit.bwd_flops_per_s);
      j.set("r2", fit.r2).set("max_abs_rel_residual", fit.max_abs_rel_residual).set("runs", static_cast<long long>(fit.used.size()));
      j.set("reducer_per_step_s", fit.reducer_per_step_s).set("reducer_per_bucket_s", fit.reducer_per_bucket_s);
      j.set("rank_jitter", fit.rank_jitter).set("jitter_runs", static_cast<long long>(fit.jitter_runs));
      j.set("codec_wait_s", fit.codec_wait_s).set("codec_wait_frac", fit.codec_wait_frac);
      j.set("codec_wait_buckets", static_cast<long long>(fit.wait_buckets));
      Json sk = Json::array();
      for (const auto& s : fit.skipped) sk.push(s);
      j.set("skipped", sk);
      std::cout << j.dump() << "\n";
    } else {
      if (fit.bwd_flops_per_s != fit.flops_per_s)
        std::printf("compute fit from %zu runs: forward %.4g FLOP/s, backward %.4g FLOP/s (%.2fx forward's time per FLOP; "
                    "one rate would need a negative per-layer overhead), no per-layer overhead; R^2 %.5f, max |rel "
                    "residual| %.2f%%\n",
                    fit.used.size(), fit.flops_per_s, fit.bwd_flops_per_s, fit.flops_per_s / fit.bwd_flops_per_s, fit.r2,
                    100 * fit.max_abs_rel_residual);
      else
        std::printf("compute fit from %zu runs: %.3f us per layer per pass, %.4g FLOP/s; R^2 %.5f, max |rel residual| %.2f%%\n",
                    fit.used.size(), fit.overhead_s * 1e6, fit.flops_per_s, fit.r2, 100 * fit.max_abs_rel_residual);
      std::printf("reducer's own work per step: %.3f us + %.3f us per bucket\n", fit.reducer_per_step_s * 1e6,
                  fit.reducer_per_bucket_s * 1e6);
      if (fit.jitter_runs > 0)
        std::printf("ranks' step-time jitter: sigma %.2f%% of compute (from %d runs' /ranks/step_time_s); a step of "
                    "p ranks waits E[max of p std normals] x that for its slowest rank (2 ranks: 0.56x)\n",
                    100 * fit.rank_jitter, fit.jitter_runs);
      else
        std::printf("ranks' step-time jitter: not fitted (no run with /ranks/step_time_s and >= 2 ranks)\n");
      if (fit.wait_buckets > 0)
        std::printf("slowest rank's codec per bucket: %.3f ms + %.1f%% of the bucket's codec beyond the ranks' median, "
                    "per E[max of p std normals] (from %d buckets' /buckets/by_rank/codec_s); each bucket's "
                    "collective waits for it\n",
                    fit.codec_wait_s * 1e3, 100 * fit.codec_wait_frac, fit.wait_buckets);
      else
        std::printf("slowest rank's codec per bucket: not fitted (no run with /buckets/by_rank, a codec and >= 2 ranks)\n");
      for (const auto& s : fit.skipped) std::printf("  skipped %s\n", s.c_str());
      std::printf("wrote %s\n", out.c_str());
    }
    return 0;
  }
  OutsideOverrides ov;
  auto positive_opt = [&](const char* key) {
    if (!vm.count(key)) return 0;
    const int v = vm[key].as<int>();
    GS_USAGE_CHECK(v >= 1, "option --", key, " must be >= 1, got ", v);
    return v;
  };
  ov.nodes = positive_opt("nodes");
  ov.ranks_per_node = positive_opt("ranks-per-node");
  ov.nics_per_node = positive_opt("nics-per-node");
  if (vm.count("op")) {
    ov.op = vm["op"].as<std::string>();
    (void)parse_op(ov.op);
  }
  std::vector<BenchPoint> pts;
  std::vector<std::string> unread, inferred;
  for (const auto& f : files) {
    auto v = read_any_points(f, ov, unread, inferred);
    pts.insert(pts.end(), v.begin(), v.end());
  }
  if (vm.count("points-only")) {
    Json list = Json::array();
    for (const auto& p : pts) {
      Json x = Json::object();
      x.set("file", p.file).set("op", op_name(p.op)).set("algo", p.algo).set("nodes", p.topo.nodes);
      x.set("ranks_per_node", p.topo.ranks_per_node).set("nics_per_node", p.nics_per_node).set("bytes", p.bytes);
      x.set("time_us", p.time_s * 1e6);
      list.push(x);
    }
    Json inputs = Json::array();
    for (const auto& line : inferred) inputs.push(line);
    Json sk = Json::array();
    for (const auto& line : unread) sk.push(line);
    Json j = Json::object();
    j.set("inputs", inputs).set("points", list).set("skipped", sk);
    if (json) {
      std::cout << j.dump() << "\n";
    } else {
      for (const auto& line : inferred) std::printf("input: %s\n", line.c_str());
      std::printf("# %-28s %-13s %-12s %5s %5s %14s %12s\n", "file", "op", "algo", "nodes", "rpn", "bytes", "time_us");
      for (const auto& p : pts)
        std::printf("  %-28s %-13s %-12s %5d %5d %14.0f %12.3f\n", p.file.c_str(), op_name(p.op), p.algo.c_str(), p.topo.nodes,
                    p.topo.ranks_per_node, p.bytes, p.time_s * 1e6);
      for (const auto& line : unread) std::printf("skipped: %s\n", line.c_str());
    }
    return 0;
  }
  if (!json)
    for (const auto& line : inferred) std::printf("input: %s\n", line.c_str());
  const std::string intra_given = vm.count("intra") ? vm["intra"].as<std::string>() : "";
  const std::string base = vm.count("base") ? vm["base"].as<std::string>() : "";
  Shaper shaper;
  if (vm.count("burst-bytes")) {
    shaper.burst_bytes = static_cast<double>(parse_size(vm["burst-bytes"].as<std::string>(), "--burst-bytes"));
    GS_USAGE_CHECK(shaper.burst_bytes > 0, "option --burst-bytes must be > 0");
  }
  if (vm.count("peak-bw-GBps")) {
    const double pk = vm["peak-bw-GBps"].as<double>();
    GS_USAGE_CHECK(std::isfinite(pk) && pk > 0, "option --peak-bw-GBps must be > 0, got ", pk);
    GS_USAGE_CHECK(shaper.burst_bytes > 0, "option --peak-bw-GBps needs --burst-bytes");
    shaper.peak_bw_Bps = pk * 1e9;
  }
  GS_USAGE_CHECK(!vm.count("cores-per-node") || vm["cores-per-node"].as<int>() >= 1,
                 "option --cores-per-node must be >= 1, got ", vm.count("cores-per-node") ? vm["cores-per-node"].as<int>() : 0);
  FabricFit fit = calibrate_fabric(pts, name, base, shaper, intra_given);
  fit.skipped.insert(fit.skipped.begin(), unread.begin(), unread.end());
  if (vm.count("cores-per-node"))
    fit.fabric.intra.cores_per_node = fit.fabric.inter.cores_per_node = vm["cores-per-node"].as<int>();
  bool poor = false;
  for (const auto& l : fit.levels)
    for (const auto& w : l.warnings) {
      std::fprintf(stderr, "gradsync-model: WARNING: %s\n", w.c_str());
      poor = true;
    }
  if (poor && vm.count("strict")) {
    std::fprintf(stderr, "gradsync-model: error: calibrate --strict: poor fit, %s not written\n", out.c_str());
    return 1;
  }
  save_fabric(fit.fabric, out);
  if (json) {
    Json levels = Json::array();
    for (const auto& l : fit.levels) {
      Json j = Json::object();
      j.set("level", l.level).set("alpha_us", l.params.alpha_s * 1e6).set("bw_GBps", l.params.bw_Bps / 1e9);
      j.set("gamma_GBps", l.gamma_fitted ? Json(l.params.gamma_Bps / 1e9) : Json(nullptr));
      j.set("gamma_fp16_GBps", l.params.gamma_fp16_Bps > 0 ? Json(l.params.gamma_fp16_Bps / 1e9) : Json(nullptr));
      j.set("gamma_bf16_GBps", l.params.gamma_bf16_Bps > 0 ? Json(l.params.gamma_bf16_Bps / 1e9) : Json(nullptr));
      j.set("duplex", l.params.duplex(kInf));
      j.set("contention", l.params.contention).set("contention_us", l.params.contention_alpha_s * 1e6);
      Json regs = Json::array();
      for (const auto& r : l.params.regimes) {
        Json x = Json::object();
        x.set("up_to_bytes", std::isfinite(r.up_to_bytes) ? Json(r.up_to_bytes) : Json(nullptr));
        x.set("alpha_us", r.alpha_s * 1e6).set("bw_GBps", r.bw_Bps / 1e9).set("duplex", l.params.duplex(r.up_to_bytes));
        x.set("gamma_GBps", r.gamma_Bps > 0 ? Json(r.gamma_Bps / 1e9) : Json(nullptr));
        regs.push(x);
      }
      j.set("regimes_by", l.params.regime_key == RegimeKey::WorkingSet ? "working_set" : "message");
      j.set("regimes", regs).set("r2", l.r2).set("max_abs_rel_residual", l.max_abs_rel_residual).set("notes", l.notes);
      Json warn = Json::array();
      for (const auto& w : l.warnings) warn.push(w);
      j.set("warnings", warn);
      Json points = Json::array();
      for (const auto& p : l.points) {
        Json x = Json::object();
        x.set("file", p.point.file).set("op", op_name(p.point.op)).set("algo", p.point.algo).set("bytes", p.point.bytes);
        x.set("measured_us", p.point.time_s * 1e6).set("predicted_us", p.predicted_s * 1e6).set("rel_residual", p.rel_residual);
        points.push(x);
      }
      j.set("points", points);
      levels.push(j);
    }
    Json j = Json::object();
    j.set("output", out).set("levels", levels);
    Json inputs = Json::array();
    for (const auto& line : inferred) inputs.push(line);
    j.set("inputs", inputs);
    Json sk = Json::array();
    for (const auto& s : fit.skipped) sk.push(s);
    j.set("skipped", sk);
    std::cout << j.dump() << "\n";
    return 0;
  }
  for (const auto& l : fit.levels) {
    std::printf("level %s: %zu points, R^2 %.6f, largest |relative residual| %.2f%% (%s %s %.0f B)\n", l.level.c_str(),
                l.points.size(), l.r2, 100 * l.max_abs_rel_residual, op_name(l.points[l.worst].point.op),
                l.points[l.worst].point.algo.c_str(), l.points[l.worst].point.bytes);
    if (l.params.regimes.empty()) {
      std::printf("  alpha %.3f us, bw %.4f GB/s, duplex %.3f", l.params.alpha_s * 1e6, l.params.bw_Bps / 1e9,
                  l.params.duplex(kInf));
    } else {
      for (const auto& r : l.params.regimes)
        std::printf("  regime %s<= %s: alpha %.3f us, bw %.4f GB/s, duplex %.3f%s\n",
                    l.params.regime_key == RegimeKey::WorkingSet ? "working set " : "",
                    std::isfinite(r.up_to_bytes) ? fmt("%.0f B", r.up_to_bytes).c_str() : "inf", r.alpha_s * 1e6,
                    r.bw_Bps / 1e9, l.params.duplex(r.up_to_bytes),
                    r.gamma_Bps > 0 ? fmt(", gamma %.4f GB/s", r.gamma_Bps / 1e9).c_str() : "");
      std::printf(" ");
    }
    if (l.gamma_fitted) std::printf(", gamma %.4f GB/s", l.params.gamma_Bps / 1e9);
    if (l.params.gamma_fp16_Bps > 0) std::printf(", fp16 sums %.4f GB/s", l.params.gamma_fp16_Bps / 1e9);
    if (l.params.gamma_bf16_Bps > 0) std::printf(", bf16 sums %.4f GB/s", l.params.gamma_bf16_Bps / 1e9);
    if (l.params.contention != 1 || l.params.contention_alpha_s > 0)
      std::printf(", while computing %.0f us + %.3f x", l.params.contention_alpha_s * 1e6, l.params.contention);
    std::printf("\n");
    if (!l.notes.empty()) std::printf("  note: %s\n", l.notes.c_str());
    std::printf("  %-28s %-13s %-12s %12s %12s %12s %9s\n", "file", "op", "algo", "bytes", "measured_us", "predicted_us",
                "resid%");
    for (const auto& p : l.points) {
      std::string file = p.point.file;
      if (file.size() > 28) file = "..." + file.substr(file.size() - 25);
      std::printf("  %-28s %-13s %-12s %12.0f %12.3f %12.3f %+9.3f\n", file.c_str(), op_name(p.point.op),
                  p.point.algo.c_str(), p.point.bytes, p.point.time_s * 1e6, p.predicted_s * 1e6, 100 * p.rel_residual);
    }
  }
  for (const auto& s : fit.skipped) std::printf("skipped: %s\n", s.c_str());
  std::printf("wrote %s (%s)\n", out.c_str(), fit.fabric.description.c_str());
  return 0;
}

// ---- tune ------------------------------------------------------------------------------------

int cmd_tune(const std::vector<std::string>& args) {
  po::options_description d(
      "gradsync-model tune (knobs not given are searched; a knob given as a list searches those values;\n"
      "--compress takes specs separated by ';'; --fabric a list of interfaces' fabrics)");
  d.add_options()("help,h", "this help");
  for (const auto& a : predict_axes()) d.add_options()(a.name, po::value<std::string>(), a.help);
  d.add_options()("top", po::value<int>()->default_value(5), "alternatives to show")("json", "print one JSON object");
  const auto vm = parse(args, d);
  if (vm.count("help")) {
    std::cout << d;
    return 0;
  }
  GS_USAGE_CHECK(vm.count("fabric"), "option --fabric is required (a built-in name, see 'gradsync-model fabrics', or a TOML file)");
  GS_USAGE_CHECK(vm["top"].as<int>() >= 1, "option --top: must be >= 1");
  std::vector<Axis> given;
  for (const auto& a : predict_axes()) {
    const bool knob_default = std::string(a.name) == "bucket-mb" || std::string(a.name) == "first-bucket-mb" ||
                              std::string(a.name) == "algo" || std::string(a.name) == "chunk-bytes" ||
                              std::string(a.name) == "channels" || std::string(a.name) == "compress" ||
                              std::string(a.name) == "precision";
    std::string text;
    if (vm.count(a.name)) text = vm[a.name].as<std::string>();
    else if (a.def && !knob_default) text = a.def;
    else continue;
    Axis ax;
    ax.name = a.name;
    const std::string option = std::string("--") + a.name;
    if (a.numeric) ax.numbers = axis_numbers(a, text, option);
    else ax.strings = parse_string_list(text, option, ax.name == "compress" ? ';' : ',');  // specs contain commas
    given.push_back(std::move(ax));
  }
  PredictConfig base;
  TuneSpace space;
  apply_tune_axes(given, base, space);
  Predictor predictor;
  const TuneReport rep = tune(base, space, predictor, static_cast<std::size_t>(vm["top"].as<int>()));
  if (vm.count("json")) std::cout << tune_json(rep).dump() << "\n";
  else std::cout << tune_text(rep);
  return 0;
}

// ---- compare ---------------------------------------------------------------------------------

int cmd_compare(const std::vector<std::string>& args) {
  po::options_description d(
      "gradsync-model compare TRAIN.h5... --fabric NAME|FILE\n"
      "  predicts each gradsync-train (or PyTorch-recorded) run with its own configuration and prints\n"
      "  measured vs predicted step and epoch time, the error, and the run's own steps' p10..p90 (in %\n"
      "  of their median: an error inside it is no larger than the run's step-to-step scatter)");
  d.add_options()("help,h", "this help")("fabric", po::value<std::string>(), "fabric name or TOML file (required)")(
      "intra", po::value<std::string>(), "take the intra-node level from this fabric")(
      "compute-profile", po::value<std::string>(), "fitted compute profile (calibrate --compute); default: each file's own compute_profile")(
      "kernels", po::value<std::string>(), "measured compression-kernel rates (calibrate --kernels)")(
      "compute-from", po::value<std::string>(),
      "predict every run with this recorded run's compute (its steps and each tensor's gradient ready time, by "
      "/model name) under the run's own buckets, compressor, algorithm and shape; codec modelled; the same model "
      "(another nodes x ranks per node is a what-if: more ranks wait longer for the slowest)")(
      "json", "print one JSON object")(
      "out", po::value<std::string>(), "write an HDF5 report")(
      "trace", po::value<std::string>(), "write measured and predicted steps as Chrome trace-event JSON (Perfetto)")(
      "files", po::value<std::vector<std::string>>(), "train files");
  po::positional_options_description pos;
  pos.add("files", -1);
  const auto vm = parse(args, d, &pos);
  if (vm.count("help")) {
    std::cout << d;
    return 0;
  }
  GS_USAGE_CHECK(vm.count("fabric"), "option --fabric is required");
  GS_USAGE_CHECK(vm.count("files"), "compare: no gradsync-train files given");
  GS_USAGE_CHECK(!vm.count("trace") || !vm["trace"].as<std::string>().empty(), "option --trace: empty file name");
  const auto rep = compare_runs(vm["files"].as<std::vector<std::string>>(), vm["fabric"].as<std::string>(),
                                vm.count("intra") ? vm["intra"].as<std::string>() : "",
                                vm.count("compute-profile") ? vm["compute-profile"].as<std::string>() : "",
                                vm.count("kernels") ? vm["kernels"].as<std::string>() : "",
                                vm.count("compute-from") ? vm["compute-from"].as<std::string>() : "");
  if (vm.count("out")) write_compare(rep, vm["out"].as<std::string>(), g_argv);
  if (vm.count("trace")) write_compare_trace(rep, vm["trace"].as<std::string>());
  if (vm.count("json")) std::cout << compare_json(rep).dump() << "\n";
  else std::cout << compare_table(rep);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  g_argv.assign(argv, argv + argc);
  try {
    if (argc < 2) throw UsageError("no command (fabrics, collective, predict, calibrate, compare); see --help");
    if (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
      std::cout << kUsage;
      return 0;
    }
    const std::string cmd = argv[1];
    const std::vector<std::string> args(argv + 2, argv + argc);
    if (cmd == "fabrics") return cmd_fabrics(args);
    if (cmd == "collective") return cmd_collective(args);
    if (cmd == "predict") return cmd_predict(args);
    if (cmd == "calibrate") return cmd_calibrate(args);
    if (cmd == "compare") return cmd_compare(args);
    if (cmd == "tune") return cmd_tune(args);
    throw UsageError("unknown command '" + cmd + "' (known: fabrics, collective, predict, calibrate, compare, tune)");
  } catch (const po::error& e) {
    std::fprintf(stderr, "gradsync-model: error: %s\n", e.what());
    return 2;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "gradsync-model: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gradsync-model: error: %s\n", e.what());
    return 1;
  }
}
