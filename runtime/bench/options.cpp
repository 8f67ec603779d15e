#include "bench/options.hpp"

#include <boost/program_options.hpp>

#include <sstream>

#include "algos/detail.hpp"
#include "bench/busy.hpp"
#include "bench/collective.hpp"
#include "core/error.hpp"
#include "core/params.hpp"
#include "core/units.hpp"
#include "plan/algos.hpp"

namespace po = boost::program_options;

namespace gradsync::bench {

static_assert(kMaxParamChannels == algos::kMaxChannels, "GRADSYNC_CHANNELS' bound is the algorithms' bound");

namespace {

// More sizes than this is almost certainly a typo (-i 1 up to 1G) and would run for days.
constexpr std::size_t kMaxSizes = 4096;

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// The algorithms of `op` that run on host buffers (the help lists "nccl" once, for all).
std::string host_algos(const std::string& op) {
  std::vector<std::string> names;
  for (const auto& n : algo_names_for(op))
    if (n != "nccl") names.push_back(n);
  return join(names);
}

po::options_description describe_options() {
  po::options_description d("Options");
  // Every value is taken as text and parsed by gradsync's own parsers, so a bad value
  // gets a message that names the option and says what was expected.
  d.add_options()
      ("help,h", "print this help and exit")
      ("op", po::value<std::string>(), "operation (default allreduce)")
      ("algo", po::value<std::string>(), "algorithm")
      ("device", po::value<std::string>(), "buffer location")
      ("buffers", po::value<std::string>(), "shared or private host buffers")
      ("minbytes,b", po::value<std::string>(), "smallest size")
      ("maxbytes,e", po::value<std::string>(), "largest size")
      ("stepfactor,f", po::value<std::string>(), "multiplicative step")
      ("stepbytes,i", po::value<std::string>(), "additive step")
      ("iters,n", po::value<std::string>(), "timed iterations")
      ("warmup_iters,w", po::value<std::string>(), "warm-up iterations")
      ("check,c", po::value<std::string>(), "check results")
      ("off-cache", po::value<std::string>(), "evict the caches before every iteration")
      ("busy-threads", po::value<std::string>(), "threads per rank spinning during the sweep")
      ("datatype,d", po::value<std::string>(), "element type")
      ("redop,o", po::value<std::string>(), "reduction")
      ("chunk-bytes", po::value<std::string>(), "ring chunk")
      ("channels", po::value<std::string>(), "rings")
      ("root", po::value<std::string>(), "root rank")
      ("out", po::value<std::string>(), "result file")
      ("json-file,J", po::value<std::string>(), "nccl-tests JSON file")
      ("json", "JSON output");
  return d;
}

std::string text_of(const po::variables_map& vm, const char* name) { return vm[name].as<std::string>(); }

int parse_int_in(const std::string& text, const std::string& option, std::int64_t lo, std::int64_t hi,
                 const std::string& what) {
  const std::int64_t v = parse_int(text, option);
  GS_USAGE_CHECK(v >= lo && v <= hi, "option ", option, ": ", what, " (got ", text, ")");
  return static_cast<int>(v);
}

}  // namespace

BenchOptions parse_options(int argc, char** argv) {
  BenchOptions o;
  for (int i = 0; i < argc; ++i) o.argv.emplace_back(argv[i]);

  po::variables_map vm;
  try {
    const int style = po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
    po::store(po::command_line_parser(argc, argv)
                  .options(describe_options())
                  .positional(po::positional_options_description())  // no operands
                  .style(style)
                  .run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(std::string(e.what()) + " (see --help)");
  }
  if (vm.count("help")) {
    o.help = true;
    return o;
  }

  if (vm.count("op")) {
    o.op = text_of(vm, "op");
    bool known = false;
    for (const auto& n : op_names()) known = known || n == o.op;
    GS_USAGE_CHECK(known, "option --op: unknown operation '", o.op, "' (known: ", join(op_names()), ")");
  }
  o.algo = vm.count("algo") ? text_of(vm, "algo") : default_algo(o.op);
  check_op_algo(o.op, o.algo);
  if (vm.count("device")) {
    o.device = text_of(vm, "device");
    GS_USAGE_CHECK(o.device == "cpu" || o.device == "cuda", "option --device: unknown device '", o.device,
                   "' (known: cpu, cuda)");
  }
#ifndef GRADSYNC_HAVE_CUDA
  GS_USAGE_CHECK(o.device != "cuda", "option --device: this gradsync-bench was built without CUDA support "
                 "(GRADSYNC_WITH_CUDA=OFF or no nvcc at configure time); only --device cpu is available");
#endif
  GS_USAGE_CHECK(o.algo != "nccl" || o.device == "cuda",
                 "option --algo: nccl runs on GPU buffers and needs --device cuda");
  if (vm.count("buffers")) {
    o.buffers = text_of(vm, "buffers");
    (void)plan::parse_buffers(o.buffers);
  }

  if (vm.count("minbytes")) o.min_bytes = parse_size(text_of(vm, "minbytes"), "-b");
  if (vm.count("maxbytes")) o.max_bytes = parse_size(text_of(vm, "maxbytes"), "-e");
  if (o.max_bytes < o.min_bytes) {
    const std::string b = vm.count("minbytes") ? text_of(vm, "minbytes") : std::to_string(o.min_bytes);
    const std::string e = vm.count("maxbytes") ? text_of(vm, "maxbytes") : std::to_string(o.max_bytes);
    throw UsageError("option -e: " + e + " is below -b " + b);
  }
  GS_USAGE_CHECK(!(vm.count("stepfactor") && vm.count("stepbytes")),
                 "options -f and -i exclude each other (multiplicative or additive steps, not both)");
  if (vm.count("stepbytes")) {
    o.step_bytes = parse_size(text_of(vm, "stepbytes"), "-i");
    GS_USAGE_CHECK(o.step_bytes > 0, "option -i: the step must be > 0 bytes (got ", text_of(vm, "stepbytes"), ")");
  }
  if (vm.count("stepfactor")) {
    const std::string f = text_of(vm, "stepfactor");
    o.step_factor = parse_int(f, "-f");
    GS_USAGE_CHECK(o.step_factor >= 2, "option -f: the factor must be an integer >= 2 (got ", f,
                   "); use -i for additive steps");
  }
  if (vm.count("iters")) o.iters = parse_int_in(text_of(vm, "iters"), "-n", 1, 1000000000, "must be >= 1");
  if (vm.count("warmup_iters"))
    o.warmup = parse_int_in(text_of(vm, "warmup_iters"), "-w", 0, 1000000000, "must be >= 0");
  if (vm.count("check")) o.check = parse_int_in(text_of(vm, "check"), "-c", 0, 1, "must be 0 or 1") == 1;
  if (vm.count("off-cache")) {
    const std::string t = text_of(vm, "off-cache");
    o.off_cache_bytes = parse_size(t, "--off-cache");
    GS_USAGE_CHECK(o.off_cache_bytes >= 0 && o.off_cache_bytes <= (std::int64_t{64} << 30),
                   "option --off-cache: must be between 0 and 64G bytes (got ", t, ")");
  }
  if (vm.count("busy-threads"))
    o.busy_threads = parse_int_in(text_of(vm, "busy-threads"), "--busy-threads", 0, kMaxBusyThreads,
                                  "must be an integer between 0 and " + std::to_string(kMaxBusyThreads));
  if (vm.count("datatype")) {
    try {
      o.dtype = parse_dtype(text_of(vm, "datatype"));
    } catch (const UsageError& e) {
      throw UsageError(std::string("option -d: ") + e.what());
    }
  }
  if (vm.count("redop")) {
    try {
      o.redop = parse_redop(text_of(vm, "redop"));
    } catch (const UsageError& e) {
      throw UsageError(std::string("option -o: ") + e.what());
    }
    // -o sum (the default) is accepted everywhere; another reduction on an operation
    // without one would be silently ignored, so it is refused.
    GS_USAGE_CHECK(o.redop == RedOp::Sum || o.op == "allreduce" || o.op == "reducescatter", "option -o: --op ",
                   o.op, " has no reduction (-o ", redop_name(o.redop), " applies to allreduce and reducescatter)");
  }

  // Ring knobs: the registered GRADSYNC_* parameters give the defaults (one knob, one
  // variable, one default), the options override them.
  const bool chunk_given = vm.count("chunk-bytes") > 0, channels_given = vm.count("channels") > 0;
  const std::string chunk_text = chunk_given ? text_of(vm, "chunk-bytes") : param_string("GRADSYNC_CHUNK_BYTES");
  const std::string chunk_opt = chunk_given ? "--chunk-bytes" : "--chunk-bytes (default from GRADSYNC_CHUNK_BYTES)";
  o.chunk_bytes = chunk_text == "auto" ? 0 : parse_size(chunk_text, chunk_opt);  // 0: transport-aware
  GS_USAGE_CHECK(chunk_text == "auto" || o.chunk_bytes > 0, "option ", chunk_opt, ": must be > 0 bytes or auto (got ",
                 chunk_text, ")");
  const std::string channels_text = channels_given ? text_of(vm, "channels") : param_string("GRADSYNC_CHANNELS");
  const std::string channels_opt = channels_given ? "--channels" : "--channels (default from GRADSYNC_CHANNELS)";
  o.channels = parse_int_in(channels_text, channels_opt, 1, algos::kMaxChannels,
                            "must be between 1 and " + std::to_string(algos::kMaxChannels));
  if (vm.count("root"))
    o.root = parse_int_in(text_of(vm, "root"), "--root", 0, 1 << 30, "must be a rank >= 0");
  if (vm.count("out")) {
    o.out = text_of(vm, "out");
    GS_USAGE_CHECK(!o.out.empty(), "option --out: empty file name");
  }
  o.json = vm.count("json") > 0;
  if (vm.count("json-file")) {
    o.json_file = text_of(vm, "json-file");
    GS_USAGE_CHECK(!o.json_file.empty(), "option -J/--json-file: empty file name");
  }

  const std::size_t nsizes = size_sweep(o).size();
  GS_USAGE_CHECK(nsizes <= kMaxSizes, "options -b/-e/", o.step_bytes > 0 ? "-i" : "-f", ": the sweep has ", nsizes,
                 " sizes, more than the ", kMaxSizes, " allowed");
  return o;
}

std::vector<std::pair<std::string, std::string>> same_on_all_ranks_items(const BenchOptions& o) {
  const auto i = [](std::int64_t v) { return std::to_string(v); };
  // The GRADSYNC_* defaults are folded into chunk_bytes/channels, so a mixed environment
  // is caught under the option it feeds.
  return {{"--op", o.op},
          {"--algo", o.algo},
          {"--device", o.device},
          {"--buffers", o.buffers},
          {"-b", i(o.min_bytes)},
          {"-e", i(o.max_bytes)},
          {"-f", i(o.step_factor)},
          {"-i", i(o.step_bytes)},
          {"-n", i(o.iters)},
          {"-w", i(o.warmup)},
          {"-c", o.check ? "1" : "0"},
          {"--off-cache", i(o.off_cache_bytes)},
          {"--busy-threads", i(o.busy_threads)},
          {"-d", dtype_name(o.dtype)},
          {"-o", redop_name(o.redop)},
          {"--chunk-bytes", i(o.chunk_bytes)},
          {"--channels", i(o.channels)},
          {"--root", i(o.root)}};
}

void validate_for_ranks(const BenchOptions& o, int nranks) {
  GS_USAGE_CHECK(o.op != "pingpong" || nranks == 2, "option --op pingpong: needs exactly 2 ranks (got ", nranks,
                 "; run with mpirun -np 2)");
  GS_USAGE_CHECK(o.root < nranks, "option --root: rank ", o.root, " is out of range (", nranks, " ranks: 0..",
                 nranks - 1, ")");
}

std::vector<std::int64_t> size_sweep(const BenchOptions& o) {
  std::vector<std::int64_t> sizes;
  for (std::int64_t s = o.min_bytes; s <= o.max_bytes;) {
    sizes.push_back(s);
    if (sizes.size() > kMaxSizes) break;  // parse_options refuses the sweep
    if (o.step_bytes > 0) s += o.step_bytes;
    else if (s == 0) s = 1;
    else if (s > o.max_bytes / o.step_factor) break;  // next would exceed max (or overflow)
    else s *= o.step_factor;
  }
  return sizes;
}

std::string usage_text() {
  std::ostringstream os;
  os << "Usage: mpirun -np N gradsync-bench [options]\n"
        "\n"
        "Measures one collective (or a ping-pong) over a sweep of message sizes and prints\n"
        "the nccl-tests table; every run also writes an HDF5 file (results/README.md).\n"
        "\n"
        "  --op OP              allreduce (default), reducescatter, allgather, alltoall,\n"
        "                       broadcast, sendrecv (send to rank+1 while receiving from\n"
        "                       rank-1: both directions at once), pingpong (exactly 2\n"
        "                       ranks: half round-trip time)\n"
        "  --algo NAME          allreduce:     " << host_algos("allreduce") << "\n"
        "                                      (default auto; 'mpi' is MPI_Allreduce)\n"
        "                       reducescatter: " << host_algos("reducescatter") << "\n"
        "                       allgather:     " << host_algos("allgather") << "\n"
        "                       alltoall:      " << host_algos("alltoall") << "\n"
        "                       broadcast:     " << host_algos("broadcast") << "\n"
        "                       sendrecv:      " << host_algos("sendrecv") << " (no nccl; pieces: as rd and\n"
        "                                      rabenseifner, in --chunk-bytes pieces between\n"
        "                                      nodes or when given, whole on one node)\n"
        "                       pingpong:      " << host_algos("pingpong") << "\n"
        "                       (default for all but allreduce: mpi, the library's own)\n"
        "                       every operation also: nccl, NCCL's own call on GPU buffers\n"
        "                       (--device cuda; alltoall as grouped ncclSend/ncclRecv,\n"
        "                       pingpong as ncclSend/ncclRecv)\n"
        "      --device D       cpu (default): buffers in host memory; cuda: buffers in GPU\n"
        "                       memory, one GPU per rank by node-local rank (SLURM_LOCALID\n"
        "                       or MPI's), modulo the GPUs present. With cuda every algorithm\n"
        "                       but nccl runs over MPI with host staging: each call copies its\n"
        "                       input device->host and its result host->device through pinned\n"
        "                       memory, inside the timed region (ranks may share a GPU; NCCL\n"
        "                       needs one GPU per rank). No GPU: exit 1 before anything runs\n"
        "      --buffers B      shared (default): the send and receive buffers live in the\n"
        "                       node's shared memory, registered with the communicator, when\n"
        "                       all ranks share one node (else private); shm then sums and\n"
        "                       copies straight from the peers' buffers, as NCCL on buffers\n"
        "                       registered with ncclCommRegister. private: each process's\n"
        "                       own memory (shm copies every input into its segment first).\n"
        "                       Other algorithms run alike on both\n"
        "  -b, --minbytes SIZE  smallest message (default 8)\n"
        "  -e, --maxbytes SIZE  largest message (default 64M)\n"
        "  -f, --stepfactor F   multiply the size by F (integer >= 2, default 2); a sweep\n"
        "                       from 0 continues at 1\n"
        "  -i, --stepbytes SIZE add SIZE instead (> 0; excludes -f)\n"
        "  -n, --iters N        timed iterations per size (default 20, >= 1)\n"
        "  -w, --warmup_iters N untimed iterations first (default 5)\n"
        "  -c, --check 0|1      check every result and count wrong elements (default 1)\n"
        "      --off-cache B    before every iteration each rank writes B bytes of its own\n"
        "                       (e.g. 256M, past the last-level cache), so the call finds its\n"
        "                       buffers out of cache, as a training step finds its gradient\n"
        "                       buckets (Intel MPI Benchmarks' -off_cache; default 0: off)\n"
        "      --busy-threads N during the sweep, N threads per rank spin on the CPU, as\n"
        "                       backward's compute does while DDP's buckets all-reduce: what\n"
        "                       a collective costs while the host computes (gradsync-model\n"
        "                       calibrate fits the level's contention from such sweeps).\n"
        "                       0.." << kMaxBusyThreads << ", default 0; they share the rank's CPU\n"
        "                       binding (mpirun --bind-to)\n"
        "  -d, --datatype T     float (default), half, bfloat16 (pingpong moves bytes)\n"
        "  -o, --redop OP       sum (default), avg (allreduce and reducescatter; other\n"
        "                       operations refuse avg)\n"
        "      --chunk-bytes B  ring pipelining chunk, rd/rabenseifner/sendrecv-pieces piece, or auto\n"
        "                       (default GRADSYNC_CHUNK_BYTES or auto:\n"
        "                       below the TCP eager limit between nodes, 4M on one node)\n"
        "      --channels K     concurrent rings (default GRADSYNC_CHANNELS or 1)\n"
        "      --root R         broadcast root (default 0)\n"
        "      --out FILE.h5    result file (default results/bench-<op>-<algo>-<UTC time>.h5\n"
        "                       under the current directory)\n"
        "      --json           print one JSON object instead of the table (rank 0)\n"
        "  -J, --json-file FILE also write the results as nccl-tests -J does (its JSON format,\n"
        "                       version 2), so tools that read one read the other\n"
        "  -h, --help           this text\n"
        "\n"
        "SIZE takes K, M, G (powers of 1024). Sizes are rounded down to a whole number of\n"
        "elements, and for reducescatter, allgather and alltoall to a multiple of\n"
        "(element size x ranks), as nccl-tests does; 'size' is the whole buffer (allgather:\n"
        "the gathered result, reducescatter: the input) and 'count' the count argument of\n"
        "the call (per rank for those three). pingpong sizes are bytes, down to 0.\n"
        "\n"
        "Timing: a barrier, then one call, timed on every rank; an iteration's time is the\n"
        "slowest rank's. 'time' is the mean over the timed iterations (us); algbw = size /\n"
        "time; busbw = algbw x factor: allreduce 2(n-1)/n, reducescatter, allgather and\n"
        "alltoall (n-1)/n, broadcast and sendrecv 1 (sendrecv: size = bytes each rank sends\n"
        "and receives at once; in place receives into a staging buffer and copies it over\n"
        "the input, inside the timed region). In place, the input is copied back before each\n"
        "iteration, outside the timed region. With -c 1 the last iteration's result is\n"
        "checked on every rank (out of place also checks that the send buffer is intact);\n"
        "#wrong is the number of wrong elements summed over ranks.\n"
        "\n"
        "With --device cuda the input is filled and the result checked on the host; those\n"
        "copies to and from the GPU are outside the timed region. Each call returns after its\n"
        "GPU work has completed (NCCL: an event after the call is waited for), so the host\n"
        "timer measures the whole operation.\n"
        "\n"
        "Exit status: 0 all results right; 1 wrong results, a run-time error (all ranks\n"
        "end) or --device cuda without a usable GPU; 2 bad options or GRADSYNC_* values\n"
        "(refused before any communication), options that differ between ranks or an\n"
        "--out that cannot be written (refused right after start, before measuring).\n"
        "Logs: GRADSYNC_DEBUG=WARN|INFO|TRACE.\n";
  return os.str();
}

}  // namespace gradsync::bench
