// gradsync/netmodel/nccl_tuning.cpp — NCCL's algorithm/protocol choice (facts and
// source in nccl_tuning.hpp).
#include "netmodel/nccl_tuning.hpp"

#include <algorithm>
#include <array>
#include <cmath>

namespace gradsync::netmodel {

namespace {

enum Algo { kTree = 0, kRing = 1 };
enum Proto { kLL = 0, kLL128 = 1, kSimple = 2 };
enum Hw { kNvlink = 0, kPci = 1, kNet = 2 };

constexpr const char* kAlgoName[2] = {"tree", "ring"};
constexpr const char* kProtoName[3] = {"LL", "LL128", "Simple"};

// Microseconds. [algo][proto], algo 0 = tree, 1 = ring.
constexpr double kBaseLat[2][3] = {{4.4, 4.4, 0.0}, {3.6, 10.0, 8.4}};
// [hw][algo][proto]
constexpr double kHwLat[3][2][3] = {
    {{0.52, 1.2, 28.0}, {0.47, 1.9, 3.4}},  // NVLink
    {{1.0, 1.9, 28.0}, {1.0, 2.5, 5.7}},    // PCI
    {{5.0, 8.5, 50.0}, {2.7, 4.0, 9.6}},    // network
};
// Tree bandwidth correction by log2(bytes / 64), 64 B .. 128 MiB; [proto][i].
constexpr std::array<std::array<double, 22>, 3> kTreeCorrection = {{
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .5, .6, .6, .7, .7, .8, .9, .9, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .5, .5, .6, .6, .7, .8, .9},
}};
constexpr double kNvlinkClassBps = 100e9;  // an intra level this fast is NVLink, not PCIe

int log2i(double v) {
  int l = 0;
  while (v >= 2) {
    v /= 2;
    ++l;
  }
  return l;
}

// Bandwidth of a level at its largest regime.
double peak_bw(const Level& l) { return l.regimes.empty() ? l.bw_Bps : l.regimes.back().bw_Bps; }

}  // namespace

NcclChoice nccl_choose(const Fabric& f, Op op, double bytes, const Topology& topo) {
  const int p = topo.ranks(), N = topo.nodes, G = topo.ranks_per_node;
  NcclChoice out;
  if (p <= 1 || op == Op::Pingpong) {
    out.best = out.best_ring = NcclCandidate{"ring", "Simple", 0, 0, 0};
    return out;
  }
  const bool nvlink = f.intra.bw_Bps >= kNvlinkClassBps && peak_bw(f.intra) >= kNvlinkClassBps;
  const Hw intra_hw = nvlink ? kNvlink : kPci;
  const double B_Bps = N == 1 ? peak_bw(f.intra)
                              : std::min(G > 1 ? peak_bw(f.intra) : kInf,
                                         std::max(1, f.inter.nics_per_node) * peak_bw(f.inter));
  const double B = B_Bps / 1e9;  // GB/s, as NCCL's tables
  int nsteps = p, ninter = N;
  if (op == Op::Allreduce) {
    nsteps = 2 * (p - 1);
    ninter = 2 * (N - 1);
  } else if (op == Op::Allgather || op == Op::ReduceScatter || op == Op::Alltoall) {
    nsteps = p - 1;
    ninter = N - 1;
  }
  const bool ll128_on = nvlink && (G >= 2 || N == 1);
  const double ppn = static_cast<double>(p) / N;
  const int logsize = log2i(bytes / 64);
  for (int a : {kTree, kRing}) {
    if (a == kTree && op != Op::Allreduce) continue;
    for (int pr : {kLL, kLL128, kSimple}) {
      if (pr == kLL128 && !ll128_on) continue;
      double bus = B;
      if (a == kRing && pr == kLL) bus *= (N > 1 || op == Op::Allreduce) ? 1.0 / 4.0 : 1.0 / 3.0;
      if (a == kRing && pr == kLL128) bus *= ppn < 2 ? 0.7 : 0.92;
      if (a == kTree) bus = std::min(bus * 0.9, N > 2 ? 80.0 : 110.0);
      if (a == kTree && pr == kLL) bus *= 1.0 / 3.8;
      if (a == kTree && pr == kLL128) bus *= N == 1 ? 7.0 / 9.0 : 0.915;
      double algbw = bus * (a == kRing ? static_cast<double>(p) / nsteps : 0.5);
      double intra_lat = kHwLat[intra_hw][a][pr];
      const double inter_lat = kHwLat[kNet][a][pr];
      if (N > 1 && pr == kLL) intra_lat *= 1.8;
      double lat = kBaseLat[a][pr];
      if (a == kRing) lat += (nsteps - ninter) * intra_lat + ninter * inter_lat;
      else lat += 2 * ((G - 1) * intra_lat + log2i(N) * inter_lat);
      if (a == kTree && logsize < 22) algbw *= kTreeCorrection[static_cast<std::size_t>(pr)][static_cast<std::size_t>(logsize)];
      if (a == kRing && pr == kSimple && N > 1 && op == Op::Allreduce && bytes >= p / 16.0 * 65536) lat *= 1.9;
      NcclCandidate c;
      c.algo = kAlgoName[a];
      c.proto = kProtoName[pr];
      c.latency_us = lat;
      c.bw_GBps = algbw;
      c.time_us = lat + bytes / (1000.0 * algbw);
      out.all.push_back(c);
      if (out.best.algo.empty() || c.time_us < out.best.time_us) out.best = c;
      if (a == kRing && (out.best_ring.algo.empty() || c.time_us < out.best_ring.time_us)) out.best_ring = c;
    }
  }
  return out;
}

}  // namespace gradsync::netmodel
