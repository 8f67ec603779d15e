// gradsync/netmodel/collectives.cpp — per-algorithm step schedules and their costs.
//
// Each algorithm is a sequence of steps. A step is described by its *shape* (does it have
// messages inside a node, between nodes, and how many flows share the busiest NIC) and
// its message size; the step costs the slowest of its messages (see collectives.hpp). The
// shapes of the distance-based algorithms (rd, rabenseifner, tree) come from walking
// their partner rule over the node-major rank layout once per (nodes, ranks_per_node);
// they are cached, so a grid of thousands of node counts stays fast.
#include "netmodel/collectives.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "core/error.hpp"
#include "netmodel/nccl_tuning.hpp"
#include "plan/algos.hpp"

namespace gradsync::netmodel {

Op parse_op(const std::string& name) {
  if (name == "allreduce") return Op::Allreduce;
  if (name == "allgather") return Op::Allgather;
  if (name == "reducescatter" || name == "reduce_scatter") return Op::ReduceScatter;
  if (name == "alltoall") return Op::Alltoall;
  if (name == "broadcast" || name == "bcast") return Op::Broadcast;
  if (name == "pingpong") return Op::Pingpong;
  if (name == "sendrecv") return Op::Sendrecv;
  throw UsageError("unknown collective op '" + name +
                   "' (known: allreduce, allgather, reducescatter, alltoall, broadcast, pingpong, sendrecv)");
}

const char* op_name(Op op) {
  switch (op) {
    case Op::Allreduce: return "allreduce";
    case Op::Allgather: return "allgather";
    case Op::ReduceScatter: return "reducescatter";
    case Op::Alltoall: return "alltoall";
    case Op::Broadcast: return "broadcast";
    case Op::Pingpong: return "pingpong";
    case Op::Sendrecv: return "sendrecv";
  }
  return "?";
}

// The runtime's names (shared: runtime/plan/algos.hpp), then the model's own.
const std::vector<std::string>& algo_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v = plan::allreduce_names();
    v.emplace_back("dbtree");
    v.emplace_back("nccl");
    return v;
  }();
  return names;
}

void check_algo_name(const std::string& name) {
  for (const auto& n : algo_names())
    if (n == name) return;
  std::string all;
  for (const auto& n : algo_names()) all += (all.empty() ? "" : ", ") + n;
  throw UsageError("unknown algorithm '" + name + "' (known: " + all + ")");
}

// "auto" and "mpi" are decided by the runtime's rule (runtime/plan/algos.hpp), with the
// topology: auto runs hier on several nodes of several ranks each.
std::string resolve_algo(const std::string& algo, Op op, double bytes, const Topology& topo) {
  if (op != Op::Allreduce) return algo;
  const auto b = static_cast<std::uint64_t>(std::llround(std::max(0.0, bytes)));
  // The model assumes a shared window on one node (the runtime's shm is available there).
  return plan::resolve_allreduce(algo, b, plan::Shape{topo.nodes, topo.ranks_per_node, true, true});
}

double busbw_factor(Op op, int p) {
  const double pp = p;
  switch (op) {
    case Op::Allreduce: return p > 1 ? 2 * (pp - 1) / pp : 1;
    case Op::Allgather:
    case Op::ReduceScatter:
    case Op::Alltoall: return p > 1 ? (pp - 1) / pp : 1;
    default: return 1;
  }
}

namespace {

// ---- step shapes ---------------------------------------------------------------------------

struct Shape {
  bool intra = false, inter = false;
  int share = 1;           // flows on the busiest NIC, one direction
  bool both_ways = false;  // some rank sends and receives in this step (the duplex bandwidth applies)
  int active = 1;          // ranks of the busiest node that send or receive (Level::step_share)
};

// Accumulates the flows of one step.
class ShapeBuilder {
 public:
  ShapeBuilder(int nodes, int g)
      : g_(g), out_(nodes, 0), in_(nodes, 0), busy_(nodes, 0), sends_(nodes * g, 0), recvs_(nodes * g, 0) {}
  void flow(int src, int dst) {
    for (int r : {src, dst})
      if (!sends_[r] && !recvs_[r]) s_.active = std::max(s_.active, ++busy_[r / g_]);
    sends_[src] = recvs_[dst] = 1;
    if (recvs_[src] || sends_[dst]) s_.both_ways = true;
    const int a = src / g_, b = dst / g_;
    if (a == b) {
      s_.intra = true;
      return;
    }
    s_.inter = true;
    s_.share = std::max({s_.share, ++out_[a], ++in_[b]});
  }
  Shape done() {
    Shape s = s_;
    s_ = Shape{};
    std::fill(out_.begin(), out_.end(), 0);
    std::fill(in_.begin(), in_.end(), 0);
    std::fill(busy_.begin(), busy_.end(), 0);
    std::fill(sends_.begin(), sends_.end(), 0);
    std::fill(recvs_.begin(), recvs_.end(), 0);
    return s;
  }

