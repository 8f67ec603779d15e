// gradsync/netmodel/calibrate.hpp — fitting fabric and compute parameters to measurements.
//
// Fabric (from gradsync-bench files). Every point (op, algorithm, nodes x ranks per node,
// size n, measured time t) is a linear function of the unknowns of one level:
//
//     t = sum_j A_j(n) alpha_j + sum_j Bc_j(n) / bw_j + G(n) / gamma
//
// where j runs over the size regimes and the coefficients are the algorithm's schedule
// (collectives.hpp) evaluated with one unknown set to 1 and the others to 0 — so ring,
// rd, rabenseifner, tree and pingpong sweeps can be mixed. Points from one node fit the
// intra level, points with one rank per node the inter level; ring and nccl points with
// several ranks per node fit the inter level too (see the second calibrate_fabric);
// other mixed-topology points are reported but not fitted. Points from other tools'
// logs (nccl-tests text and -J JSON, gradsync-bench's stdout) come in through
// inputs/nccl_tests.hpp as the same records. The fit minimizes the squared log error (iteratively reweighted
// least squares, rows weighted 1/sqrt(t x predicted), first pass 1/t; Eigen's column-
// pivoting QR), so 8 B and 64 MiB count alike and a fast repeat of a size does not
// outweigh slow ones; a negative alpha is fixed at 0 and the rest re-fitted. Points far
// from the rest are excluded as outliers and named (fit_level in calibrate.cpp).
//
// Regimes: up to five (e.g. eager, rendezvous in the core's L1/L2 caches, in the
// last-level cache, past it: shared memory on a loaded host falls from ~7 GB/s to 1-2 GB/s
// past the last-level cache). Breakpoints are searched over the measured message sizes and
// per-step message sizes (every single breakpoint, then every pair, also when no single one
// paid off, then on the points the outlier rounds kept the best pair and one more, and the
// best triple and one more; each regime needs >= 3 measured sizes and a positive
// bandwidth); a model with one more regime is kept when it cuts the weighted log-error sum
// by a quarter and by more than 1% of the point count. A fit with R^2 < 0.9 or a relative residual
// above 50% is flagged in LevelFit::warnings with the points that miss.
//
// gamma is fitted only when it is identifiable: reduction bytes must not be proportional
// to transferred bytes in every point (ring all-reduce alone: both are (p-1)/p n), so mix
// reduction-heavy runs (rd, tree all-reduce) with pingpong or allgather sweeps.
//
// Refusals (CalibrationError with the reason): fewer than 2 distinct sizes on a level,
// a non-positive fitted bandwidth, no usable points at all.
//
// Compute (from gradsync-train files): per run, median forward_s and backward_s =
// layers x overhead + batch x FLOPs / rate; overhead and rate by least squares.
#pragma once

#include <string>
#include <vector>

#include "core/error.hpp"
#include "models/compute_profile.hpp"
#include "netmodel/collectives.hpp"
#include "netmodel/compress.hpp"
#include "netmodel/fabric.hpp"

