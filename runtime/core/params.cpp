#include "core/params.hpp"

#include <cstdlib>

#include "core/error.hpp"
#include "core/units.hpp"

namespace gradsync {

const std::vector<ParamInfo>& param_registry() {
  static const std::vector<ParamInfo> registry = {
      {"GRADSYNC_DEBUG", "", "log level: WARN, INFO or TRACE (NCCL_DEBUG's format); quiet when unset"},
      {"GRADSYNC_DEBUG_FILE", "", "write logs to this file instead of stderr; %h = host, %p = pid"},
      {"GRADSYNC_TIMEOUT_S", "300",
       "seconds a wait on a peer may take before the run fails with a time-out (0 = wait forever)"},
      {"GRADSYNC_CHUNK_BYTES", "auto",
       "default ring pipelining chunk (the NCCL_BUFFSIZE analog); auto: by transport (32K over TCP, 4M on one node)"},
      {"GRADSYNC_CHANNELS", "1", "default number of concurrent rings (the NCCL_NSOCKS_PERTHREAD analog)"},
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

double comm_timeout_s() {
  static const double t = param_double("GRADSYNC_TIMEOUT_S");
  return t;
}

}  // namespace gradsync
