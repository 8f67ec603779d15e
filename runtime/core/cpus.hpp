// gradsync/core/cpus.hpp — which CPUs the ranks may run on, and how many cores a node
// gives its ranks.
//
// Purpose: copies over shared memory and reductions are work done by the ranks' CPUs. When a
// node runs more busy ranks than it has CPUs (`mpirun --oversubscribe` on a laptop or a
// 2-core CI machine, a Slurm job with fewer CPUs than tasks), each gets a share of a core and
// such steps slow down by ranks / cores. Result files record the CPU set of every rank
// (`cpu_affinity`, e.g. "0-3,8") and `cores_per_node`, the smallest per-node union of those
// sets, so the model (netmodel/fabric.hpp, `cores_per_node`) can tell a slow memory system
// from an oversubscribed one.
// Approach: sched_getaffinity of the calling thread; the union is taken over the ranks that
// share a hostname.
#pragma once

#include <string>
#include <vector>

namespace gradsync {

// CPUs this process may run on (sched_getaffinity), sorted; all online CPUs when the call
// is not available.
std::vector<int> affinity_cpus();
// "0-3,8" for {0,1,2,3,8}; "" for none.
std::string cpu_list(const std::vector<int>& cpus);
// Inverse of cpu_list; throws UsageError naming `what` on a malformed list.
std::vector<int> parse_cpu_list(const std::string& list, const std::string& what = "cpu list");
// Per node (ranks grouped by hostname), the number of distinct CPUs in the union of its
// ranks' lists; the smallest over nodes. 0 when the lists are missing or empty.
int cores_per_node(const std::vector<std::string>& hostnames, const std::vector<std::string>& cpu_lists);

// The kernel this process runs on: /proc/sys/kernel/random/boot_id, which network
// namespaces, containers and the testbed's hosts on one machine share, while their
// hostnames differ; the hostname where it cannot be read.
std::string machine_id();

// The ranks that share one machine's CPUs (ranks grouped by machine id): for the machine
// whose ranks have the fewest CPUs each, its rank count and the size of the union of their
// CPU lists. {0, 0} when the lists or ids are missing or of another length. On a cluster
// (one node per machine) this is the node's ranks and cores; on the namespace testbed,
// every host's rank against the one machine's CPUs.
struct MachineShare {
  int ranks = 0, cores = 0;
};
MachineShare machine_share(const std::vector<std::string>& machine_ids, const std::vector<std::string>& cpu_lists);

}  // namespace gradsync
