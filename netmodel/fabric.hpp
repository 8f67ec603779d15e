// gradsync/netmodel/fabric.hpp — fabric profiles: what one message costs on each level.
//
// A fabric has two levels: `intra` (between ranks of one node: NVLink, PCIe, shared
// memory) and `inter` (between nodes: TCP, RoCE, InfiniBand). A point-to-point message of
// m bytes on a level costs (Hockney's alpha-beta model, per size regime):
//
//     t(m) = alpha_r + m / bw_eff_r            (r = the regime that m falls into)
//     bw_eff_r = min(bw_r, connections * conn_bw)   when a per-connection cap is given
//
// `connections` is how many sockets/queue pairs carry one peer-to-peer stream (NCCL:
// NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD; Open MPI: btl_tcp_links). A single TCP
// stream is CPU-bound well below line rate on fast links, which is why more sockets help
// (MACHINE-NOTES: MPI_Sendrecv both ways 58.8 MB/s with one link, 108.7 MB/s with two).
// When s flows share a NIC (s ranks of a node talking off-node at once), each gets
// min(bw, s * connections * conn_bw) / s.
//
// gamma is the reduction throughput (bytes of input reduced per second, the memory
// traffic of reading two operands and writing one): reducing r bytes costs r / gamma.
// gamma = +inf (0 in files means "absent") makes the model the plain Hockney formula.
// gamma is for fp32 elements; sums of 16-bit elements may run at their own rate per byte
// (gamma_fp16_GBps, gamma_bf16_GBps; absent: gamma's). A CPU that adds halves converts each
// element: gloo's all-reduce of 4 MiB of fp16 took 1.5x the time of 4 MiB of fp32 here
// (2026-12-02). Collectives take the element type from CollOptions::reduce_dtype.
//
// Token-bucket shaping (burst_bytes > 0; inter level only): the link is a shaper, as a
// Linux tbf qdisc, a cloud VM's burstable network allowance or a policed port. bw is
// the sustained rate; the bytes a collective finds tokens for (up to burst_bytes) pass at
// peak_bw (default: unlimited, i.e. only alpha is paid), the rest at bw, and tokens refill
// at bw. A back-to-back benchmark loop sees bw once the bucket is drained; a training step
// finds the bucket refilled by the compute between steps (fully when its traffic per step
// is below bw x step time). timeline.hpp says how a step spends the tokens.
//
// Both ways at once (duplex): a rank that sends and receives in the same step (a ring
// step, a recursive-doubling exchange, sendrecv) may get less than bw per direction:
// shared memory copies compete for one memory system, a TCP stack serves both directions
// from one core, Open MPI's rendezvous stalls. `duplex` = the per-direction bandwidth in
// such steps over the one-way bandwidth (1: full duplex, 0.5: the two directions share the
// link). Per level, and per regime (a regime without its own takes the level's). Steps
// that only send or only receive (ping-pong, binomial tree steps, the pre/post steps of
// non-powers of two) use bw. calibrate fits it from sendrecv / ring sweeps next to
// ping-pong (both-ways bandwidth as its own unknown).
//
// Contention with compute: communication that runs while backward computes on the same
// host (the reducer's bucket all-reduces under overlap) takes `contention` times as long
// as alone (>= 1 when compute steals cycles, memory bandwidth or PCIe from the copies; 1:
// none). Per level; the step simulator (timeline.hpp) applies it to the part of a
// bucket's collectives that falls inside backward. `contention_us` adds a fixed cost to each
// collective that starts inside backward: with more busy threads than cores, every message
// a rank waits for also waits for the scheduler to run its thread again, so a small
// all-reduce under load costs milliseconds, not a multiple of its microseconds. calibrate
// fits both, time = contention_us + contention x time alone, from sweeps measured while the
// host computes (gradsync-bench / the torch bench with --busy-threads).
//
// CPU share (cores_per_node > 0): copies over shared memory and reductions are work of the
// ranks' own cores. When a step keeps more ranks of a node busy than the node has cores
// (`mpirun --oversubscribe`, a job given fewer CPUs than tasks), each rank gets
// cores / active of a core, and the step's reductions (both levels) and intra-level copies
// take active / cores times as long. Alpha is unchanged. Steps where fewer ranks are busy —
// a ping-pong, the fold and unfold of recursive doubling on 3 ranks — run at full speed.
// calibrate takes it from the bench files (`cores_per_node`, written by gradsync-bench and
// gradsync-train from each rank's CPU affinity); 0 (absent) means enough cores.
//
// Size regimes make alpha and bw piecewise in the message size (eager vs rendezvous,
// protocol switches): regime i covers sizes <= up_to_bytes[i]; the last is unbounded.
// A level's regimes may instead be keyed by the collective's working set on a node
// (`regimes_by = "working_set"`): the bytes its ranks' buffers span there (input, output
// and the algorithm's scratch, times the ranks of the node; collectives.hpp,
// node_working_set). That is the key of a cache: on shared memory the copies slow down
// several-fold once the buffers of all ranks leave the last-level cache, which a 2-rank
// sendrecv of 8 MiB does (4 x 8 MiB) and one of 4 MiB does not, while a ring all-reduce
// leaves it already at 4 MiB (2 x (4 + 4 + 2) MiB). With message-size regimes no one
// breakpoint holds both; calibrate tries both keys and keeps the better fit. A working-set
// regime may have its own reduction rate (gamma_GBps): out of cache a sum reads two
// operands from memory and writes one (this host, 2 ranks: ~2.6 GB/s past the cache
// where the same sums ran at 12 GB/s in it).
//
// File format (TOML; see netmodel/README.md):
//
//   name = "my-cluster"                  # required
//   description = "..."                  # optional
//   source = "gradsync-model calibrate"  # optional: where the numbers come from
//   [inter]                              # at least one of [intra], [inter]; a missing
//   alpha_us = 35.0                      #   level is a copy of the other one
//   bw_GBps = 2.7                        # GB/s = 1e9 bytes/s, as nccl-tests
//   gamma_GBps = 10.0                    # optional, > 0
//   conn_bw_GBps = 1.5                   # optional per-connection cap, > 0
//   connections = 2                      # optional, >= 1 (default 1)
//   burst_bytes = 65536                  # optional, >= 0: token-bucket burst (inter level)
//   peak_bw_GBps = 5.0                   # optional, > 0: rate of the burst (default unlimited)
//   nics_per_node = 8                    # optional, >= 1 (inter level): rails; bw_GBps is per NIC
//   duplex = 0.8                         # optional, > 0: both-ways / one-way bandwidth (default 1)
//   contention = 1.3                     # optional, > 0: slowdown while backward computes (default 1)
//   contention_us = 800                  # optional, >= 0: added per collective started inside backward
//   cores_per_node = 2                   # optional, >= 1: CPUs a node gives its ranks (default: enough)
//   regimes_by = "working_set"           # optional: "message" (default) or "working_set"
//   source = "..."                       # optional, per level
//   [[inter.regime]]                     # optional; overrides alpha/bw per size range
//   up_to_bytes = 65536                  # all but the last regime; increasing
//   alpha_us = 30.0
//   bw_GBps = 2.0
//   duplex = 0.6                         # optional (default: the level's)
//   gamma_GBps = 3.0                     # optional, working-set regimes only (default: the level's)
//   [[inter.regime]]
//   alpha_us = 60.0
//   bw_GBps = 2.7
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/dtype.hpp"

