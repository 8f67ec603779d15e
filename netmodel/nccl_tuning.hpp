// gradsync/netmodel/nccl_tuning.hpp — "what NCCL would run": a reimplementation of NCCL's
// algorithm and protocol choice (ring or tree; LL, LL128 or Simple) by size, node count
// and ranks per node, used by `--algo nccl`.
//
// Purpose: predict a run that left the choice to NCCL (gradsync-train --backend nccl,
//   every nccl-tests log) with the algorithm NCCL would pick, not a fixed one.
// Approach: NCCL estimates, for every (algorithm, protocol), time = latency + bytes /
//   bandwidth and runs the fastest (src/graph/tuning.cc: ncclTopoTuneModel builds the
//   latency/bandwidth tables, ncclTopoGetAlgoTime applies the size corrections). The
//   constants below are the facts of that file in NVIDIA/nccl at commit 01afd20a (the 2.8
//   series; later releases retuned the numbers and added NVLS, CollNet direct/chain):
//     base latency (us)      tree LL 4.4, LL128 4.4, Simple 0; ring 3.6, 10.0, 8.4
//     per-hop latency (us)   NVLink tree .52/1.2/28, ring .47/1.9/3.4
//                            PCI    tree 1.0/1.9/28,  ring 1.0/2.5/5.7
//                            NET    tree 5.0/8.5/50,  ring 2.7/4.0/9.6
//                            (intra-node LL hops x1.8 when there is more than one node)
//     ring latency  = base + (nsteps - nInterSteps) x intra hop + nInterSteps x net hop,
//                     all-reduce nsteps 2(p-1), nInterSteps 2(N-1); reduce-scatter and
//                     all-gather p-1, N-1; broadcast p, N
//     tree latency  = base + 2 ((p/N - 1) x intra hop + log2(N) x net hop) (all-reduce only)
//     bus bandwidth B (the graph's channels x speed): ring LL x1/4 (x1/3 for a one-node
//                     non-reducing op), LL128 x0.92 (x0.7 with one rank per node), Simple x1;
//                     tree min(0.9 B, 110 GB/s (N <= 2) or 80 GB/s), LL x1/3.8,
//                     LL128 x0.915 (x7/9 on one node)
//     algorithm bandwidth = B x p / nsteps (ring), B / 2 (tree)
//     tree bandwidth x treeCorrectionFactor[proto][log2(bytes / 64)] (0.4 .. 1.0 by size)
//     multi-node ring all-reduce Simple: latency x1.9 once bytes >= p / 16 x 64 KiB
//   LL128 is on only with NVLink inside the node (NCCL enables it on NVLink + Volta/Ampere
//   by default); here: the intra level is NVLink-class (>= 100 GB/s) and there are >= 2
//   ranks per node (or one node).
// What comes from the fabric: B = the ring's bottleneck bandwidth (one node: the intra
//   level; several: min(intra, nics_per_node x inter)), at the largest regime; whether the
//   intra hop is NVLink or PCI (intra bandwidth >= 100 GB/s). NCCL's per-channel caps
//   (ll128MaxBwPerCh x nChannels) are left out: the channel count is not in a fabric.
// What it is used for: collectives.cpp times an `nccl` collective as the fabric's ring
//   cost x (this model's best time / its best ring time): the ring is what the fabric was
//   fitted to (nccl-tests' busbw is the ring's), the ratio adds what NCCL gains by
//   switching to a tree. calibrate fits "nccl" points the same way (calibrate.hpp).
// Cost: 6 candidates, O(1) each.
#pragma once

#include <string>
#include <vector>

#include "netmodel/collectives.hpp"
#include "netmodel/fabric.hpp"

namespace gradsync::netmodel {

struct NcclCandidate {
  std::string algo;   // "ring" | "tree"
  std::string proto;  // "LL" | "LL128" | "Simple"
  double latency_us = 0;
  double bw_GBps = 0;  // algorithm bandwidth after the size corrections
  double time_us = 0;
};

struct NcclChoice {
  NcclCandidate best;       // what NCCL would run
  NcclCandidate best_ring;  // the fastest ring protocol
  std::vector<NcclCandidate> all;
  double scale() const { return best_ring.time_us > 0 ? best.time_us / best_ring.time_us : 1.0; }
};

// NCCL's model for `bytes` of `op` on `topo` with the fabric's bandwidths (see above).
NcclChoice nccl_choose(const Fabric& f, Op op, double bytes, const Topology& topo);

}  // namespace gradsync::netmodel
