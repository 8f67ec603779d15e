// gradsync/netmodel/collectives.hpp — alpha-beta-gamma costs of the runtime's collectives.
//
// Notation: p = nodes x ranks_per_node ranks, laid out node-major (ranks 0..G-1 on node 0),
// n = bytes per rank (for allgather/alltoall: the total output per rank, as nccl-tests'
// "size"), a = alpha, B = bandwidth, g = 1/gamma (seconds per reduced byte).
//
// Single level (one node, or the --alpha-us/--bw-GBps fabric) and p a power of two, the
// costs are the textbook ones (Thakur, Rabenseifner & Gropp, "Optimization of collective
// communication operations in MPICH", IJHPCA 2005; Chan et al. 2007):
//
//   ring          2(p-1) a + 2(p-1)/p n/B + (p-1)/p n g
//   rd            lg p (a + n/B + n g)
//   rabenseifner  2 lg p a + 2(p-1)/p n/B + (p-1)/p n g
//   tree          binomial reduce + binomial broadcast: 2 lg p (a + n/B) + lg p n g
//   dbtree        NCCL's double binary tree, pipelined in chunks c (default 128 KiB):
//                 2 (lg p + k - 1)(a + c/B' + c g), k = ceil(n/2 / c), B' = B/2 (two trees
//                 share each rank's link)
//   allgather     ring: (p-1)(a + n/p/B)
//   reducescatter ring: (p-1)(a + n/p/B + n/p g)
//   alltoall      pairwise exchange: (p-1)(a + n/p/B)
//   broadcast     min(binomial lg p (a + n/B), scatter + ring allgather (lg p + p - 1) a + 2(p-1)/p n/B)
//
// Non-powers of two (rd, rabenseifner): MPICH's pre/post step — the first 2r ranks
// (r = p - 2^floor(lg p)) pair up, even ranks hand their vector to the odd neighbour
// (a + n/B + n g) before the power-of-two core and get the result back (a + n/B) after it.
// Rabenseifner's halving starts at distance 1 with the largest message (n/2), as MPICH.
//
// Both ways: steps in which a rank sends and receives at once (ring, hier and alltoall
// steps, rd/rabenseifner exchanges, sendrecv) move at the level's duplex bandwidth
// (fabric.hpp); one-way steps (ping-pong, binomial tree steps, the non-power-of-two
// pre/post steps) at bw.
//   sendrecv      one ring step: a + n / B_duplex (send n to rank+1 while receiving n from rank-1)
//
// Two levels. Each step of a flat algorithm takes as long as its slowest message: if a
// step has a message between nodes it costs the inter-node time, and when s ranks of one
// node talk off-node in the same step they share the NIC (each gets bw/s, up to the
// connection cap). So a flat ring across nodes is limited by the inter-node link (one
// flow per NIC, every step), while rd's far steps put all G ranks of a node on the NIC.
//   shm    one node only (else ring, as the runtime): rounds of R bytes (--chunk-bytes,
//          default 4 MiB), each two syncs (intra alpha) around a copy-in and a copy-out of
//          (g-1)/g of the round at the intra bandwidth and the owner's sum:
//          2 ceil(n/R) a + 2 (g-1)/g n/B + (g-1)/g n g.
//   hier   intra ring reduce-scatter (G ranks) + inter ring all-reduce of n/G among the N
//          nodes, G of them at once over each NIC + intra ring all-gather.
//
// Chunk pipelining (--chunk-bytes C, ring and hier): each step's n/p message goes as
// k = ceil(n/p / C) chunks of c (small chunks may fall in another size regime); the
// reduction of one chunk overlaps the transfer of the next: a reduce-scatter step costs
// A a(c) + k max(c/B, c g) + min(c/B, c g). On one node (shared memory) A = k: every chunk
// pays a(c), the ranks' own per-message work. Between nodes W = pipeline_slots(C) chunks are
// in flight per peer (runtime/plan/algos.hpp: 4, or 1 MiB worth of small chunks) and share
// the network latency: A = 1 + (k-1)/W. Until 2026-12-03 every chunk paid a whole a(c)
// there too, which priced the runtime's 32 KiB chunks on the 1 Gbit/s testbed (a = 64 us,
// 262 us per chunk) at 83% of the link where the ring measured 90-95%. On a level whose
// copies are the ranks' own work (the intra level with cores_per_node > 0: a host's shared
// memory) the transfer and the reduction do not overlap, since one core does both and MPI
// progresses the copy only inside the rank's calls: A a(c) + k (c/B + c g), the sum
// calibrate's linear fit assumes too (until 2026-12-04 the prediction took the max there,
// while the fit took the sum). Without --chunk-bytes the message is one chunk (Hockney exactly).
// Channels (--channels h) split n over h concurrent rings; each ring's connections count
// against the per-connection cap (so channels help exactly where one socket cannot fill
// the link).
//
// "mpi" (Open MPI's tuned component): the fixed decision rule of
// ompi_coll_tuned_allreduce_intra_dec_fixed before 4.0 — recursive doubling below 10,000
// bytes, ring above. (4.x uses a larger table measured on its developers' clusters;
// calibrate against algo=mpi bench files when it matters.)
// "auto" and "mpi" resolve by the runtime's own rule (runtime/plan/algos.hpp): auto is, on
// one node with several ranks, "mpi" for n <= 64 KiB and shm above; otherwise rd for
// n <= 64 KiB, hier on several nodes of several ranks each, else rabenseifner up to 1 MiB
// and ring above.
// "nccl": what NCCL would run (nccl_tuning.hpp): the fabric's ring cost (channels spread
// over the node's NICs) x NCCL's model's best time over its best ring time at this size,
// nodes and ranks per node; it needs the fabric, so resolve_algo leaves it as it is and
// resolve_algo_on names the choice ("nccl:tree/LL").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "netmodel/fabric.hpp"