namespace gradsync::netmodel {

class CalibrationError : public Error {
 public:
  explicit CalibrationError(const std::string& what) : Error(what) {}
};

struct BenchPoint {
  std::string file;
  Op op = Op::Allreduce;
  std::string algo;  // resolved (algo_used when the file has it)
  Topology topo;
  CollOptions opt;
  double bytes = 0;
  double time_s = 0;  // median over iterations (max over ranks per iteration)
  // Bytes one rank had sent through its link (bus factor x size x iterations, warm-up
  // included) in this file's sweep before this point's median iteration started.
  double link_bytes_before = 0;
  // The sweep evicted the caches before every iteration (--off-cache, file attribute
  // off_cache_bytes > 0): on a shaped link the eviction's tens of milliseconds refill the
  // token bucket, so each iteration starts with a full burst (link_credit_bytes).
  bool off_cache = false;
  // Bytes this point's iterations find tokens for at their start (a shaped inter level and
  // an off-cache sweep: the burst; a ping-pong: min(burst, bytes / 2), the bucket refilling
  // while the reply travels; set by calibrate_fabric): they pass at no link time.
  double link_credit_bytes = 0;
  // NICs of each node the inter-node traffic spreads over (rails; fabric.hpp). Logs of
  // other tools state it (inputs/nccl_tests.hpp); gradsync's own files: 1.
  int nics_per_node = 1;
  // CPUs a node gave its ranks (file attribute cores_per_node, core/cpus.hpp); 0: unknown,
  // taken as enough. Steps with more busy ranks than cores are slowed (Level::cpu_share).
  int cores_per_node = 0;
  // "nccl" points (NCCL chose the algorithm): NCCL's model's best time over its best
  // ring time at this size and shape (nccl_tuning.hpp), set by calibrate_fabric's second
  // pass; the fit treats the point as a ring scaled by it.
  double nccl_scale = 1;
  // The network interface that carried most of the file's traffic (/net: the largest tx,
  // loopback left out) and its MTU; "" and 0 when the file has no /net or no such traffic.
  std::string wire_if;
  int wire_mtu = 0;
  // The ranks' TCP congestion control (/net/tcp_congestion_control; files since 2026-12-05),
  // "" when unknown, "mixed" when the ranks' differ.
  std::string wire_cc;
  // Threads per rank that spun on the CPU during the sweep (file attribute busy_threads,
  // --busy-threads): > 0 measures the collective while the host computes, which fits the
  // level's contention (fabric.hpp), not its alpha and bandwidth.
  int busy_threads = 0;
};

// Payload bytes per byte on the wire of TCP/IPv4 (with timestamps) over Ethernet at this MTU:
// (mtu - 52) / (mtu + 14): 20 IP + 20 TCP + 12 options per segment, a 14-byte Ethernet
// header per frame (what interface counters and a tbf shaper count). 1448/1514 at 1500.
double tcp_payload_per_wire_byte(int mtu);

// Reads a gradsync-bench file (results/README.md). UsageError if it is not one.
std::vector<BenchPoint> read_bench_file(const std::string& path);

// The all-reduces a gradsync-train run measured: one point per bucket (its bytes, the
// median over the steps after warm-up of its end - start), with the run's algorithm,
// topology, chunk and channels. Only runs that all-reduce the bucket as it is (compress
// none, fp32) and with overlap off (with overlap on, the collective shares the host with
// backward's work, which is not the link); other runs give no points and a reason in
// `skipped`. UsageError if the file is not a gradsync-train file.
std::vector<BenchPoint> read_train_collectives(const std::string& path, std::vector<std::string>& skipped);

// Bench or train file, by its `program` attribute.
std::vector<BenchPoint> read_collective_points(const std::string& path, std::vector<std::string>& skipped);

struct PointFit {
  BenchPoint point;
  double predicted_s = 0;
  double rel_residual = 0;  // (predicted - measured) / measured
};

struct LevelFit {
  std::string level;        // "intra" | "inter"
  Level params;
  bool gamma_fitted = false;
  std::string notes;        // what was not determined and why
  double r2 = 0;
  double max_abs_rel_residual = 0;
  std::size_t worst = 0;    // index into points
  std::vector<PointFit> points;
  std::vector<std::string> warnings;  // poor fit (R^2 < kPoorR2 or a residual > kPoorResidual), naming the points
};

inline constexpr double kPoorR2 = 0.9;
inline constexpr double kPoorResidual = 0.5;

struct FabricFit {
  Fabric fabric;
  std::vector<LevelFit> levels;
  std::vector<std::string> skipped;  // points not used, with why
};

// A token-bucket shaper on the inter-node link (fabric.hpp), known from how the link was
// set up (scripts/testbed.sh: tbf burst): not fitted, it is written to the fitted inter
// level, and the points that ran on the burst (link_bytes_before <= burst_bytes: the
// sweep had not yet drained the bucket) are left out of the fit and named in `skipped`.
struct Shaper {
  double burst_bytes = 0;  // 0: no shaper
  double peak_bw_Bps = kInf;
};

// Fits the levels present in the data. `base` fills a level the data do not cover (if
// empty, the fitted level is copied and the description says so).
FabricFit calibrate_fabric(const std::vector<BenchPoint>& points, const std::string& name, const std::string& base = "",
                           const Shaper& shaper = {});
// Multi-level: `intra_given` (a fabric name or file; "" for none) supplies the intra level;
// one-node points are then not fitted. Points with several nodes and several ranks per
// node (ring or nccl runs, e.g. an nccl-tests log of N nodes x 8 GPUs) fit the inter level
// on their own: every ring step is taken as inter-bound (one flow per NIC direction, the
// flow striped over the point's nics_per_node), and the written fabric is checked against
// those points (a warning names the sizes where the intra level is the slower one). With no
// intra data and no --intra, the intra level is the inter one at the node's NIC bandwidth.
FabricFit calibrate_fabric(const std::vector<BenchPoint>& points, const std::string& name, const std::string& base,
                           const Shaper& shaper, const std::string& intra_given);

// Contention with compute (fabric.hpp `contention`): from gradsync-train runs with overlap
// on (compress none, fp32), the buckets whose all-reduce started inside backward (before
// data + forward + backward, medians): one entirely inside took measured / alone as long as
// the fabric predicts alone; one straddling the end gives the factor by the timeline's own
// rule (calibrate.cpp); the factor is the median over those buckets, per level (one node: intra; one rank per node: inter). The fabric should come
// from microbenchmarks or no-overlap runs (what "alone" means). Runs that do not qualify
// are listed in `skipped` with the reason; a level without buckets keeps its factor.
struct ContentionFit {
  Fabric fabric;                      // the input fabric with the fitted factors
  std::vector<std::string> notes;     // per level, in words
  std::vector<std::string> skipped;
  int intra_buckets = 0, inter_buckets = 0;
};
ContentionFit calibrate_contention(const std::vector<std::string>& train_files, const Fabric& fabric);

// Compute profile from train runs of zoo models: forward and backward medians = per-layer
// overhead x layers + FLOPs / rate (relative least squares). When that needs a negative
// overhead (backward slower against forward than its 2x FLOPs), the fit is constrained: no
// overhead, forward and backward each their own rate (profile.backward_efficiency).
// Also the reducer's own work per step and bucket, and the ranks' step-time jitter.
struct ComputeFit {
  models::ComputeProfile profile;
  double overhead_s = 0, flops_per_s = 0;
  double bwd_flops_per_s = 0;  // = flops_per_s unless the constrained fit gave backward its own rate
  double reducer_per_step_s = 0, reducer_per_bucket_s = 0;  // from /steps/reducer_s vs buckets
  // profile.rank_jitter: per run with /ranks/step_time_s and >= 2 ranks, the median over steps
  // of (slowest - mean rank) / E[max of p std normals] / (forward + backward + optimizer);
  // the median over those runs (0 and jitter_runs = 0 when none has the column).
  double rank_jitter = 0;
  int jitter_runs = 0;
  // profile.codec_wait_s / codec_wait_frac: over the buckets with a codec of every run with
  // /buckets/by_rank and >= 2 ranks, (the slowest rank's codec - the ranks' median) / E[max of
  // p std normals] = wait_s + frac x the median codec (medians over steps), least squares
  // with both terms >= 0; wait_buckets = those buckets (0: not fitted).
  double codec_wait_s = 0, codec_wait_frac = 0;
  int wait_buckets = 0;
  double r2 = 0, max_abs_rel_residual = 0;
  std::vector<std::string> used, skipped;
};

ComputeFit calibrate_compute(const std::vector<std::string>& train_files, const std::string& name);

}  // namespace gradsync::netmodel

namespace gradsync::netmodel {

// Kernel rates from gradsync-kernels-bench --benchmark_format=json output. Per kernel
// (fp16/bf16/qsgd/onebit/topk x encode/decode): the median over the sizes of the bench's
// bytes_per_second (fp32 input bytes/s; with repetitions, the median aggregates), and each
// size's rate (by_size, when it measured several) for the working-set rule of KernelRates::rate. PowerSGD:
// FLOPs (encode 4 n m r + 2 n r^2, decode 2 n m r, r = 4) / F + memory passes / B, fitted
// over the square-matrix cases and the ResNet-50 bucket; when that gives a non-positive
// term, FLOPs only with F = the ResNet-50 bucket's effective rate (the squares' median
// without it). Every case's residual goes to notes. UsageError when the file is not a
// Google Benchmark JSON; CalibrationError when it holds none of the kernels.
KernelRates calibrate_kernels(const std::string& json_path, const std::string& name);

}  // namespace gradsync::netmodel