namespace gradsync::netmodel {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// What a level's regimes are keyed by (see above).
enum class RegimeKey { Message, WorkingSet };

struct Regime {
  double up_to_bytes = kInf;  // keys (message size or working set, bytes) <= this use this regime
  double alpha_s = 0;
  double bw_Bps = 0;  // bytes per second
  double duplex_bw_Bps = 0;  // per direction when sending and receiving at once (0: = bw_Bps)
  double gamma_Bps = 0;      // reduction throughput in this regime (0: the level's; working-set regimes only)
};

struct Level {
  std::string source;            // where the numbers come from
  double alpha_s = 0;            // per-message latency
  double bw_Bps = 0;             // link bandwidth, bytes/s
  double gamma_Bps = kInf;       // reduction throughput, bytes/s (inf: free)
  double gamma_fp16_Bps = 0;     // fp16 reductions, bytes/s (0: gamma_Bps)
  double gamma_bf16_Bps = 0;     // bf16 reductions, bytes/s (0: gamma_Bps)
  double conn_bw_Bps = kInf;     // per-connection cap (inf: none)
  int connections = 1;           // connections per peer stream
  double burst_bytes = 0;        // token-bucket burst (0: the link is not a shaper)
  double peak_bw_Bps = kInf;     // rate while tokens last (inf: only alpha is paid)
  int nics_per_node = 1;         // rails (inter level): NICs per node, each with bw_Bps
  double duplex_bw_Bps = 0;      // both-ways bandwidth per direction (0: = bw_Bps, full duplex)
  double contention = 1;         // communication time factor while backward computes
  double contention_alpha_s = 0; // added to each collective that starts while backward computes
  int cores_per_node = 0;        // CPUs of a node for its ranks (0: as many as ranks)
  std::vector<Regime> regimes;   // empty: one regime (alpha_s, bw_Bps, duplex_bw_Bps)
  RegimeKey regime_key = RegimeKey::Message;