namespace gradsync::netmodel {

enum class Op { Allreduce, Allgather, ReduceScatter, Alltoall, Broadcast, Pingpong, Sendrecv };

// allreduce, allgather, reducescatter|reduce_scatter, alltoall, broadcast, pingpong, sendrecv
Op parse_op(const std::string& name);
const char* op_name(Op op);

struct Topology {
  int nodes = 1;
  int ranks_per_node = 1;
  int ranks() const { return nodes * ranks_per_node; }
};

struct CollOptions {
  double chunk_bytes = 0;  // 0: no pipelining (ring/hier); dbtree uses 128 KiB then
  int channels = 1;
  DType reduce_dtype = DType::F32;  // element type of the sums (Level::gamma)
  // The ranks' buffers are registered shared buffers (gradsync-bench --buffers shared):
  // shm reads them in place from plan::kShmZeroCopyMinBytes on (no copy-in).
  bool registered = false;
};

// Algorithm names: the runtime's (ring, rd, rabenseifner, tree, hier, shm, mpi, auto) plus the
// model's dbtree (NCCL's double binary tree) and nccl (NCCL's own choice).
const std::vector<std::string>& algo_names();
void check_algo_name(const std::string& name);  // UsageError listing the names

// The algorithm "auto" and "mpi" resolve to for this op and size (others: themselves).
std::string resolve_algo(const std::string& algo, Op op, double bytes, const Topology& topo);

// resolve_algo, and for "nccl" NCCL's choice on this fabric: "nccl:ring/Simple".
std::string resolve_algo_on(const Fabric& fabric, const std::string& algo, Op op, double bytes, const Topology& topo);

// Seconds of an "nccl" collective (see above).
double nccl_collective_time(const Fabric& fabric, Op op, const Topology& topo, double bytes, const CollOptions& opt = {});

// Seconds for one collective of `bytes` (per rank, see above) on `fabric`.
double collective_time(const Fabric& fabric, Op op, const std::string& algo, const Topology& topo,
                       double bytes, const CollOptions& opt = {});

// Bytes a collective's buffers span on one node: per rank its input and output (as
// gradsync-bench times it, out of place; ping-pong and sendrecv a send and a receive
// buffer) and the algorithm's scratch (rd and rabenseifner a whole vector, ring n/p per
// step, hier n/G, shm its window round, tree and dbtree only slots), times the ranks of
// the node. The key of working-set regimes (fabric.hpp); `algo` as resolved.
double node_working_set(Op op, const std::string& algo, const Topology& topo, double bytes,
                        const CollOptions& opt = {});

// nccl-tests' bus bandwidth factor: allreduce 2(p-1)/p; allgather, reducescatter,
// alltoall (p-1)/p; broadcast, pingpong and sendrecv 1.
double busbw_factor(Op op, int p);

}  // namespace gradsync::netmodel
