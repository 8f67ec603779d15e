// gradsync-bench — collective and ping-pong timings in nccl-tests' format, raw per-iteration
// values in HDF5. `gradsync-bench --help` for the options; results/README.md for the file.
//
// Exit status: 0 every checked result right; 1 wrong results or a run-time error (every
// rank ends: MPI_Abort), or --device cuda on a machine without a usable GPU (found before
// anything else: one line, no file); 2 bad options or GRADSYNC_* values, refused on every
// rank before any communication; also 2, right after MPI_Init and before any measurement,
// for options that differ between ranks and an --out that cannot be written.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "bench/collective.hpp"
#include "bench/device.hpp"
#include "bench/harness.hpp"
#include "bench/options.hpp"
#include "bench/report.hpp"
#include "comm/mpi_comm.hpp"
#include "comm/net_traffic.hpp"
#include "core/cpus.hpp"
#include "core/error.hpp"
#include "core/h5io.hpp"
#include "core/log.hpp"
#include "core/params.hpp"
#ifdef GRADSYNC_HAVE_CUDA
#include "cuda/device.hpp"
#endif

namespace gs = gradsync;
namespace gb = gradsync::bench;

namespace {

constexpr const char* kProgram = "gradsync-bench";

void print_error(const std::string& message) {
  std::fflush(stdout);
  std::fprintf(stderr, "%s: error: %s\n", kProgram, message.c_str());
  std::fflush(stderr);
}

// A usage error that every rank raises together, after MPI_Init (so rank 0 alone prints
// it and every rank ends normally with status 2).
struct AgreedUsageError : gs::UsageError {
  using gs::UsageError::UsageError;
};

// Every rank must run the same sweep: a mixed --algo, --op or -e would hang until the
// time-out, a mixed -d would count garbage as wrong. One gather of the whole set; only
// when it differs, one gather per option, so the message names the option and the ranks.
void check_same_options(const gb::BenchOptions& o, gs::Communicator& comm) {
  const auto items = gb::same_on_all_ranks_items(o);
  std::string all;
  for (const auto& [key, value] : items) all += key + "=" + value + "\n";
  const std::vector<std::string> fps = comm.allgather_strings(all);
  bool same = true;
  for (const auto& f : fps) same = same && f == fps[0];
  if (same) return;
  for (const auto& [key, value] : items) {
    const std::vector<std::string> v = comm.allgather_strings(value);
    std::string ranks;
    for (std::size_t r = 1; r < v.size(); ++r)
      if (v[r] != v[0]) {
        if (!ranks.empty()) ranks += ',';
        ranks += std::to_string(r);
      }
    if (!ranks.empty())
      throw AgreedUsageError("option " + key + " differs across ranks: rank 0 has '" + v[0] + "' but rank(s) " +
                             ranks + " have '" + v[std::stoul(ranks.substr(0, ranks.find(',')))] +
                             "' (every rank must get the same options and GRADSYNC_* values)");
  }
}

// Rank 0 checks --out (or the default name) before any measurement; every rank learns the
// verdict. Returns (on rank 0) what was at the path then, for the writer.
gs::h5::PathState check_out_path(const std::string& path, gs::Communicator& comm, bool given) {
  std::string msg;
  gs::h5::PathState state;
  if (comm.rank() == 0) {
    try {
      state = gs::h5::check_output_path(path);
    } catch (const gs::Error& e) {
      msg = e.what();
    }
  }
  std::vector<char> bytes(msg.begin(), msg.end());
  comm.broadcast_bytes(bytes, 0);
  if (!bytes.empty())
    throw AgreedUsageError(std::string(given ? "option --out: " : "default result file: ") +
                           std::string(bytes.begin(), bytes.end()));
  return state;
}

int run(const gb::BenchOptions& given) {
  gs::MpiCommunicator comm;
  const bool rank0 = comm.rank() == 0;
  check_same_options(given, comm);
  // Shared buffers where they apply: host buffers of a collective, all ranks on one node
  // (the same answer on every rank).
  gb::BenchOptions o = given;
  if (o.buffers == "shared" && (o.device != "cpu" || o.op == "pingpong" || comm.node_count() > 1 || comm.size() < 2))
    o.buffers = "private";

  // --device cuda: a GPU on every rank, checked before anything else (no output, no file).
  // Declared before the collective, which may hold the device's NCCL communicator.
  std::unique_ptr<gb::DeviceContext> device;
#ifdef GRADSYNC_HAVE_CUDA
  if (o.device == "cuda") device = gb::make_cuda_context(comm);
#endif

  gb::RunInfo info;
  info.opts = o;
  info.nranks = comm.size();
  info.nnodes = comm.node_count();
  info.ranks_per_node = comm.local_size();  // rank 0's is the one recorded
  info.hostnames = comm.allgather_strings(comm.hostname());
  info.cpus = comm.allgather_strings(gs::cpu_list(gs::affinity_cpus()));
  info.machine_ids = comm.allgather_strings(gs::machine_id());
  info.pids = comm.allgather_strings(std::to_string(getpid()));

  // The result path is checked now, so an unwritable one fails before the measurement;
  // the file itself (a temp until published) exists only while it is written.
  if (rank0) info.out_path = o.out.empty() ? gb::default_out_path(o) : o.out;
  const gs::h5::PathState out_at_start = check_out_path(info.out_path, comm, !o.out.empty());

  std::unique_ptr<gb::Collective> coll;
  if (o.op != "pingpong") {
    gb::CollectiveConfig cfg;
    cfg.algo = o.algo;
    cfg.dtype = o.dtype;
    cfg.redop = o.redop;
    cfg.root = o.root;
    cfg.algo_options.chunk_bytes = static_cast<std::size_t>(o.chunk_bytes);
    cfg.algo_options.channels = o.channels;
    coll = device ? device->make_collective(o.op, cfg, comm) : gb::make_collective(o.op, cfg, comm);
    info.has_redop = coll->has_redop();
    info.has_root = coll->has_root();
    info.bus_factor = coll->bus_factor();
    info.chunk = coll->chunk();
    if (info.chunk.bytes > 0 && comm.rank() == 0) {
      GS_LOG(INFO) << "bench: chunk " << info.chunk.bytes << " bytes (" << info.chunk.reason << ")";
    }
  }
  if (device) {
    info.device_lines = device->header_lines(o);
    info.timing_note = device->timing_note(o);
  }
  GS_LOG(INFO) << "bench: " << o.op << " algo " << o.algo << " on " << info.nranks << " ranks, " << info.nnodes
               << " nodes, device " << o.device;

  const bool table = rank0 && !o.json;
  gb::Table out(info, stdout);
  if (table) out.header();
  const auto on_row = [&](const gb::SizeResult& r) {
    if (table) out.row(r);
  };
  const gs::NetTrafficMeter meter;  // interface counters from here to the end of the sweep
  const std::vector<gb::SizeResult> rows = coll ? gb::run_collective(o, comm, *coll, on_row, device.get())
                                                : gb::run_pingpong(o, comm, on_row, device.get());
  info.net = meter.gather(comm, "the whole sweep: every size's warm-up, timed and checked iterations");
  if (device) info.device_footer = device->footer_line();

  if (rank0) {
    // A default name taken meanwhile by another run moves on to the next free one; an
    // explicit --out taken meanwhile is never replaced (h5::Writer says where this one went).
    gs::h5::Writer writer(info.out_path,
                          o.out.empty() ? gs::h5::Writer::Naming::Unique : gs::h5::Writer::Naming::Exact,
                          &out_at_start);
    gb::write_results(writer, info, rows);
    info.out_path = writer.final_path();
    if (!o.json_file.empty()) gb::write_nccl_tests_json(o.json_file, info, rows);
    if (o.json) std::printf("%s\n", gb::to_json(info, rows).c_str());
    else out.footer(rows);
    std::fflush(stdout);
  }
  // Wrong counts are sums over ranks: every rank returns the same status.
  return gb::total_wrong(rows) > 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  gb::BenchOptions o;
  try {
    o = gb::parse_options(argc, argv);
    if (!o.help) gs::validate_params();
  } catch (const gs::UsageError& e) {
    if (gs::launcher_rank_zero()) print_error(e.what());
    return gs::usage_exit_status(2);
  }
  if (o.help) {
    if (gs::launcher_rank_zero()) std::fputs(gb::usage_text().c_str(), stdout);
    return 0;
  }

  std::unique_ptr<gs::MpiRuntime> mpi;
  try {
    mpi = std::make_unique<gs::MpiRuntime>(&argc, &argv);
  } catch (const gs::Error& e) {
    print_error(e.what());
    return 1;
  }
  int nranks = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  try {
    gb::validate_for_ranks(o, nranks);
  } catch (const gs::UsageError& e) {
    if (rank == 0) print_error(e.what());
    return 2;  // every rank: MPI_Finalize in ~MpiRuntime
  }

  try {
    return run(o);
  } catch (const AgreedUsageError& e) {
    if (rank == 0) print_error(e.what());
    return 2;  // every rank raised it together: MPI_Finalize in ~MpiRuntime
#ifdef GRADSYNC_HAVE_CUDA
  } catch (const gs::NoCudaDeviceError& e) {
    // Every rank gets here together (make_cuda_context decided collectively); the message
    // is non-empty on one rank only. A normal exit (MPI_Finalize), status 1.
    if (*e.what()) print_error(e.what());
    return 1;
#endif
  } catch (const gs::UsageError& e) {
    // Refused by a component after communication began (all ranks refuse alike, but may
    // not all get here at once): end the job.
    print_error(e.what());
    gs::MpiRuntime::abort(2);
  } catch (const gs::Error& e) {
    print_error(e.what());  // the message names rank and host
    gs::MpiRuntime::abort(1);
  } catch (const std::exception& e) {
    print_error(gs::where() + ": " + e.what());
    gs::MpiRuntime::abort(1);
  }
}