 private:
  int g_;
  std::vector<int> out_, in_, busy_;  // per node: flows out, flows in, ranks taking part
  std::vector<char> sends_, recvs_;    // per rank, this step
  Shape s_;
};

int floor_pow2(int p) {
  int q = 1;
  while (q * 2 <= p) q *= 2;
  return q;
}

// A schedule built once per (nodes, ranks per node) and thread: `build()` on the first
// call. Each call site's lambda is its own type, hence its own cache.
template <class Build>
const auto& memo_schedule(int nodes, int g, Build build) {
  thread_local std::map<std::pair<int, int>, decltype(build())> cache;
  auto it = cache.find({nodes, g});
  if (it == cache.end()) it = cache.emplace(std::make_pair(nodes, g), build()).first;
  return it->second;
}

// rd / rabenseifner: pre step, core steps by distance 1, 2, 4, ..., post step.
struct XorSchedule {
  int rem = 0;      // p - p'
  Shape pre, post;  // only when rem > 0
  std::vector<Shape> core;  // index k: distance 2^k
};

const XorSchedule& xor_schedule(int nodes, int g) {
  return memo_schedule(nodes, g, [nodes, g] {
    const int p = nodes * g, pp = floor_pow2(p), rem = p - pp;
    XorSchedule s;
    s.rem = rem;
    ShapeBuilder b(nodes, g);
    if (rem > 0) {
      for (int i = 0; i < rem; ++i) b.flow(2 * i, 2 * i + 1);
      s.pre = b.done();
      for (int i = 0; i < rem; ++i) b.flow(2 * i + 1, 2 * i);
      s.post = b.done();
    }
    auto real = [rem](int q) { return q < rem ? 2 * q + 1 : q + rem; };
    for (int d = 1; d < pp; d *= 2) {
      for (int q = 0; q < pp; ++q) b.flow(real(q), real(q ^ d));
      s.core.push_back(b.done());
    }
    return s;
  });
}

// Binomial tree rooted at 0: reduce steps (distance 1, 2, ...), broadcast is the mirror.
const std::vector<Shape>& tree_schedule(int nodes, int g) {
  return memo_schedule(nodes, g, [nodes, g] {
    const int p = nodes * g;
    std::vector<Shape> steps;
    ShapeBuilder b(nodes, g);
    for (int d = 1; d < p; d *= 2) {
      for (int r = d; r < p; r += 2 * d) b.flow(r, r - d);
      steps.push_back(b.done());
    }
    return steps;
  });
}

// Pairwise alltoall: step k sends to (r + k) mod p.
const std::vector<Shape>& alltoall_schedule(int nodes, int g) {
  return memo_schedule(nodes, g, [nodes, g] {
    const int p = nodes * g;
    std::vector<Shape> steps;
    ShapeBuilder b(nodes, g);
    for (int k = 1; k < p; ++k) {
      // Every node sees the same pattern (rotation): node 0's senders give the NIC load.
      for (int j = 0; j < g; ++j) b.flow(j, (j + k) % p);
      Shape s = b.done();
      s.both_ways = true;  // every rank also receives from (r - k) mod p
      s.active = g;        // and every rank of every node takes part
      steps.push_back(s);
    }
    return steps;
  });
}

// ---- step costs ------------------------------------------------------------------------------

// One level's time for a step sending m bytes per flow and reducing `reduce` x m bytes
// (reduce is 0 or 1), with optional chunk pipelining (see collectives.hpp). both_ways:
// ranks receive while they send (the level's duplex bandwidth, fabric.hpp). cpu: the CPU
// share factor of the step's busy ranks (Level::step_share), applied to the reduction and,
// on the intra level (copies by the ranks' cores), to the transfer. between_nodes: the
// inter level (chunks share the network latency and overlap their reductions).
double level_step(const Level& l, double m, double reduce, int share, int channels, double chunk, bool both_ways,
                  double cpu_copy, double cpu_reduce, bool between_nodes) {
  if (m <= 0) return 0;
  if (chunk <= 0 || chunk >= m)
    return l.alpha(m) + cpu_copy * m / l.flow_bw(m, share, channels, both_ways) + cpu_reduce * reduce * l.reduce_s(m);
  const double k = std::ceil(m / chunk);
  const double c = m / k;
  const double send = cpu_copy * c / l.flow_bw(c, share, channels, both_ways);
  const double red = cpu_reduce * reduce * l.reduce_s(c);
  // Between nodes the runtime keeps W = pipeline_slots(chunk) chunks in flight per peer
  // (plan/algos.hpp): the first chunk pays the whole alpha, each further one 1/W of it (W
  // messages share one network latency), so 32 KiB chunks with 1 MiB in flight cost the
  // link's rate, not alpha per chunk. On one node (shared memory) alpha is the ranks' own
  // per-message work (matching, the single-copy handshake), done by the same cores that
  // copy: every chunk pays it (with the window there too, the flagship's sweep fitted a
  // 1.2 ms alpha to its out-of-cache regime and its runs' error went 2.8 -> 6.4%).
  const double window =
      between_nodes ? static_cast<double>(plan::pipeline_slots(static_cast<std::size_t>(chunk))) : 1.0;
  // On one node where the ranks' own cores copy (cores_per_node > 0, fabric.hpp's CPU share:
  // shared memory on a host) a rank moves a chunk and reduces the one before on the same
  // core, and the MPI library progresses the copy only inside the rank's MPI calls, i.e.
  // between its reductions, so the chunks' transfers and reductions add up. A network (or a
  // GPU's copy engines) moves the next chunk while the core reduces: only the longer of the
  // two is paid per chunk.
  if (!between_nodes && l.cores_per_node > 0) return (1 + (k - 1) / window) * l.alpha(c) + k * (send + red);
  return (1 + (k - 1) / window) * l.alpha(c) + k * std::max(send, red) + std::min(send, red);
}

double step(const Fabric& f, const Shape& s, double m, double reduce, int channels = 1, double chunk = 0) {
  double t = 0;
  const double cpu = f.step_share(s.active);
  if (s.intra) t = level_step(f.intra, m, reduce, 1, channels, chunk, s.both_ways, cpu, cpu, false);
  if (s.inter) t = std::max(t, level_step(f.inter, m, reduce, s.share, channels, chunk, s.both_ways, 1, cpu, true));
  return t;
}

// Ring neighbour steps: one flow per NIC direction; every rank sends and receives.
Shape ring_shape(const Topology& t) {
  Shape s;
  s.both_ways = t.ranks() > 1;
  s.active = t.ranks_per_node;
  if (t.nodes > 1) s.inter = true;
  if (t.ranks_per_node > 1) s.intra = true;
  if (t.nodes == 1) s.intra = true;
  return s;
}

double ring_allreduce(const Fabric& f, const Topology& t, double n, const CollOptions& o) {
  const int p = t.ranks();
  if (p <= 1) return 0;
  const Shape s = ring_shape(t);
  const double m = n / p;
  return (p - 1) * step(f, s, m, 1, o.channels, o.chunk_bytes) + (p - 1) * step(f, s, m, 0, o.channels, o.chunk_bytes);
}

double xor_allreduce(const Fabric& f, const Topology& t, double n, bool rabenseifner) {
  const int p = t.ranks();
  if (p <= 1) return 0;
  const XorSchedule& x = xor_schedule(t.nodes, t.ranks_per_node);
  double total = 0;
  if (x.rem > 0) total += step(f, x.pre, n, 1);
  if (!rabenseifner) {
    for (const Shape& s : x.core) total += step(f, s, n, 1);
  } else {
    double m = n;
    for (const Shape& s : x.core) {  // recursive halving: distance 1 carries n/2
      m /= 2;
      total += step(f, s, m, 1);
    }
    for (auto it = x.core.rbegin(); it != x.core.rend(); ++it) {  // recursive doubling
      total += step(f, *it, m, 0);
      m *= 2;
    }
  }
  if (x.rem > 0) total += step(f, x.post, n, 0);
  return total;
}

double tree_allreduce(const Fabric& f, const Topology& t, double n) {
  double total = 0;
  for (const Shape& s : tree_schedule(t.nodes, t.ranks_per_node)) total += step(f, s, n, 1) + step(f, s, n, 0);
  return total;
}

double dbtree_allreduce(const Fabric& f, const Topology& t, double n, const CollOptions& o) {
  const int p = t.ranks();
  if (p <= 1) return 0;
  const double chunk = o.chunk_bytes > 0 ? o.chunk_bytes : 128.0 * 1024;
  const double half = n / 2;
  const double k = std::max(1.0, std::ceil(half / chunk));
  const double c = half / k;
  const double depth = std::ceil(std::log2(static_cast<double>(p)));
  Shape s = ring_shape(t);
  if (s.inter) s.share = 2;  // both trees cross each NIC
  const double cpu = f.step_share(s.active);
  auto hop = [&](double reduce) {
    double h = 0;
    if (s.intra) h = f.intra.alpha(c) + cpu * (2 * c / f.intra.flow_bw(c, 1, o.channels) + reduce * f.intra.reduce_s(c));
    if (s.inter)
      h = std::max(h, f.inter.alpha(c) + c / f.inter.flow_bw(c, s.share, o.channels) + cpu * reduce * f.inter.reduce_s(c));
    return h;
  };
  return (depth + k - 1) * (hop(1) + hop(0));
}

// shm (runtime/algos/shm.cpp) on one node of g ranks: rounds of R bytes (--chunk-bytes,
// default 4 MiB), each: copy-in of (g-1)/g of the round, one sync, the owner sums its part
// reading g copies, one sync, copy-out of (g-1)/g. Copies run at the intra level's
// bandwidth, the sum at its gamma, each sync costs one intra alpha:
//   T = 2 ceil(n/R) a + 2 (g-1)/g n / B + (g-1)/g n g_reduce.
// On registered buffers from kShmZeroCopyMinBytes on (CollOptions::registered): one pass
// over the whole vector, no copy-in; the owner sums its part straight from the peers'
// buffers, then copies the other parts out of theirs; three syncs (where the buffers are,
// after the sums, before returning). Both paths are bound by the memory traffic of the
// ranks' copies and sums, which the rounds' terms above price; per rank the rounds move
// (5 - 2/g) n bytes (copy-in and copy-out 2 (g-1)/g n each, the sums' reads n and their
// two writes of n/g, into the receive buffer and the window), the registered path
// (3 - 1/g) n (reads n, one write of n/g, copy-out 2 (g-1)/g n):
//   T = 3 a + (3 - 1/g) / (5 - 2/g) x [2 (g-1)/g n / B + (g-1)/g n g_reduce].
// (Pricing its one copy at B and its sums at gamma instead came out 13-29% slow on the
// 2-core host: plain loads and stores beat the transport's bandwidth the sweeps fit.)
// Several nodes: the runtime falls back to ring.
constexpr double kShmRoundBytes = static_cast<double>(plan::kShmRoundBytes);
// The runtime's rule (algos/shm.cpp): registered buffers from kShmZeroCopyMinBytes on.
bool shm_in_place(double n, const CollOptions& o) {
  return o.registered && n >= static_cast<double>(plan::kShmZeroCopyMinBytes);
}
double shm_allreduce(const Fabric& f, const Topology& t, double n, const CollOptions& o) {
  const int g = t.ranks_per_node;
  if (t.nodes > 1) return ring_allreduce(f, t, n, o);
  if (g <= 1) return 0;
  const double round = o.chunk_bytes > 0 ? o.chunk_bytes : kShmRoundBytes;
  const double rounds = std::max(1.0, std::ceil(n / round));
  const double share = (g - 1.0) / g;
  // Every rank copies and sums at once. The node's fair share, not a step's ceil: a rank
  // waiting in a sync yields at once when ranks outnumber cores (comm/mpi_comm.cpp), so the
  // ranks interleave finely; 3 ranks on 2 cores measured within -5..+10% of 1.5x at
  // 1-16 MiB and 20-49% under 2x (2026-12-06, netmodel/README.md).
  const double cpu = f.cpu_share(g);
  const double key = std::min(n, round);
  const double traffic = cpu * (2 * share * n / f.intra.bw(key) + share * f.intra.reduce_s(n));
  if (shm_in_place(n, o)) return 3 * f.intra.alpha(key) + (3 - 1.0 / g) / (5 - 2.0 / g) * traffic;
  return 2 * rounds * f.intra.alpha(key) + traffic;
}

// hier (runtime/algos/hier.cpp) on nn nodes of g ranks: the node's shm engine with the
// inter-node ring as its hook. One shm round of the whole vector (with a hook the engine
// runs one round; the buckets are registered with the world's communicator, not the node's,
// so it copies in): copy-in, each rank sums its part, the hook all-reduces that part (n/g)
// on a ring over the nodes (the g local ranks' rings at once, sharing the NIC; the inter
// chunk), copy-out. So the intra part is shm_allreduce's with one round (two syncs), and the
// inter chunk, which small chunks between nodes need, never prices a node-local step:
// before 2026-12-06 the model ran node-local rings in it (32 KiB chunks over TCP: ResNet-50
// on 2 nodes of 8 ranks over tcp-10g was predicted 160.2 ms a step by default, 133.3 ms with
// 4 MiB chunks).
double hier_allreduce(const Fabric& f, const Topology& t, double n, const CollOptions& o) {
  const int g = t.ranks_per_node, nn = t.nodes;
  if (nn == 1 || g == 1) return ring_allreduce(f, t, n, o);
  CollOptions one_round = o;
  one_round.chunk_bytes = n;
  one_round.registered = false;
  const double node = shm_allreduce(f, Topology{1, g}, n, one_round);
  Shape inter;
  inter.inter = true;
  inter.both_ways = true;
  inter.active = g;
  inter.share = g;  // the G local ranks run their inter-node rings at once
  const double m = n / g / nn;
  return node +
         (nn - 1) * (step(f, inter, m, 1, o.channels, o.chunk_bytes) + step(f, inter, m, 0, o.channels, o.chunk_bytes));
}

double allreduce(const Fabric& f, const std::string& algo, const Topology& t, double n, const CollOptions& o) {
  if (algo == "ring") return ring_allreduce(f, t, n, o);
  if (algo == "rd") return xor_allreduce(f, t, n, false);
  if (algo == "rabenseifner") return xor_allreduce(f, t, n, true);
  if (algo == "tree") return tree_allreduce(f, t, n);
  if (algo == "dbtree") return dbtree_allreduce(f, t, n, o);
  if (algo == "hier") return hier_allreduce(f, t, n, o);
  if (algo == "shm") return shm_allreduce(f, t, n, o);
  check_algo_name(algo);
  throw Error("collective_time: algorithm '" + algo + "' was not resolved");
}

double broadcast(const Fabric& f, const Topology& t, double n, const CollOptions& o) {
  const int p = t.ranks();
  if (p <= 1) return 0;
  const auto& steps = tree_schedule(t.nodes, t.ranks_per_node);
  double binomial = 0, scatter = 0;
  double m = n;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {  // broadcast: far steps first
    binomial += step(f, *it, n, 0);
    m /= 2;
    scatter += step(f, *it, m, 0);
  }
  scatter += (p - 1) * step(f, ring_shape(t), n / p, 0, o.channels, o.chunk_bytes);
  return std::min(binomial, scatter);
}

}  // namespace

