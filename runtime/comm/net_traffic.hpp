// gradsync/comm/net_traffic.hpp — per-interface bytes of a measured run, from every rank.
//
// Construct the meter where the measured work starts (every rank reads its host's
// interface counters); gather() after it ends is collective: each rank's deltas, and its
// host's TCP congestion control, go to every rank (allgather), rank 0 writes them
// (core/netif.hpp: write_net_traffic). Used by gradsync-bench and gradsync-train alike.
#pragma once

#include <string>

#include "comm/communicator.hpp"
#include "core/netif.hpp"

namespace gradsync {

class NetTrafficMeter {
 public:
  NetTrafficMeter() : start_(read_interface_bytes()) {}

  // Collective over `comm`: the deltas since construction of every rank, in rank order.
  NetTraffic gather(Communicator& comm, std::string window) const {
    const std::string mine = pack(bytes_since(start_, read_interface_bytes()));
    std::vector<IfSnapshot> all;
    for (const std::string& s : comm.allgather_strings(mine)) all.push_back(unpack_if_snapshot(s));
    return merge_net_traffic(all, std::move(window), comm.allgather_strings(read_tcp_congestion_control()));
  }

 private:
  IfSnapshot start_;
};

}  // namespace gradsync
