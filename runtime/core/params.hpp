// gradsync/core/params.hpp — one registry of the environment knobs (as NCCL_PARAM):
// each has one name, one environment variable, one default and one line of help. Programs
// mirror the ones users set often as CLI options; every result file records all of them.
#pragma once

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

// Seconds a blocking wait (point-to-point or collective) may take before it is declared
// hung (GRADSYNC_TIMEOUT_S, default 300; 0 disables).
double comm_timeout_s();

}  // namespace gradsync