std::string resolve_algo_on(const Fabric& f, const std::string& algo, Op op, double bytes, const Topology& topo) {
  if (algo != "nccl") return resolve_algo(algo, op, bytes, topo);
  const NcclChoice c = nccl_choose(f, op, bytes, topo);
  return "nccl:" + c.best.algo + "/" + c.best.proto;
}

double nccl_collective_time(const Fabric& f, Op op, const Topology& t, double n, const CollOptions& o) {
  if (op == Op::Pingpong) return collective_time(f, op, "ring", t, n, o);
  // NCCL spreads its channels over the node's NICs (rails): the ring's inter flow uses
  // them all. The ring cost on the fabric x NCCL's own tree-over-ring gain (nccl_tuning.hpp).
  CollOptions ro = o;
  ro.channels = std::max(o.channels, f.inter.nics_per_node);
  return nccl_choose(f, op, n, t).scale() * collective_time(f, op, "ring", t, n, ro);
}

double node_working_set(Op op, const std::string& algo, const Topology& t, double n, const CollOptions& o) {
  const double p = t.ranks(), g = t.ranks_per_node;
  double per_rank = 0;
  switch (op) {
    case Op::Allreduce: {
      double scratch = 0;
      if (algo == "rd" || algo == "rabenseifner") scratch = n;
      else if (algo == "hier") scratch = n;  // its shm round is the whole vector (hier_allreduce)
      else if (algo == "shm" && shm_in_place(n, o)) scratch = 0;
      else if (algo == "shm") scratch = std::min(n, o.chunk_bytes > 0 ? o.chunk_bytes : kShmRoundBytes);
      else if (algo != "tree" && algo != "dbtree") scratch = n / p;  // ring, nccl, mpi (ring-like)
      per_rank = 2 * n + scratch;
      break;
    }
    case Op::Allgather: per_rank = n + n / p; break;
    case Op::ReduceScatter: per_rank = n + 2 * n / p; break;
    case Op::Alltoall: per_rank = 2 * n; break;
    case Op::Broadcast: per_rank = n; break;
    case Op::Pingpong:
    case Op::Sendrecv: per_rank = 2 * n; break;
  }
  return per_rank * (op == Op::Pingpong ? std::min(2.0, g) : g);
}

