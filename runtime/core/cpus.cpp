#include "core/cpus.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/error.hpp"

namespace gradsync {

std::vector<int> affinity_cpus() {
  std::vector<int> out;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) out.push_back(c);
  }
  if (out.empty()) {
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    for (long c = 0; c < n; ++c) out.push_back(static_cast<int>(c));
  }
  return out;
}

std::string cpu_list(const std::vector<int>& cpus_in) {
  std::vector<int> cpus = cpus_in;
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  std::ostringstream os;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (i > 0) os << ',';
    os << cpus[i];
    if (j > i) os << '-' << cpus[j];
    i = j + 1;
  }
  return os.str();
}

std::vector<int> parse_cpu_list(const std::string& list, const std::string& what) {
  std::vector<int> out;
  std::stringstream ss(list);
  std::string item;
  auto number = [&](const std::string& s) {
    GS_USAGE_CHECK(!s.empty() && s.size() < 8 && s.find_first_not_of("0123456789") == std::string::npos, what,
                   ": '", list, "' is not a CPU list (e.g. 0-3,8)");
    return std::stoi(s);
  };
  while (std::getline(ss, item, ',')) {
    const std::size_t dash = item.find('-');
    const int a = number(item.substr(0, dash));
    const int b = dash == std::string::npos ? a : number(item.substr(dash + 1));
    GS_USAGE_CHECK(a <= b, what, ": '", list, "' has a descending range");
    for (int c = a; c <= b; ++c) out.push_back(c);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string machine_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (in && std::getline(in, id) && !id.empty()) return id;
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) == 0 && host[0] != 0) return host;
  return "unknown";
}

namespace {

// The ranks grouped by key (hostname, machine id): per key, its rank count and the number of
// distinct CPUs in the union of their lists. Empty when the lists are missing or do not
// match the keys.
std::map<std::string, std::pair<int, int>> ranks_and_cpus_by(const std::vector<std::string>& keys,
                                                              const std::vector<std::string>& cpu_lists) {
  if (cpu_lists.empty() || keys.size() != cpu_lists.size()) return {};
  std::map<std::string, std::pair<int, std::set<int>>> groups;
  for (std::size_t r = 0; r < keys.size(); ++r) {
    auto& [ranks, cpus] = groups[keys[r]];
    ++ranks;
    for (int c : parse_cpu_list(cpu_lists[r], "cpu_affinity of rank " + std::to_string(r))) cpus.insert(c);
  }
  std::map<std::string, std::pair<int, int>> out;
  for (const auto& [key, g] : groups) out[key] = {g.first, static_cast<int>(g.second.size())};
  return out;
}

}  // namespace

MachineShare machine_share(const std::vector<std::string>& machine_ids, const std::vector<std::string>& cpu_lists) {
  MachineShare worst;
  for (const auto& [id, m] : ranks_and_cpus_by(machine_ids, cpu_lists)) {
    const auto [ranks, cores] = m;
    if (cores == 0) return {};
    // Fewer CPUs per rank than the worst so far: ranks / cores above theirs.
    if (worst.cores == 0 || static_cast<long>(ranks) * worst.cores > static_cast<long>(worst.ranks) * cores)
      worst = {ranks, cores};
  }
  return worst;
}

int cores_per_node(const std::vector<std::string>& hostnames, const std::vector<std::string>& cpu_lists) {
  int least = 0;
  for (const auto& [host, node] : ranks_and_cpus_by(hostnames, cpu_lists)) {
    const int n = node.second;
    if (n == 0) return 0;
    least = least == 0 ? n : std::min(least, n);
  }
  return least;
}

}  // namespace gradsync
