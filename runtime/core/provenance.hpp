// gradsync/core/provenance.hpp — what every result file says about where it came from.
//
// Root attributes: schema_version, program, argv, git_revision, created_utc, hostnames,
// nranks, nnodes, slurm_job_id (when set), cpu_affinity (one CPU list per rank, e.g. "0-3")
// and cores_per_node (core/cpus.hpp; both when the ranks' CPU lists are known); machine_ids
// (the kernel each rank ran on), machine_ranks and machine_cores (core/cpus.hpp machine_share:
// the ranks that share one machine's CPUs, and those CPUs), where the ids were gathered
// (gradsync-train, gradsync-bench). Group /environment: one string attribute per
// communication-tuning variable that was set (NCCL_*, OMPI_MCA_* less mpirun's own launch
// plumbing, GRADSYNC_*, UCX_*, SLURM_JOB_ID).
// Group /params: every registered gradsync knob with its effective value.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/h5io.hpp"

namespace gradsync {

inline constexpr std::int64_t kSchemaVersion = 1;

struct Provenance {
  std::string program;                 // "gradsync-bench"
  std::vector<std::string> argv;
  std::vector<std::string> hostnames;  // one per rank, rank order
  int nranks = 1;
  int nnodes = 1;
  std::vector<std::string> cpus;       // one CPU list per rank (core/cpus.hpp); may be empty
  std::vector<std::string> machine_ids;  // one per rank (core/cpus.hpp machine_id); may be empty
};

// The environment variables results record, sorted by name.
std::vector<std::pair<std::string, std::string>> communication_environment();

std::string git_revision();      // build-time revision, e.g. "3f2a9c1d0e7b" ("-dirty": uncommitted changes)
std::string utc_timestamp();     // "2026-11-29T15:04:05Z"

void write_provenance(h5::Writer& w, const Provenance& p);

}  // namespace gradsync