  // Regime parameters for a message of m bytes (alpha, raw link bandwidth). On a level
  // keyed by working set, m is taken as the working set: collective_time first flattens
  // such a level to its collective's regime (at_working_set).
  double alpha(double m) const;
  double bw(double m) const;
  // Per-direction bandwidth of a both-ways step (the regime's duplex_bw, else its bw).
  double duplex_bw(double m) const;
  // duplex_bw / bw for a message of m bytes (1: full duplex).
  double duplex(double m) const { return duplex_bw(m) / bw(m); }
  // This level with one regime: the one a collective whose node working set is ws bytes
  // falls into (itself when its regimes are keyed by message size or it has none).
  Level at_working_set(double ws) const;
  // This level with every bandwidth (one-way and both-ways, in every regime) at `bw`, each
  // regime's both-ways ratio kept: a shaped link's peak (timeline.cpp), or an unlimited
  // link (kInf: what is left is the latency and reduction part, calibrate.cpp).
  Level at_bandwidth(double bw) const;
  // Bandwidth one flow gets when `sharing` flows (each with `channels` x connections)
  // share the node's links: min(nics x bw, sharing * channels * connections * conn_bw) /
  // sharing, and one flow uses at most min(channels, nics) NICs (a flow's channels are
  // spread over the rails, as NCCL's; with one NIC this is the single-link formula).
  // both_ways: the step also receives while it sends (duplex_bw replaces bw).
  double flow_bw(double m, int sharing = 1, int channels = 1, bool both_ways = false) const;
  // alpha + m / flow_bw
  double p2p_s(double m, int sharing = 1, int channels = 1) const;
  double reduce_s(double bytes) const { return bytes / gamma_Bps; }
  // The reduction throughput for elements of type t (gamma_Bps unless a 16-bit rate is set).
  double gamma(DType t) const;
  // Sets the 16-bit type t's rate (F16 or BF16; 0: as gamma_Bps).
  void set_gamma16(DType t, double Bps) { (t == DType::BF16 ? gamma_bf16_Bps : gamma_fp16_Bps) = Bps; }
  // How much longer a rank's CPU work takes when `active` ranks of a node are busy at once:
  // active / cores_per_node when that is above 1, else 1.
  double cpu_share(double active) const {
    return cores_per_node > 0 && active > cores_per_node ? active / cores_per_node : 1.0;
  }
  // The same for one step of a collective, which ends when its last busy rank has done its
  // share: ceil(active / cores_per_node). The scheduler runs whole ranks, and a step (or a
  // pipelined chunk, 4 MiB on one node) is shorter than its time slice, so with 3 ranks on
  // 2 cores two copy and sum, then the third while a core idles; fair sharing (1.5x) would
  // need slices much shorter than a step. Measured on this project's 2-core host
  // (2026-12-06): a ring of 3 took 1.75-2.06x its full-speed time at 1-256 MiB (against
  // a ring of 2 at the same size, 2(p-1)/p scaled); fitted with 1.5x, the 3-rank sweeps
  // priced rabenseifner and rd, whose steps keep 2 ranks busy, up to 37% slow. Only 3 and
  // 4 ranks on 2 cores were measured: with many cores the load balancer may move a rank
  // that shares a core onto one that has finished, between ceil and the fair share.
  double step_share(double active) const { return std::ceil(cpu_share(active)); }
};

struct Fabric {
  std::string name, description, source;
  Level intra, inter;
  // The node's CPUs for its ranks: the intra level's cores_per_node, else the inter
  // level's (a file may give it on either); 0: not known.
  int cores_per_node() const { return intra.cores_per_node > 0 ? intra.cores_per_node : inter.cores_per_node; }
  // The node's CPU share for `active` busy threads (Level::cpu_share with cores_per_node()).
  double cpu_share(double active) const {
    return (intra.cores_per_node > 0 ? intra : inter).cpu_share(active);
  }
  // One collective step's (Level::step_share with cores_per_node()).
  double step_share(double active) const { return std::ceil(cpu_share(active)); }
};

// Built-in profiles in a fixed order (tcp-10g, ..., seed-roce).
const std::vector<std::string>& fabric_names();
// Throws UsageError listing the known names.
Fabric builtin_fabric(const std::string& name);
// Built-in name or TOML file path. Errors name the file, line and key.
Fabric load_fabric(const std::string& name_or_path);
// Parse TOML text (`origin` names it in errors).
Fabric parse_fabric(const std::string& text, const std::string& origin);
// A fabric with one level everywhere (collective --alpha-us/--bw-GBps).
Fabric simple_fabric(double alpha_s, double bw_Bps, double gamma_Bps = kInf);
// TOML text that parse_fabric reads back to the same fabric.
std::string fabric_to_toml(const Fabric& f);
// Writes atomically (temp + rename).
void save_fabric(const Fabric& f, const std::string& path);
// UsageError naming the first bad field ("inter.bw_GBps must be > 0, got -1").
void validate_fabric(const Fabric& f);

}  // namespace gradsync::netmodel
