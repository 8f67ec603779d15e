// gradsync/core/params.hpp — one registry of the environment knobs (as NCCL_PARAM):
// each has one name, one environment variable, one default and one line of help. Programs
// mirror the ones users set often as CLI options; every result file records all of them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gradsync {

struct ParamInfo {
  const char* env;            // e.g. "GRADSYNC_TIMEOUT_S"
  const char* default_value;  // as text
  const char* help;
};

const std::vector<ParamInfo>& param_registry();

// Value of a registered knob: the environment's if set, else the default. Throws
// gradsync::Error if `env` is not registered (catches typos at the call site in tests).
std::string param_string(const std::string& env);
double param_double(const std::string& env);
// A byte size, parsed as CLI sizes are ("64K", "4M"); UsageError naming the variable.
std::int64_t param_size(const std::string& env);

// Largest GRADSYNC_CHANNELS accepted (the algorithms' kMaxChannels; equal by static_assert there).
constexpr std::int64_t kMaxParamChannels = 64;

// Checks every registered knob's value from the environment (GRADSYNC_TIMEOUT_S > 0,
// GRADSYNC_CHUNK_BYTES a size > 0, GRADSYNC_CHANNELS in 1..kMaxParamChannels). Throws
// UsageError naming the variable. Programs call it before MPI_Init.
void validate_params();

// Before MPI_Init, only the launcher's environment says which rank this process is
// (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, SLURM_PROCID); true without a launcher.
// Usage errors found then are printed by rank 0 only: every rank finds the same ones.
bool launcher_rank_zero();
// The first rank on this node by the launcher's environment (OMPI_COMM_WORLD_LOCAL_RANK,
// MPI_LOCALRANKID, SLURM_LOCALID); true without one.
bool launcher_local_rank_zero();

// The exit status of a usage error found before MPI_Init, after rank 0 printed it. The
// other ranks return only after a grace period (2 s): a launcher tears the job down when
// its first process exits non-zero, and a rank that started late could then lose rank 0's
// line before it reached the launcher's output (seen as a missing message in CI).
int usage_exit_status(int status);

// Seconds a blocking wait (point-to-point or collective) may take before it is declared
// hung (GRADSYNC_TIMEOUT_S, default 300; must be > 0: UsageError otherwise).
double comm_timeout_s();

}  // namespace gradsync
