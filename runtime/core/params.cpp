#include "core/params.hpp"

#include <chrono>
#include <cstdlib>
#include <initializer_list>
#include <thread>

#include "core/error.hpp"
#include "core/units.hpp"

namespace gradsync {

const std::vector<ParamInfo>& param_registry() {
  static const std::vector<ParamInfo> registry = {
      {"GRADSYNC_DEBUG", "", "log level: WARN, INFO or TRACE (NCCL_DEBUG's format); quiet when unset"},
      {"GRADSYNC_DEBUG_FILE", "", "write logs to this file instead of stderr; %h = host, %p = pid"},
      {"GRADSYNC_TIMEOUT_S", "300",
       "seconds a wait on a peer may take before the run fails with a time-out (> 0; e.g. 1e9 to wait practically forever)"},
      {"GRADSYNC_CHUNK_BYTES", "auto",
       "default ring pipelining chunk (the NCCL_BUFFSIZE analog); auto: by transport (32K over TCP, 4M on one node)"},
      {"GRADSYNC_CHANNELS", "1", "default number of concurrent rings (the NCCL_NSOCKS_PERTHREAD analog)"},
      {"GRADSYNC_SWEEP_STALE", "1",
       "1: at start-up one rank per node removes what killed Open MPI jobs of this host and user left: shared-memory "
       "segment files (/dev/shm/vader_segment.*) no process maps and session directories (/tmp/ompi.*/pid.N) of "
       "mpiruns that are gone (core/stale_shm.hpp); 0: leave them"},
  };
  return registry;
}

std::string param_string(const std::string& env) {
  for (const auto& p : param_registry()) {
    if (env == p.env) {
      const char* v = std::getenv(p.env);
      return (v && *v) ? std::string(v) : std::string(p.default_value);
    }
  }
  throw Error("internal: '" + env + "' is not a registered gradsync parameter");
}

double param_double(const std::string& env) { return parse_double(param_string(env), env); }

std::int64_t param_size(const std::string& env) { return parse_size(param_string(env), env); }

double comm_timeout_s() {
  // Invariant: > 0 (validate_params refuses anything else at start-up; checked again here
  // for programs that never call it, so a bad value can never mean "wait forever").
  static const double t = [] {
    const double v = param_double("GRADSYNC_TIMEOUT_S");
    GS_USAGE_CHECK(v > 0, "environment GRADSYNC_TIMEOUT_S: must be > 0 seconds (got ",
                   param_string("GRADSYNC_TIMEOUT_S"), ")");
    return v;
  }();
  return t;
}

void validate_params() {
  // Each knob is parsed the way its CLI mirror is (sizes take K/M/G), so a bad value is
  // refused once, at start-up, naming the variable; never replaced by a default.
  comm_timeout_s();
  if (param_string("GRADSYNC_CHUNK_BYTES") != "auto") {  // auto: by transport (algos/chunk.cpp)
    const std::int64_t chunk = param_size("GRADSYNC_CHUNK_BYTES");
    GS_USAGE_CHECK(chunk > 0, "environment GRADSYNC_CHUNK_BYTES: must be > 0 bytes or auto (got ",
                   param_string("GRADSYNC_CHUNK_BYTES"), ")");
  }
  const std::int64_t channels = parse_int(param_string("GRADSYNC_CHANNELS"), "GRADSYNC_CHANNELS");
  GS_USAGE_CHECK(channels >= 1 && channels <= kMaxParamChannels,
                 "environment GRADSYNC_CHANNELS: must be between 1 and ", kMaxParamChannels, " (got ",
                 param_string("GRADSYNC_CHANNELS"), ")");
  const std::string sweep = param_string("GRADSYNC_SWEEP_STALE");
  GS_USAGE_CHECK(sweep == "0" || sweep == "1", "environment GRADSYNC_SWEEP_STALE: must be 0 or 1 (got ", sweep, ")");
}

namespace {

// The first of the launcher's variables that is set, as an index (0 when none is).
int launcher_index(std::initializer_list<const char*> vars) {
  for (const char* var : vars) {
    const char* v = std::getenv(var);
    if (v && *v) return std::atoi(v);
  }
  return 0;
}

}  // namespace

bool launcher_rank_zero() {
  return launcher_index({"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) == 0;
}

bool launcher_local_rank_zero() {
  return launcher_index({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) == 0;
}

int usage_exit_status(int status) {
  if (!launcher_rank_zero()) std::this_thread::sleep_for(std::chrono::seconds(2));
  return status;
}

}  // namespace gradsync
