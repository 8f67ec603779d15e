// gradsync/bench/report.hpp — what rank 0 makes of the results: the nccl-tests table on
// stdout (or one JSON object with --json) and the HDF5 file (schema: results/README.md).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/harness.hpp"
#include "bench/options.hpp"
#include "algos/allreduce.hpp"
#include "core/h5io.hpp"
#include "core/netif.hpp"
#include "core/provenance.hpp"

namespace gradsync::bench {

// The run as the header, the JSON and the file describe it.
struct RunInfo {
  BenchOptions opts;
  int nranks = 1;
  int nnodes = 1;
  int ranks_per_node = 1;                // local_size() of rank 0
  std::vector<std::string> hostnames;    // rank order
  std::vector<std::string> cpus;         // rank order: CPU lists (core/cpus.hpp)
  std::vector<std::string> machine_ids;  // rank order: the kernel each ran on (core/cpus.hpp machine_id)
  std::vector<std::string> pids;         // rank order
  bool has_redop = false;                // else the table says "none"
  bool has_root = false;                 // else the table says -1
  double bus_factor = 1.0;
  ChunkChoice chunk;  // what the algorithm pipelines with (--chunk-bytes or auto) and why
  std::string out_path;
  // --device cuda: header lines about the GPU and how it was used, a footer line (memory
  // footprint) and a note for the `timing` attribute; all empty for cpu.
  std::vector<std::string> device_lines;
  std::string device_footer;
  std::string timing_note;
  // Bytes per rank and network interface while the sweep ran (group /net of the file).
  NetTraffic net;

  bool pingpong() const { return opts.op == "pingpong"; }
  std::string redop_text() const;
  int root_value() const { return has_root ? opts.root : -1; }
};

// Totals over the sweep: wrong elements (-1 when not checked) and the mean bus bandwidth
// over every size and both modes (pingpong: the mean bandwidth), as nccl-tests' footer.
std::int64_t total_wrong(const std::vector<SizeResult>& rows);
double avg_busbw(const RunInfo& info, const std::vector<SizeResult>& rows);

// The table, printed as the run goes (each call flushes).
class Table {
 public:
  Table(const RunInfo& info, std::FILE* out) : info_(info), out_(out) {}
  void header() const;
  void row(const SizeResult& r) const;
  void footer(const std::vector<SizeResult>& rows) const;

 private:
  const RunInfo& info_;
  std::FILE* out_;
};

std::string to_json(const RunInfo& info, const std::vector<SizeResult>& rows);

// The run in nccl-tests' -J format (NVIDIA/nccl-tests src/util.cu, JSON_FILE_VERSION 2):
// version, start_time, args, env (the communication variables results record), config
// (with the devices list: rank, group, pid, hostname, device, device_hex, device_info),
// results (size, count, type, redop, root as "%6i" text, out_of_place and in_place with
// time, alg_bw, bus_bw, nwrong), out_of_bounds, average_bus_bandwidth, errors, end_time.
// One key of our own, "gradsync" {op, algo, nranks, nnodes, ranks_per_node}, says what
// args[0] ("gradsync-bench") cannot. Pingpong writes its half round trips as out_of_place.
std::string to_nccl_tests_json(const RunInfo& info, const std::vector<SizeResult>& rows);
// Writes it atomically (temp + rename). Throws Error naming the file.
void write_nccl_tests_json(const std::string& path, const RunInfo& info, const std::vector<SizeResult>& rows);

// Writes every dataset and attribute of the schema into `w` (provenance included) and
// commits it (temp + rename).
void write_results(h5::Writer& w, const RunInfo& info, const std::vector<SizeResult>& rows);

// results/bench-<op>-<algo>-<YYYYmmddTHHMMSSZ>.h5, with -2, -3, ... appended when a file of
// that name exists (two runs in one second).
std::string default_out_path(const BenchOptions& o);

}  // namespace gradsync::bench
