// gradsync/core/netif.hpp — which network interface carried a run's traffic.
//
// Purpose: a library left to itself may send over a slow NIC or a docker bridge
// (NCCL_SOCKET_IFNAME, Open MPI's btl_tcp_if_include are the knobs). The result file says
// which interfaces a run really used: every rank reads the kernel's byte counters of every
// interface (/sys/class/net/<if>/statistics/{tx,rx}_bytes) before and after the measured
// work; the deltas of all ranks go to rank 0 and into the group /net of the result file.
// Approach: snapshots are sorted (name, tx, rx) lists; a delta keeps every interface that
// exists at the end (traffic zero or not); ranks are merged over the union of names.
// The counters belong to the host (the network namespace), not the process: ranks on one
// host see the same interfaces and count each other's traffic, and anything else the host
// sends in the window counts too. No MPI here; comm/net_traffic.hpp gathers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gradsync {

namespace h5 {
class Writer;
}

struct IfBytes {
  std::string name;       // "eth0", "lo", "docker0"
  std::uint64_t tx = 0;   // bytes sent
  std::uint64_t rx = 0;   // bytes received
  std::int64_t mtu = -1;  // /sys/class/net/<if>/mtu (-1: unreadable)
};
using IfSnapshot = std::vector<IfBytes>;  // sorted by name

// Reads every interface under `sysfs` (default /sys/class/net). An interface whose counters
// cannot be read (it went away meanwhile) is left out; no /sys/class/net gives {}.
IfSnapshot read_interface_bytes(const std::string& sysfs = "/sys/class/net");

// now - start per interface of `now` (one absent at start counts from 0; a counter that went
// backwards, i.e. the interface was re-created, counts from 0 too).
IfSnapshot bytes_since(const IfSnapshot& start, const IfSnapshot& now);

// One line per interface ("name tx rx mtu"), for allgather_strings; unpack throws Error on
// junk (a line without the mtu field reads as mtu -1).
std::string pack(const IfSnapshot& s);
IfSnapshot unpack_if_snapshot(const std::string& text);

// The host's (network namespace's) default TCP congestion control, e.g. "cubic" or "bbr"
// (`file`: /proc/sys/net/ipv4/tcp_congestion_control); "" where it cannot be read. It is
// what an MPI or NCCL socket gets unless the library picks one: BBR, for one, holds a
// connection that has sent without pause for 10 s to 4 packets for 200 ms (PROBE_RTT).
std::string read_tcp_congestion_control(const std::string& file = "/proc/sys/net/ipv4/tcp_congestion_control");

// Every rank's deltas over the union of interface names. tx/rx/mtu are [rank][interface]
// (row-major, nranks x interfaces.size()); -1 where that rank has no such interface.
struct NetTraffic {
  std::vector<std::string> interfaces;  // sorted
  std::vector<std::int64_t> tx, rx, mtu;
  int nranks = 0;
  std::string window;                   // what the counted interval was, for the file
  std::vector<std::string> tcp_congestion_control;  // [rank] each rank's host's; "" unknown

  std::int64_t tx_at(int rank, std::size_t i) const { return tx[static_cast<std::size_t>(rank) * interfaces.size() + i]; }
  std::int64_t rx_at(int rank, std::size_t i) const { return rx[static_cast<std::size_t>(rank) * interfaces.size() + i]; }
};
// `tcp_cc`: each rank's read_tcp_congestion_control(), or {} (then "" for every rank).
NetTraffic merge_net_traffic(const std::vector<IfSnapshot>& per_rank, std::string window,
                             std::vector<std::string> tcp_cc = {});

// Group /net: datasets interface [I], tx_bytes, rx_bytes and mtu [R, I] (int64, -1: absent),
// tcp_congestion_control [R] (string, "": unknown), attributes description and window.
// Written also when nothing was counted (I = 0).
void write_net_traffic(h5::Writer& w, const NetTraffic& t);

// For printing: one line per rank, "eth1 tx 33.6 MB rx 33.6 MB, lo ..." with interfaces of
// zero traffic left out ("no traffic" when all are zero), prefixed "rank R (host)", and
// "; TCP congestion control NAME" where the rank's is known.
std::vector<std::string> net_traffic_lines(const NetTraffic& t, const std::vector<std::string>& hostnames);

}  // namespace gradsync
