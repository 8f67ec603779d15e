// gradsync/bench/options.hpp — the command line of gradsync-bench.
//
// Parsing and validation are pure functions of argv (and the GRADSYNC_* defaults in the
// environment), so every rank reaches the same verdict without talking to the others:
// a bad option ends all ranks with status 2 before any communication. The only checks
// that need the rank count (pingpong needs 2 ranks, --root must name a rank) are in
// validate_for_ranks(), run right after MPI_Init and before the communicator exists.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.hpp"

namespace gradsync::bench {

struct BenchOptions {
  std::string op = "allreduce";  // allreduce|reducescatter|allgather|alltoall|broadcast|pingpong
  std::string algo;              // resolved: "auto" for allreduce, "mpi" otherwise, unless given
  std::string device = "cpu";    // cpu|cuda: where the buffers live (cuda needs a GRADSYNC_HAVE_CUDA build)
  // shared|private: host buffers in the node's shared memory, registered with the
  // communicator (comm/shared_buffer.hpp; shm then reads peers' buffers in place), or in
  // each process's own memory. main() resolves shared to private where it cannot apply
  // (ranks on several nodes, --device cuda, pingpong).
  std::string buffers = "shared";
  std::int64_t min_bytes = 8;
  std::int64_t max_bytes = 64ll << 20;
  std::int64_t step_factor = 2;  // used when step_bytes == 0
  std::int64_t step_bytes = 0;   // > 0: additive steps (-i)
  int iters = 20;
  int warmup = 5;
  bool check = true;
  std::int64_t off_cache_bytes = 0;  // > 0: each rank writes this many bytes before every iteration
  int busy_threads = 0;              // threads per rank spinning on the CPU during the sweep (busy.hpp)
  DType dtype = DType::F32;
  RedOp redop = RedOp::Sum;
  std::int64_t chunk_bytes = 0;  // default from GRADSYNC_CHUNK_BYTES; 0: auto, by transport
  int channels = 1;              // default from GRADSYNC_CHANNELS
  int root = 0;
  std::string out;               // empty: results/bench-<op>-<algo>-<UTC>.h5
  std::string json_file;         // -J: nccl-tests' JSON (format version 2) to this file too
  bool json = false;
  bool help = false;
  std::vector<std::string> argv;  // as given, for provenance
};

// Parses and validates argv. Throws UsageError (message names the option) on any bad input;
// sets help=true (and nothing else is meaningful) for -h/--help.
BenchOptions parse_options(int argc, char** argv);

// Checks that need the number of ranks. Throws UsageError.
void validate_for_ranks(const BenchOptions& o, int nranks);

// The options that must be equal on every rank, as (option, value-as-text) pairs in a
// fixed order (everything but --out and --json, which only rank 0 uses). main() gathers
// them before any collective and refuses a mix, naming the option and the ranks.
std::vector<std::pair<std::string, std::string>> same_on_all_ranks_items(const BenchOptions& o);

// The --help text.
std::string usage_text();

// The message sizes of the sweep, before per-op rounding: min, then *factor or +step up to
// max inclusive. A 0 start with a factor continues at 1 (0, 1, 2, 4, ...).
std::vector<std::int64_t> size_sweep(const BenchOptions& o);

}  // namespace gradsync::bench
