// gradsync/netmodel/inputs/nccl_tests.hpp — readers for collective benchmarks written by
// tools other than gradsync-bench's HDF5 writer: nccl-tests text logs (all_reduce_perf,
// all_gather_perf, reduce_scatter_perf, alltoall_perf, broadcast_perf, sendrecv_perf),
// nccl-tests' JSON (-J FILE, format version 2 of src/util.cu), and gradsync-bench's own
// stdout table (same columns as nccl-tests). They produce the BenchPoint records that
// calibrate already fits (calibrate.hpp): the seam is the point list, not the file.
//
// Purpose: a user with nothing but an nccl-tests log gets a fitted fabric.
// Approach (text): every line loses a launcher prefix (`[1,0]<stdout>:` of Open MPI's
//   --tag-output, `0: ` of srun -l) and leading blanks. Lines that start with '#' carry
//   the header (column names, found by the `size`/`count`/`time` tokens, so layouts with
//   and without `root`, with `error` or `#wrong`, and the trailing `algo` column of
//   gradsync-bench all map to the same indices), the `# Using devices` (nccl-tests) or
//   `# Using ranks` (gradsync-bench) block with one `Rank i ... on HOST` line per rank,
//   the program name (`# Collective test starting: NAME`, gradsync-bench's
//   `# gradsync-bench: OP,`) and the footer. A data row is a line whose first two
//   tokens are integers while a header is known; everything else (NCCL INFO/WARN lines,
//   launcher chatter) is skipped. Repeated header blocks (several runs in one log)
//   are read as one sweep; a size measured more than once keeps the median of its times.
//   0-byte rows are dropped (no time to fit), and said so.
// Shape: ranks = the Rank lines; nodes = distinct host names; ranks per node = ranks /
//   nodes (a log whose hosts hold different rank counts is refused). --nodes and
//   --ranks-per-node override (e.g. two ranks on one host talking over NCCL_NET=Socket).
// NICs per node: NCCL INFO lines `NET/IB : Using [0]mlx5_0:1/IB [1]...` (count of
//   devices) or aws-ofi-nccl's `(found N nics)`; else unknown (1), --nics-per-node gives it.
// Op: from the program name (all_reduce_perf -> allreduce, ...; the log's own line, else
//   the file name); else from the columns (redop none/sum, root, count x type size vs
//   size); alltoall vs sendrecv cannot be told apart by columns: then --op is required.
// Errors: UsageError (exit 2, a bad input file) "FILE:LINE: why" for a row the header cannot
//   explain, a log without a table, an unknown op, a file that cannot be read; likewise for a
//   bad override.
// Cost: one pass over the file.
#pragma once

#include <string>
#include <vector>

#include "netmodel/calibrate.hpp"

namespace gradsync::netmodel {

struct OutsideRow {
  double bytes = 0;
  double oop_us = 0;  // out-of-place time (pingpong: half round trip)
  double ip_us = 0;   // in-place time (0: none)
  int line = 0;       // first line it was read from (JSON: result index)
  std::string algo;   // gradsync-bench's per-size algo_used ("" : the log's algo)
};

struct OutsideLog {
  std::string path;
  std::string format;        // "nccl-tests text" | "nccl-tests json" | "gradsync-bench table"
  std::string program;       // all_reduce_perf, ... or gradsync-bench ("" when unknown)
  Op op = Op::Allreduce;
  std::string op_from;       // how the op was found ("program name", "file name", "columns", "--op")
  int ranks = 0;             // from the devices/ranks block (0: none)
  int nodes = 0, ranks_per_node = 0;
  std::string shape_from;    // "devices block", "--nodes/--ranks-per-node", ...
  int nics_per_node = 0;     // 0: not stated
  std::string nics_from;
  std::string algo = "nccl";  // gradsync-bench: its --algo
  std::string type;           // the first data row's element type ("float", "half", ...; "" if none)
  int busy_threads = 0;       // gradsync-bench / the torch bench with --busy-threads (header line)
  std::vector<OutsideRow> rows;
  std::vector<std::string> notes;  // what was inferred, dropped or merged
};

struct OutsideOverrides {
  std::string op;          // "" or an op name
  int nodes = 0;           // 0: from the log
  int ranks_per_node = 0;  // 0: from the log
  int nics_per_node = 0;   // 0: from the log (or 1)
};

// True when the file is not HDF5 (its first bytes are not the HDF5 signature).
bool is_outside_log(const std::string& path);

// Text or JSON by the first non-blank character. Throws Error "PATH:LINE: why".
OutsideLog read_outside_log(const std::string& path, const OutsideOverrides& ov = {});
OutsideLog parse_nccl_tests_text(const std::string& text, const std::string& origin, const OutsideOverrides& ov = {});
OutsideLog parse_nccl_tests_json(const std::string& text, const std::string& origin, const OutsideOverrides& ov = {});

// One point per size (the faster of its out-of-place and in-place times), algo as the log ran
// it ("nccl" for nccl-tests logs), the log's shape and NICs. Throws Error when the shape is
// still unknown or inconsistent.
std::vector<BenchPoint> outside_points(const OutsideLog& log);

// Any input calibrate accepts: gradsync HDF5 files (bench or train, read_collective_points)
// or an outside log (read_outside_log + outside_points). `inferred` gets describe() of each
// outside log; `skipped` what a train file could not give. Overrides apply to outside logs
// only (an HDF5 file states its own shape); a shape override given with HDF5 files alone
// is a UsageError.
std::vector<BenchPoint> read_any_points(const std::string& path, const OutsideOverrides& ov,
                                        std::vector<std::string>& skipped, std::vector<std::string>& inferred);

// One line per inference for the user ("FILE: nccl-tests text, all_reduce_perf ->
// allreduce (program name), 2 nodes x 8 ranks (devices block), 31 sizes; ...").
std::string describe(const OutsideLog& log);

}  // namespace gradsync::netmodel
