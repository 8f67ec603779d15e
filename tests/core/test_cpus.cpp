// gradsync/tests/core/test_cpus.cpp — CPU lists and cores per node (core/cpus.hpp).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/cpus.hpp"
#include "core/error.hpp"

using namespace gradsync;

TEST(Cpus, ListRoundTrip) {
  EXPECT_EQ(cpu_list({0, 1, 2, 3, 8}), "0-3,8");
  EXPECT_EQ(cpu_list({5, 1, 3, 2}), "1-3,5");
  EXPECT_EQ(cpu_list({7, 7}), "7");
  EXPECT_EQ(cpu_list({}), "");
  EXPECT_EQ(parse_cpu_list("0-3,8"), (std::vector<int>{0, 1, 2, 3, 8}));
  EXPECT_EQ(parse_cpu_list("4,2-3,3"), (std::vector<int>{2, 3, 4}));
  EXPECT_TRUE(parse_cpu_list("").empty());
  for (const char* bad : {"a", "1-", "-1", "3-1", "1,,x", "1.5"}) {
    try {
      parse_cpu_list(bad, "cpu_affinity of rank 2");
      ADD_FAILURE() << bad << " accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("cpu_affinity of rank 2"), std::string::npos) << e.what();
    }
  }
}

TEST(Cpus, AffinityIsWhatThisProcessMayUse) {
  const std::vector<int> mine = affinity_cpus();
  ASSERT_FALSE(mine.empty());
  EXPECT_EQ(parse_cpu_list(cpu_list(mine)), mine);
}

TEST(Cpus, CoresPerNodeIsTheSmallestUnionPerHost) {
  // Bound ranks (one CPU each) of one node still give the node all of its CPUs.
  EXPECT_EQ(cores_per_node({"a", "a", "a"}, {"0", "1", "0"}), 2);
  EXPECT_EQ(cores_per_node({"a", "a", "b", "b"}, {"0-7", "0-7", "0-1", "2"}), 3);
  EXPECT_EQ(cores_per_node({"a"}, {"0-15"}), 16);
  EXPECT_EQ(cores_per_node({"a", "b"}, {}), 0);     // not recorded
  EXPECT_EQ(cores_per_node({"a", "b"}, {"0"}), 0);  // does not match the ranks
  EXPECT_EQ(cores_per_node({"a"}, {""}), 0);
}

TEST(Cpus, MachineShareIsTheRanksAgainstTheirMachinesCpus) {
  // Three testbed hosts (three hostnames, one kernel) on CPUs 0-1: 3 ranks share 2 cores.
  const MachineShare tb = machine_share({"k", "k", "k"}, {"0-1", "0-1", "0-1"});
  EXPECT_EQ(tb.ranks, 3);
  EXPECT_EQ(tb.cores, 2);
  // Two machines: the one with the fewest CPUs per rank (4 ranks on 2 against 2 on 8).
  const MachineShare two = machine_share({"a", "a", "b", "b", "b", "b"}, {"0-7", "0-7", "0", "1", "0", "1"});
  EXPECT_EQ(two.ranks, 4);
  EXPECT_EQ(two.cores, 2);
  // Containers pinned to disjoint halves of one machine: 2 ranks on 8 CPUs.
  const MachineShare pinned = machine_share({"m", "m"}, {"0-3", "4-7"});
  EXPECT_EQ(pinned.ranks, 2);
  EXPECT_EQ(pinned.cores, 8);
  EXPECT_EQ(machine_share({"a", "b"}, {}).ranks, 0);      // not recorded
  EXPECT_EQ(machine_share({"a", "b"}, {"0"}).cores, 0);   // does not match the ranks
  EXPECT_EQ(machine_share({"a"}, {""}).cores, 0);
  // This process's machine id: the kernel's boot id (or the hostname), never empty, and the
  // same on every call.
  EXPECT_FALSE(machine_id().empty());
  EXPECT_EQ(machine_id(), machine_id());
}