double collective_time(const Fabric& f, Op op, const std::string& algo_in, const Topology& t, double n,
                       const CollOptions& o) {
  GS_USAGE_CHECK(t.nodes >= 1 && t.ranks_per_node >= 1, "collective: nodes and ranks per node must be >= 1");
  GS_USAGE_CHECK(n >= 0, "collective: bytes must be >= 0");
  const int p = t.ranks();
  if (n == 0) return 0;
  if (f.intra.regime_key == RegimeKey::WorkingSet || f.inter.regime_key == RegimeKey::WorkingSet) {
    // Working-set regimes: every step of this collective runs in the regime of its
    // buffers' footprint on the node (fabric.hpp), whatever its message size.
    const std::string a = algo_in == "nccl" ? "ring" : resolve_algo(algo_in, op, n, t);
    const double ws = node_working_set(op, a, t, n, o);
    Fabric g;  // the levels only: collective costs do not read the names
    g.intra = f.intra.at_working_set(ws);
    g.inter = f.inter.at_working_set(ws);
    return collective_time(g, op, algo_in, t, n, o);
  }
  if (o.reduce_dtype != DType::F32) {  // 16-bit sums: the levels at that type's reduction rate
    Fabric g = f;
    g.intra.gamma_Bps = f.intra.gamma(o.reduce_dtype);
    g.inter.gamma_Bps = f.inter.gamma(o.reduce_dtype);
    CollOptions o32 = o;
    o32.reduce_dtype = DType::F32;
    return collective_time(g, op, algo_in, t, n, o32);
  }
  if (algo_in == "nccl") return nccl_collective_time(f, op, t, n, o);
  switch (op) {
    case Op::Allreduce: return allreduce(f, resolve_algo(algo_in, op, n, t), t, n, o);
    case Op::Allgather: return p <= 1 ? 0 : (p - 1) * step(f, ring_shape(t), n / p, 0, o.channels, o.chunk_bytes);
    case Op::ReduceScatter:
      return p <= 1 ? 0 : (p - 1) * step(f, ring_shape(t), n / p, 1, o.channels, o.chunk_bytes);
    case Op::Alltoall: {
      double total = 0;
      for (const Shape& s : alltoall_schedule(t.nodes, t.ranks_per_node)) total += step(f, s, n / p, 0, o.channels);
      return total;
    }
    case Op::Broadcast: return broadcast(f, t, n, o);
    case Op::Pingpong: {  // two ranks, one message at a time: at most 2 busy on a node
      const Level& l = t.nodes > 1 ? f.inter : f.intra;
      return t.nodes > 1 ? l.p2p_s(n, 1, o.channels)
                         : l.alpha(n) + f.step_share(2) * n / l.flow_bw(n, 1, o.channels);
    }
    case Op::Sendrecv: return p <= 1 ? 0 : step(f, ring_shape(t), n, 0, o.channels);  // one ring step, both ways
  }
  return 0;
}

}  // namespace gradsync::netmodel
