#include "core/provenance.hpp"

#include <algorithm>
#include <ctime>
#include <set>

#include "core/cpus.hpp"
#include "core/params.hpp"

extern char** environ;

#include "git_revision.hpp"  // generated at build time (cmake/git_revision.cmake)

namespace gradsync {

std::vector<std::pair<std::string, std::string>> communication_environment() {
  static const char* prefixes[] = {"NCCL_", "OMPI_MCA_", "GRADSYNC_", "UCX_", "CUDA_VISIBLE_DEVICES"};
  static const char* launch_internal[] = {"OMPI_MCA_orte_", "OMPI_MCA_ess", "OMPI_MCA_pmix",
                                          "OMPI_MCA_initial_wdir", "OMPI_MCA_shmem_RUNTIME_QUERY_hint"};
  std::vector<std::pair<std::string, std::string>> out;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv(*e);
    const std::size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = kv.substr(0, eq);
    bool keep = key == "SLURM_JOB_ID" || key == "SLURM_ARRAY_JOB_ID" || key == "SLURM_ARRAY_TASK_ID";
    for (const char* p : prefixes) keep = keep || key.rfind(p, 0) == 0;
    // mpirun hands every process its own launch plumbing as OMPI_MCA_* too (daemon URIs,
    // job ids, session dirs): per-run values, not communication tuning; leave them out.
    for (const char* p : launch_internal) keep = keep && key.rfind(p, 0) != 0;
    if (keep) out.emplace_back(key, kv.substr(eq + 1));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string git_revision() { return GRADSYNC_GIT_REVISION; }

std::string utc_timestamp() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void write_provenance(h5::Writer& w, const Provenance& p) {
  w.attr("/", "schema_version", kSchemaVersion);
  w.attr("/", "program", p.program);
  w.attr("/", "argv", p.argv);
  w.attr("/", "git_revision", git_revision());
  w.attr("/", "created_utc", utc_timestamp());
  w.attr("/", "hostnames", p.hostnames);
  w.attr("/", "nranks", static_cast<std::int64_t>(p.nranks));
  w.attr("/", "nnodes", static_cast<std::int64_t>(p.nnodes));
  if (!p.cpus.empty()) {
    w.attr("/", "cpu_affinity", p.cpus);
    w.attr("/", "cores_per_node", static_cast<std::int64_t>(cores_per_node(p.hostnames, p.cpus)));
    if (p.machine_ids.size() == p.cpus.size()) {
      const MachineShare m = machine_share(p.machine_ids, p.cpus);
      w.attr("/", "machine_ids", p.machine_ids);
      w.attr("/", "machine_ranks", static_cast<std::int64_t>(m.ranks));
      w.attr("/", "machine_cores", static_cast<std::int64_t>(m.cores));
    }
  }
  w.group("/environment");
  for (const auto& [k, v] : communication_environment()) {
    w.attr("/environment", k, v);
    if (k == "SLURM_JOB_ID") w.attr("/", "slurm_job_id", v);
  }
  w.group("/params");
  for (const auto& info : param_registry()) w.attr("/params", info.env, param_string(info.env));
}

}  // namespace gradsync
