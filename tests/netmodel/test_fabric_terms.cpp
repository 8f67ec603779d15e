// gradsync/tests/netmodel/test_fabric_terms.cpp — the fabric's duplex term (both ways at
// once): its file format, which steps use it, and calibrate recovering it from ping-pong
// next to sendrecv and ring sweeps; and the contention term (communication during
// backward) in the step simulator.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "netmodel/calibrate.hpp"
#include "netmodel/collectives.hpp"
#include "netmodel/fabric.hpp"
#include "netmodel/timeline.hpp"

using namespace gradsync;
using namespace gradsync::netmodel;

namespace {

Fabric duplex_fabric(double alpha, double bw, double duplex) {
  Fabric f = simple_fabric(alpha, bw);
  f.name = "duplex";
  f.intra.duplex_bw_Bps = f.inter.duplex_bw_Bps = duplex * bw;
  return f;
}

// Points of `op/algo` on nodes x rpn from `f`, with multiplicative noise.
std::vector<BenchPoint> points(const Fabric& f, const std::string& op, const std::string& algo, int nodes, int rpn,
                               double noise, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> nd(0.0, noise);
  std::vector<BenchPoint> v;
  for (double s = 8; s <= 64.0 * 1024 * 1024; s *= 2) {
    BenchPoint p;
    p.file = op + "-" + algo;
    p.op = parse_op(op);
    p.topo = {nodes, rpn};
    p.algo = resolve_algo(algo, p.op, s, p.topo);
    p.bytes = s;
    p.time_s = collective_time(f, p.op, p.algo, p.topo, s) * (1 + nd(rng));
    v.push_back(p);
  }
  return v;
}

}  // namespace

TEST(Duplex, FileRoundTripAndValidation) {
  const std::string text = R"(
name = "d"
[intra]
alpha_us = 1.0
bw_GBps = 10.0
duplex = 0.5
[inter]
duplex = 0.8
[[inter.regime]]
up_to_bytes = 65536
alpha_us = 2.0
bw_GBps = 1.0
duplex = 0.25
[[inter.regime]]
alpha_us = 20.0
bw_GBps = 2.0
)";
  const Fabric f = parse_fabric(text, "d.toml");
  EXPECT_DOUBLE_EQ(f.intra.duplex(1e6), 0.5);
  EXPECT_DOUBLE_EQ(f.intra.duplex_bw(1e6), 5e9);
  EXPECT_DOUBLE_EQ(f.inter.duplex(1000), 0.25);   // the regime's own
  EXPECT_DOUBLE_EQ(f.inter.duplex(1e6), 0.8);     // the level's
  EXPECT_DOUBLE_EQ(f.inter.flow_bw(1e6, 1, 1, true), 1.6e9);
  EXPECT_DOUBLE_EQ(f.inter.flow_bw(1e6, 1, 1, false), 2e9);
  const Fabric g = parse_fabric(fabric_to_toml(f), "again");
  for (double m : {100.0, 1e6}) {
    EXPECT_NEAR(g.inter.duplex(m), f.inter.duplex(m), 1e-12) << m;
    EXPECT_NEAR(g.intra.duplex(m), f.intra.duplex(m), 1e-12) << m;
  }
  // Without the key: full duplex, and nothing is written.
  const Fabric plain = simple_fabric(1e-6, 1e9);
  EXPECT_DOUBLE_EQ(plain.intra.duplex(1e6), 1.0);
  EXPECT_EQ(fabric_to_toml(plain).find("duplex"), std::string::npos);
  for (const char* bad : {"0", "-0.5", "\"x\""}) {
    try {
      parse_fabric(std::string("name = \"b\"\n[intra]\nalpha_us = 1\nbw_GBps = 1\nduplex = ") + bad + "\n", "b.toml");
      ADD_FAILURE() << "duplex = " << bad << " accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("intra.duplex"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("b.toml"), std::string::npos) << e.what();
    }
  }
}

TEST(Duplex, WhichStepsUseIt) {
  const double a = 2e-6, bw = 1e9, d = 0.5, n = 1 << 20;
  const Fabric full = duplex_fabric(a, bw, 1.0), half = duplex_fabric(a, bw, d);
  const Topology two{1, 2}, four{1, 4}, three{1, 3};
  // sendrecv: one step, both ways.
  EXPECT_DOUBLE_EQ(collective_time(half, Op::Sendrecv, "mpi", two, n), a + n / (d * bw));
  EXPECT_DOUBLE_EQ(collective_time(half, Op::Sendrecv, "mpi", Topology{1, 1}, n), 0.0);
  EXPECT_DOUBLE_EQ(busbw_factor(Op::Sendrecv, 4), 1.0);
  // ring: every step both ways: 2(p-1) a + 2(p-1)/p n / (d bw).
  EXPECT_NEAR(collective_time(half, Op::Allreduce, "ring", four, n), 6 * a + 1.5 * n / (d * bw), 1e-12);
  // rd on 4 ranks: lg p exchanges, both ways.
  EXPECT_NEAR(collective_time(half, Op::Allreduce, "rd", four, n), 2 * (a + n / (d * bw)), 1e-12);
  // rd on 3 ranks: the pre and post steps are one-way, the core exchange both ways.
  EXPECT_NEAR(collective_time(half, Op::Allreduce, "rd", three, n), 2 * (a + n / bw) + (a + n / (d * bw)), 1e-12);
  // One-way: ping-pong and the binomial tree do not change.
  EXPECT_DOUBLE_EQ(collective_time(half, Op::Pingpong, "mpi", two, n), collective_time(full, Op::Pingpong, "mpi", two, n));
  EXPECT_DOUBLE_EQ(collective_time(half, Op::Allreduce, "tree", four, n),
                   collective_time(full, Op::Allreduce, "tree", four, n));
  // Two levels: hier's intra and inter rings both ways.
  EXPECT_GT(collective_time(half, Op::Allreduce, "hier", Topology{2, 2}, n),
            collective_time(full, Op::Allreduce, "hier", Topology{2, 2}, n));
}

TEST(Duplex, CalibrateRecoversItFromPingpongAndSendrecv) {
  const Fabric planted = duplex_fabric(3e-6, 8e9, 0.6);
  std::vector<BenchPoint> pts;
  for (const auto& v : {points(planted, "pingpong", "mpi", 1, 2, 0.01, 1), points(planted, "sendrecv", "mpi", 1, 2, 0.01, 2),
                        points(planted, "allreduce", "ring", 1, 2, 0.01, 3)})
    pts.insert(pts.end(), v.begin(), v.end());
  const FabricFit fit = calibrate_fabric(pts, "fitted");
  const LevelFit& l = fit.levels.at(0);
  EXPECT_NEAR(l.params.bw_Bps / 8e9, 1.0, 0.02) << l.notes;
  EXPECT_NEAR(l.params.duplex(1e6) / 0.6, 1.0, 0.02) << l.notes;
  EXPECT_NEAR(l.params.alpha_s / 3e-6, 1.0, 0.05) << l.notes;
  EXPECT_NE(l.notes.find("per direction"), std::string::npos) << l.notes;
  // The fitted fabric predicts a ring all-reduce of 4 ranks it never saw.
  for (double n : {1.0 * (1 << 20), 16.0 * (1 << 20)}) {
    const double want = collective_time(planted, Op::Allreduce, "ring", Topology{1, 4}, n);
    EXPECT_NEAR(collective_time(fit.fabric, Op::Allreduce, "ring", Topology{1, 4}, n) / want, 1.0, 0.03) << n;
  }
}

TEST(Duplex, NotFittedWithoutBothKindsOfStepAndSaysWhy) {
  const Fabric planted = duplex_fabric(3e-6, 8e9, 0.6);
  const LevelFit ring_only = calibrate_fabric(points(planted, "allreduce", "ring", 1, 2, 0.01, 4), "r").levels.at(0);
  EXPECT_DOUBLE_EQ(ring_only.params.duplex(1e6), 1.0);
  EXPECT_NEAR(ring_only.params.bw_Bps / 4.8e9, 1.0, 0.02);  // bw is then the both-ways bandwidth
  EXPECT_NE(ring_only.notes.find("no ping-pong points"), std::string::npos) << ring_only.notes;
  const LevelFit pp_only = calibrate_fabric(points(planted, "pingpong", "mpi", 1, 2, 0.01, 5), "p").levels.at(0);
  EXPECT_DOUBLE_EQ(pp_only.params.duplex(1e6), 1.0);
  EXPECT_NE(pp_only.notes.find("no both-ways points"), std::string::npos) << pp_only.notes;
}

TEST(Duplex, PerRegime) {
  // Shared memory: in cache both directions stream well, past the cache they compete.
  Fabric planted = simple_fabric(1e-6, 10e9);
  planted.name = "cache";
  planted.intra.regimes = {Regime{1 << 20, 1e-6, 10e9, 9e9}, Regime{kInf, 30e-6, 6e9, 2.4e9}};
  planted.inter = planted.intra;
  std::vector<BenchPoint> pts;
  for (const auto& v : {points(planted, "pingpong", "mpi", 1, 2, 0.005, 6), points(planted, "sendrecv", "mpi", 1, 2, 0.005, 7)})
    pts.insert(pts.end(), v.begin(), v.end());
  const LevelFit l = calibrate_fabric(pts, "cache").levels.at(0);
  ASSERT_EQ(l.params.regimes.size(), 2u) << l.notes;
  EXPECT_DOUBLE_EQ(l.params.regimes[0].up_to_bytes, 1 << 20);
  EXPECT_NEAR(l.params.duplex(1e3) / 0.9, 1.0, 0.03) << l.notes;
  EXPECT_NEAR(l.params.duplex(32e6) / 0.4, 1.0, 0.03) << l.notes;
  EXPECT_NE(l.notes.find("regime 1"), std::string::npos) << l.notes;
}

// ---- CPU share (cores_per_node) ---------------------------------------------------------------

TEST(CpuShare, FileRoundTripAndValidation) {
  const Fabric f = parse_fabric("name = \"c\"\n[intra]\nalpha_us = 1\nbw_GBps = 1\ncores_per_node = 2\n", "c.toml");
  EXPECT_EQ(f.intra.cores_per_node, 2);
  EXPECT_DOUBLE_EQ(f.intra.cpu_share(1), 1.0);
  EXPECT_DOUBLE_EQ(f.intra.cpu_share(2), 1.0);
  EXPECT_DOUBLE_EQ(f.intra.cpu_share(3), 1.5);
  EXPECT_DOUBLE_EQ(f.intra.cpu_share(8), 4.0);
  EXPECT_EQ(parse_fabric(fabric_to_toml(f), "again").intra.cores_per_node, 2);
  const Fabric plain = simple_fabric(1e-6, 1e9);
  EXPECT_DOUBLE_EQ(plain.intra.cpu_share(64), 1.0);  // absent: enough cores
  EXPECT_EQ(fabric_to_toml(plain).find("cores_per_node"), std::string::npos);
  for (const char* bad : {"0", "1.5", "-2"}) {
    try {
      parse_fabric(std::string("name = \"b\"\n[intra]\nalpha_us = 1\nbw_GBps = 1\ncores_per_node = ") + bad + "\n", "b.toml");
      ADD_FAILURE() << "cores_per_node = " << bad << " accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("intra.cores_per_node"), std::string::npos) << e.what();
    }
  }
}

TEST(CpuShare, OnlyStepsWithMoreBusyRanksThanCoresSlowDown) {
  const double a = 2e-6, bw = 1e9, g = 2e9, n = 1 << 20;
  Fabric enough = simple_fabric(a, bw, g);
  Fabric two = enough;
  two.intra.cores_per_node = two.inter.cores_per_node = 2;
  const Topology p2{1, 2}, p3{1, 3}, p4{1, 4};
  // Two ranks on two cores: nothing changes.
  for (const char* algo : {"ring", "rd", "rabenseifner", "shm"})
    EXPECT_DOUBLE_EQ(collective_time(two, Op::Allreduce, algo, p2, n), collective_time(enough, Op::Allreduce, algo, p2, n))
        << algo;
  EXPECT_DOUBLE_EQ(collective_time(two, Op::Pingpong, "mpi", p2, n), collective_time(enough, Op::Pingpong, "mpi", p2, n));
  // A ring of 3: every step keeps 3 ranks busy on 2 cores: copies and sums take
  // ceil(3/2) = 2x (two ranks run, then the third; the node's fair share would be 1.5x).
  const double m = n / 3;
  EXPECT_NEAR(collective_time(two, Op::Allreduce, "ring", p3, n), 4 * (a + 2 * m / bw) + 2 * 2 * m / g, 1e-12);
  EXPECT_DOUBLE_EQ(two.step_share(3), 2.0);
  EXPECT_DOUBLE_EQ(two.cpu_share(3), 1.5);  // threads that are not in lock step (timeline.hpp)
  EXPECT_DOUBLE_EQ(two.step_share(5), 3.0);
  EXPECT_DOUBLE_EQ(two.step_share(2), 1.0);
  EXPECT_DOUBLE_EQ(enough.step_share(64), 1.0);  // cores unknown
  // rd on 3: the fold (0 -> 1) and unfold (1 -> 0) keep 2 busy, the exchange 1 <-> 2 too:
  // no step is oversubscribed.
  EXPECT_DOUBLE_EQ(collective_time(two, Op::Allreduce, "rd", p3, n), collective_time(enough, Op::Allreduce, "rd", p3, n));
  // rd on 4: both exchanges keep all 4 busy: 2x.
  EXPECT_NEAR(collective_time(two, Op::Allreduce, "rd", p4, n), 2 * (a + 2 * n / bw + 2 * n / g), 1e-12);
  // Alpha is not scaled: tiny messages cost (almost) the same.
  EXPECT_NEAR(collective_time(two, Op::Allreduce, "ring", p3, 3) / collective_time(enough, Op::Allreduce, "ring", p3, 3), 1.0,
              1e-3);
}

TEST(CpuShare, CalibrateUsesThePointsCoresAndRecordsThem) {
  // Planted machine: 2 cores. Ping-pong of 2 ranks and rings of 3 ranks, as sweep_fidelity
  // measures them; the fit must recover the one-way bandwidth and predict rd on 3 ranks.
  Fabric planted = simple_fabric(3e-6, 8e9, 4e9);
  planted.name = "p";
  planted.intra.cores_per_node = planted.inter.cores_per_node = 2;
  std::vector<BenchPoint> pts;
  for (const auto& v : {points(planted, "pingpong", "mpi", 1, 2, 0.01, 11), points(planted, "allreduce", "ring", 1, 3, 0.01, 12),
                        points(planted, "allreduce", "ring", 1, 2, 0.01, 13)})
    pts.insert(pts.end(), v.begin(), v.end());
  for (auto& p : pts) p.cores_per_node = 2;
  const FabricFit fit = calibrate_fabric(pts, "fitted");
  EXPECT_EQ(fit.fabric.intra.cores_per_node, 2);
  EXPECT_NE(fit.levels.at(0).notes.find("cores_per_node 2"), std::string::npos) << fit.levels.at(0).notes;
  EXPECT_NEAR(fit.fabric.intra.bw_Bps / 8e9, 1.0, 0.03) << fit.levels.at(0).notes;
  for (double n : {1.0 * (1 << 20), 16.0 * (1 << 20)}) {
    const double want = collective_time(planted, Op::Allreduce, "rd", Topology{1, 3}, n);
    EXPECT_NEAR(collective_time(fit.fabric, Op::Allreduce, "rd", Topology{1, 3}, n) / want, 1.0, 0.03) << n;
  }
  // Without the cores, the same points give no such note.
  for (auto& p : pts) p.cores_per_node = 0;
  const FabricFit blind = calibrate_fabric(pts, "blind");
  EXPECT_EQ(blind.fabric.intra.cores_per_node, 0);
  EXPECT_EQ(blind.levels.at(0).notes.find("cores_per_node"), std::string::npos);
}

namespace {
// A step of forward 2 ms and backward 3 ms over `grads`, in uncompressed buckets of
// `bucket_mb` on 2 ranks, without a data loader.
void set_up_step(Workload& w, std::vector<Bucket>& bs, StepConfig& st, std::vector<ReadyGrad> grads,
                 double bucket_mb) {
  w.forward_s = 2e-3;
  w.backward_s = 3e-3;
  w.grads = std::move(grads);
  bs = make_buckets(w.grads, bucket_mb, bucket_mb);
  for (auto& b : bs) b.plan = Compressor("none").plan(b.tensors, 4, 2, DeviceRates{});
  st.loader_workers = 0;
}

// Two 1 MiB buckets, 0.1 ms each alone (`comm`): bucket 0 ready at 1 ms into backward,
// bucket 1 at 3 ms (= the end of backward).
struct TwoBucketStep {
  double comm = 1e-4;
  Fabric f = simple_fabric(0, 1048576.0 / 1e-4);
  Workload w;
  std::vector<Bucket> bs;
  NetConfig net{1, 2, "ring", 0, 1};
  StepConfig st;
  TwoBucketStep() {
    set_up_step(w, bs, st, {{GradShape{262144, 262144, 1}, 1e-3}, {GradShape{262144, 262144, 1}, 3e-3}}, 1);
  }
};
}  // namespace

TEST(HookCollective, APhaseTakesAtLeastItsMeasuredTime) {
  // A collective launched by a hook's Python code (PyTorch's powerSGD_hook) is priced at
  // least the time the hook measured for it (Phase::min_s); below that floor, the fabric's.
  TwoBucketStep two;
  const double comm = two.comm;
  const StepResult plain = simulate_step(two.w, two.bs, two.f, two.net, two.st, 0);
  ASSERT_EQ(plain.buckets.size(), 2u);
  EXPECT_NEAR(plain.buckets[1].comm_s, comm, 1e-12);
  for (auto& b : two.bs) b.plan.phases.at(0).min_s = 5 * comm;
  const StepResult floored = simulate_step(two.w, two.bs, two.f, two.net, two.st, 0);
  EXPECT_NEAR(floored.buckets[0].comm_s, 5 * comm, 1e-12);
  EXPECT_NEAR(floored.buckets[1].comm_s, 5 * comm, 1e-12);
  // Bucket 1 is launched at the end of backward: the step grows by the floor's excess.
  EXPECT_NEAR(floored.comm_exposed_s - plain.comm_exposed_s, 4 * comm, 1e-12);
  for (auto& b : two.bs) b.plan.phases.at(0).min_s = 0.5 * comm;
  const StepResult below = simulate_step(two.w, two.bs, two.f, two.net, two.st, 0);
  EXPECT_NEAR(below.step_time_s, plain.step_time_s, 1e-15);
}

TEST(Contention, StretchesOnlyTheCollectivesInsideBackward) {
  TwoBucketStep two;
  const double comm = two.comm;
  Fabric& f = two.f;
  Workload& w = two.w;
  auto& bs = two.bs;
  ASSERT_EQ(bs.size(), 2u);
  const NetConfig net = two.net;
  StepConfig st = two.st;
  const StepResult alone = simulate_step(w, bs, f, net, st, 0);
  f.intra.contention = f.inter.contention = 1.5;
  const StepResult busy = simulate_step(w, bs, f, net, st, 0);
  ASSERT_EQ(busy.buckets.size(), 2u);
  EXPECT_NEAR(busy.buckets[0].comm_s, 1.5 * comm, 1e-12);  // all inside backward
  EXPECT_NEAR(busy.buckets[0].contention_s, 0.5 * comm, 1e-12);
  EXPECT_NEAR(busy.buckets[1].comm_s, comm, 1e-12);        // after backward: alone
  EXPECT_DOUBLE_EQ(busy.buckets[1].contention_s, 0.0);
  EXPECT_NEAR(busy.step_time_s, alone.step_time_s, 1e-12);  // bucket 0 stays hidden
  // A collective that straddles the end of backward: 0.05 ms of backward left does
  // 0.05/1.5 ms of its work; the rest (0.1 - 0.0333 ms) runs alone.
  w.grads[0].ready_s = 2.95e-3;
  auto bs2 = make_buckets(w.grads, 1, 1);
  for (auto& b : bs2) b.plan = Compressor("none").plan(b.tensors, 4, 2, DeviceRates{});
  const StepResult edge = simulate_step(w, bs2, f, net, st, 0);
  EXPECT_NEAR(edge.buckets[0].comm_s, 0.05e-3 + (comm - 0.05e-3 / 1.5), 1e-12);
  // Not fitted (1) but the run says 1 busy compute thread per rank and the node 2 cores:
  // 2 x (1 + 1) threads on 2 cores, the CPU share stretches bucket 0 by 2.
  {
    Fabric g = f;
    g.intra.contention = g.inter.contention = 1;
    g.intra.cores_per_node = g.inter.cores_per_node = 2;
    StepConfig st1 = st;
    st1.compute_threads = 1;
    const StepResult cpu = simulate_step(w, bs, g, net, st1, 0);
    EXPECT_NEAR(cpu.buckets[0].comm_s, 2 * comm, 1e-12);
    EXPECT_NEAR(simulate_step(w, bs, g, net, st, 0).buckets[0].comm_s, comm, 1e-12);  // threads unknown
  }
  // A fitted contention_us: each collective that starts inside backward pays it first, then
  // the factor on what is left of backward; one that starts after backward pays neither.
  {
    Fabric g = f;
    g.intra.contention_alpha_s = g.inter.contention_alpha_s = 0.2e-3;
    const StepResult r = simulate_step(w, bs, g, net, st, 0);
    EXPECT_NEAR(r.buckets[0].comm_s, 0.2e-3 + 1.5 * comm, 1e-12);
    EXPECT_NEAR(r.buckets[0].contention_s, 0.2e-3 + 0.5 * comm, 1e-12);
    EXPECT_NEAR(r.buckets[1].comm_s, comm, 1e-12);
    // Straddling: 0.05 ms of backward left, all of it spent waiting; the work runs alone.
    EXPECT_NEAR(simulate_step(w, bs2, g, net, st, 0).buckets[0].comm_s, 0.2e-3 + comm, 1e-12);
    // With contention 1 and contention_us set, the level counts as fitted: no CPU share.
    g.intra.contention = g.inter.contention = 1;
    g.intra.cores_per_node = g.inter.cores_per_node = 2;
    StepConfig st1 = st;
    st1.compute_threads = 1;
    EXPECT_NEAR(simulate_step(w, bs, g, net, st1, 0).buckets[0].comm_s, 0.2e-3 + comm, 1e-12);
  }
  // Without overlap nothing runs during backward.
  st.overlap = false;
  const StepResult off = simulate_step(w, bs, f, net, st, 0);
  for (const auto& b : off.buckets) EXPECT_DOUBLE_EQ(b.contention_s, 0.0);
}

TEST(Contention, FromTheCpuShareWhenNotFitted) {
  Fabric f = simple_fabric(1e-6, 1e9);
  const NetConfig two{1, 2, "ring", 0, 1}, one{1, 1, "ring", 0, 1};
  // Unknown cores or threads: none.
  EXPECT_DOUBLE_EQ(backward_contention(f, two, 1), 1.0);
  f.intra.cores_per_node = f.inter.cores_per_node = 2;
  EXPECT_DOUBLE_EQ(backward_contention(f, two, 0), 1.0);
  // 2 ranks x (1 compute + 1 communication thread) on 2 cores: communication at half speed.
  EXPECT_DOUBLE_EQ(backward_contention(f, two, 1), 2.0);
  EXPECT_DOUBLE_EQ(backward_contention(f, two, 3), 4.0);
  EXPECT_DOUBLE_EQ(backward_contention(f, one, 1), 1.0);  // 2 threads, 2 cores
  EXPECT_DOUBLE_EQ(backward_contention(f, two, 0.5), 1.5);  // busy half of backward
  f.intra.cores_per_node = f.inter.cores_per_node = 16;
  EXPECT_DOUBLE_EQ(backward_contention(f, two, 1), 1.0);  // enough cores
  // A fitted contention wins.
  f.intra.contention = 1.3;
  EXPECT_DOUBLE_EQ(backward_contention(f, two, 8), 1.3);
}

TEST(Contention, RanksSharingOneMachineShareItsCores) {
  // The namespace testbed: 3 nodes of 1 rank on one machine of 2 cores (train files'
  // machine_ranks, machine_cores). Each node alone has cores to spare; the machine does not.
  Fabric f = simple_fabric(1e-6, 1e9);
  f.intra.cores_per_node = f.inter.cores_per_node = 2;
  const NetConfig h3{3, 1, "ring", 0, 1};
  EXPECT_DOUBLE_EQ(backward_contention(f, h3, 0.5), 1.0);  // 1.5 threads, 2 cores
  // 3 x (0.5 + 1) = 4.5 busy threads against the 3 communication threads alone: 2.25 / 1.5.
  EXPECT_DOUBLE_EQ(backward_contention(f, h3, 0.5, false, 3, 2), 1.5);
  EXPECT_DOUBLE_EQ(backward_contention(f, h3, 0.5, false, 3, 8), 1.0);  // a machine of 8 cores
  EXPECT_DOUBLE_EQ(backward_contention(f, h3, 0.5, true, 3, 2), 1.0);   // comm preempts compute
  // Backward beside a bucket in flight: 4.5 threads against its 1.5 alone (2 cores: 1x).
  EXPECT_DOUBLE_EQ(backward_slowdown_in_flight(f, 1, 0.5, false), 1.0);
  EXPECT_DOUBLE_EQ(backward_slowdown_in_flight(f, 1, 0.5, false, 3, 2), 2.25);
  // With preemption the 3 communication threads leave none of the 2 cores to compute.
  EXPECT_EQ(backward_slowdown_in_flight(f, 1, 0.5, true, 3, 2), std::numeric_limits<double>::infinity());
  // A fitted contention (a busy sweep's) wins over the share.
  f.inter.contention_alpha_s = 1e-3;
  EXPECT_DOUBLE_EQ(backward_contention(f, h3, 0.5, false, 3, 2), 1.0);
  f.inter.contention = 1.2;
  EXPECT_DOUBLE_EQ(backward_contention(f, h3, 0.5, false, 3, 2), 1.2);
}

TEST(Contention, CommunicationThatPreemptsComputePausesBackward) {
  // backward's slowdown while a bucket is in flight, its compute measured alone: g ranks x
  // (c compute threads + 1 communication thread) on the node's cores.
  Fabric f = simple_fabric(0, 1e9);
  EXPECT_DOUBLE_EQ(backward_slowdown_in_flight(f, 2, 1, false), 1.0);  // cores unknown
  EXPECT_DOUBLE_EQ(backward_slowdown_in_flight(f, 2, 1, true), 1.0);
  f.intra.cores_per_node = f.inter.cores_per_node = 2;
  EXPECT_DOUBLE_EQ(backward_slowdown_in_flight(f, 2, 1, false), 2.0);  // 4 threads share 2 cores
  EXPECT_TRUE(std::isinf(backward_slowdown_in_flight(f, 2, 1, true)));  // no core left for compute
  EXPECT_DOUBLE_EQ(backward_slowdown_in_flight(f, 2, 0, true), 1.0);   // threads unknown
  f.intra.cores_per_node = f.inter.cores_per_node = 3;
  EXPECT_DOUBLE_EQ(backward_slowdown_in_flight(f, 2, 2, true), 3.0);   // 3/4 of a core alone, 1/4 beside
  f.intra.cores_per_node = f.inter.cores_per_node = 16;
  EXPECT_DOUBLE_EQ(backward_slowdown_in_flight(f, 2, 1, false), 1.0);  // cores to spare
  EXPECT_DOUBLE_EQ(backward_slowdown_in_flight(f, 2, 1, true), 1.0);

  // A step: bucket 0 (0.1 ms alone) ready 1 ms into a 3 ms backward, on 2 ranks and 2 cores,
  // backward timed alone (a no-overlap reference), 1 compute thread per rank.
  TwoBucketStep two;
  const double comm = two.comm;
  Fabric g = two.f;
  g.intra.cores_per_node = g.inter.cores_per_node = 2;
  const Workload& w = two.w;
  const auto& bs = two.bs;
  ASSERT_EQ(bs.size(), 2u);
  const NetConfig net = two.net;
  StepConfig st = two.st;
  st.compute_threads = 1;
  st.compute_shares_cpu = true;
  // Shared CPU: the collective runs at half speed inside backward (0.2 ms) and backward at
  // half speed beside it (0.1 ms lost).
  const StepResult shared = simulate_step(w, bs, g, net, st, 0);
  EXPECT_NEAR(shared.buckets[0].comm_s, 2 * comm, 1e-12);
  EXPECT_NEAR(shared.backward_s, w.backward_s + comm, 1e-12);
  // Preempting: the collective runs alone (0.1 ms) and backward stops for it (0.1 ms lost);
  // bucket 1 becomes ready 0.1 ms later, and runs after backward, alone.
  st.comm_preempts_compute = true;
  const StepResult pre = simulate_step(w, bs, g, net, st, 0);
  EXPECT_NEAR(pre.buckets[0].comm_s, comm, 1e-12);
  EXPECT_DOUBLE_EQ(pre.buckets[0].contention_s, 0.0);
  EXPECT_NEAR(pre.backward_s, w.backward_s + comm, 1e-12);
  EXPECT_NEAR(pre.buckets[1].ready_s, w.forward_s + w.backward_s + comm, 1e-12);
  EXPECT_NEAR(pre.step_time_s, w.forward_s + w.backward_s + 2 * comm, 1e-12);
  // A fitted contention (a 50 us wait for a core, then 1.5x inside backward) is time in
  // which compute holds the core: bucket 0 takes 50 + 150 us, and backward stops only for
  // the 100 us the collective runs alone.
  Fabric gc = g;
  gc.intra.contention_alpha_s = gc.inter.contention_alpha_s = 50e-6;
  gc.intra.contention = gc.inter.contention = 1.5;
  const StepResult held = simulate_step(w, bs, gc, net, st, 0);
  EXPECT_NEAR(held.buckets[0].comm_s, 50e-6 + 1.5 * comm, 1e-12);
  EXPECT_NEAR(held.buckets[0].contention_s, 50e-6 + 0.5 * comm, 1e-12);
  EXPECT_NEAR(held.backward_s, w.backward_s + comm, 1e-12);
  // A hook's collective measured at 0.3 ms as the hook runs it (Phase::min_s: its completion
  // path): bucket 0 takes 0.3 ms, and backward stops only for the 0.1 ms the fabric prices.
  auto hooked = bs;
  for (auto& b : hooked)
    for (auto& ph : b.plan.phases) ph.min_s = 3 * comm;
  const StepResult floored = simulate_step(w, hooked, g, net, st, 0);
  EXPECT_NEAR(floored.buckets[0].comm_s, 3 * comm, 1e-12);
  EXPECT_NEAR(floored.backward_s, w.backward_s + comm, 1e-12);
  // Likewise what a hook adds to its collectives (Phase::extra_s, 0.2 ms): 0.3 ms in all.
  for (auto& b : hooked)
    for (auto& ph : b.plan.phases) {
      ph.min_s = 0;
      ph.extra_s = 2 * comm;
    }
  const StepResult added = simulate_step(w, hooked, g, net, st, 0);
  EXPECT_NEAR(added.buckets[0].comm_s, 3 * comm, 1e-12);
  EXPECT_NEAR(added.backward_s, w.backward_s + comm, 1e-12);
  // Shared CPU, the same contention: backward runs at half speed beside the whole bucket.
  st.comm_preempts_compute = false;
  EXPECT_NEAR(simulate_step(w, bs, gc, net, st, 0).backward_s, w.backward_s + (50e-6 + 1.5 * comm) / 2, 1e-12);
  st.comm_preempts_compute = true;
  // With cores to spare neither form slows backward.
  g.intra.cores_per_node = g.inter.cores_per_node = 16;
  EXPECT_NEAR(simulate_step(w, bs, g, net, st, 0).backward_s, w.backward_s, 1e-12);
}

TEST(Contention, FileRoundTripAndValidation) {
  Fabric f = simple_fabric(1e-6, 1e9);
  f.name = "c";
  f.inter.contention = 1.25;
  const Fabric g = parse_fabric(fabric_to_toml(f), "c.toml");
  EXPECT_DOUBLE_EQ(g.inter.contention, 1.25);
  EXPECT_DOUBLE_EQ(g.intra.contention, 1.0);
  EXPECT_THROW(parse_fabric("name = \"b\"\n[intra]\nalpha_us = 1\nbw_GBps = 1\ncontention = 0\n", "b.toml"), UsageError);
  f.intra.contention_alpha_s = 750e-6;
  EXPECT_DOUBLE_EQ(parse_fabric(fabric_to_toml(f), "c.toml").intra.contention_alpha_s, 750e-6);
  EXPECT_DOUBLE_EQ(g.intra.contention_alpha_s, 0.0);
  EXPECT_THROW(parse_fabric("name = \"b\"\n[intra]\nalpha_us = 1\nbw_GBps = 1\ncontention_us = -1\n", "b.toml"), UsageError);
}

namespace {
// A small step whose two tiny buckets hide behind backward on a fast link (2 ranks unless
// `net` says otherwise): what the reducer's cost and the slowest rank add shows in the step.
struct HiddenStep {
  Workload w;
  std::vector<Bucket> bs;
  Fabric f = simple_fabric(1e-6, 1e10);
  StepConfig st;
  HiddenStep() {
    set_up_step(w, bs, st, {{GradShape{1024, 1024, 1}, 1e-3}, {GradShape{1024, 1024, 1}, 2e-3}}, 0.001);
    w.optimizer_s = 0.5e-3;
  }
  StepResult run(const Workload& wl, const NetConfig& net = NetConfig{1, 2, "ring", 0, 1}) const {
    return simulate_step(wl, bs, f, net, st, 0);
  }
};
}  // namespace

TEST(ReducerCost, AddsToTheStepEvenWhenCommunicationHides) {
  // One tiny bucket on a fast link: communication hides behind backward; the reducer's
  // own work (per step + per bucket) still lengthens the step by exactly its cost.
  HiddenStep h;
  ASSERT_EQ(h.bs.size(), 2u);
  const StepResult base = h.run(h.w);
  Workload w = h.w;
  w.reducer_per_step_s = 40e-6;
  w.reducer_per_bucket_s = 15e-6;
  const StepResult with = h.run(w);
  EXPECT_NEAR(with.reducer_s, 40e-6 + 2 * 15e-6, 1e-15);
  EXPECT_NEAR(with.step_time_s - base.step_time_s, 70e-6, 1e-12);
  EXPECT_DOUBLE_EQ(with.comm_exposed_s, base.comm_exposed_s);
}

TEST(Straggler, ExpectedMaxOfStandardNormals) {
  EXPECT_DOUBLE_EQ(expected_max_std_normal(1), 0.0);
  EXPECT_NEAR(expected_max_std_normal(2), 1 / std::sqrt(std::numbers::pi), 1e-9);
  EXPECT_NEAR(expected_max_std_normal(3), 1.5 / std::sqrt(std::numbers::pi), 1e-9);
  EXPECT_NEAR(expected_max_std_normal(4), 1.0293754, 1e-6);  // order-statistics tables
  EXPECT_NEAR(expected_max_std_normal(8), 1.4236003, 1e-6);
  EXPECT_NEAR(expected_max_std_normal(1000), 3.2414, 1e-3);
}

TEST(Straggler, TheSlowestRankLengthensTheStep) {
  // A step of p ranks waits for the slowest: E[max of p std normals] x rank_jitter x
  // (forward + backward + optimizer), whether communication hides or not; one rank: nothing.
  HiddenStep h;
  Workload wj = h.w;
  wj.rank_jitter = 0.02;
  for (int p : {1, 2, 4, 8}) {
    const NetConfig net{1, p, "ring", 0, 1};
    const StepResult base = h.run(h.w, net);
    const StepResult with = h.run(wj, net);
    const double want = expected_max_std_normal(p) * 0.02 * 5.5e-3;
    EXPECT_NEAR(with.straggler_s, want, 1e-15) << p << " ranks";
    EXPECT_NEAR(with.step_time_s - base.step_time_s, want, 1e-12) << p << " ranks";
    EXPECT_DOUBLE_EQ(with.comm_exposed_s, base.comm_exposed_s);
    EXPECT_EQ(base.straggler_s, 0.0);
  }
}

TEST(Straggler, EachCodecBucketWaitsForTheSlowestRanksCodec) {
  // Each bucket's codec: 0.2 ms encode + 0.3 ms decode. With the compute profile's
  // codec_wait (1 ms + 40% of the codec, per E[max of p]), every bucket's collective waits
  // E[max of p std normals] x (1 ms + 0.4 x 0.5 ms) for the rank that encoded last; the
  // wait is communication time, so it delays the next bucket too. One rank, or a bucket
  // without a codec, waits for nobody.
  TwoBucketStep two;
  for (auto& b : two.bs) {
    b.plan.phases.at(0).compute_s = 2e-4;
    b.plan.tail_s = 3e-4;
  }
  Workload wj = two.w;
  wj.codec_wait_s = 1e-3;
  wj.codec_wait_frac = 0.4;
  for (int p : {1, 2, 3, 8}) {
    const NetConfig net{1, p, "ring", 0, 1};
    const StepResult base = simulate_step(two.w, two.bs, two.f, net, two.st, 0);
    const StepResult with = simulate_step(wj, two.bs, two.f, net, two.st, 0);
    const double want = expected_max_std_normal(p) * (1e-3 + 0.4 * 5e-4);
    for (std::size_t b = 0; b < 2; ++b) {
      EXPECT_NEAR(with.buckets[b].codec_s, base.buckets[b].codec_s, 1e-15) << p;
      EXPECT_NEAR(with.buckets[b].comm_s - base.buckets[b].comm_s, want, 1e-12) << p << " ranks, bucket " << b;
    }
    // The step grows by bucket 1's wait and by how much later bucket 1 could start: at
    // backward's end (3 ms) while bucket 0 (ready at 1 ms) ends before it, later on 8 ranks,
    // where bucket 0's wait runs past it.
    const double later = with.buckets[1].start_s - base.buckets[1].start_s;
    EXPECT_NEAR(with.step_time_s - base.step_time_s, want + later, 1e-12) << p << " ranks";
    if (p <= 3) EXPECT_NEAR(later, 0.0, 1e-15) << p << " ranks";
    else EXPECT_NEAR(later, with.buckets[0].end_s - base.buckets[1].start_s, 1e-12) << "bucket 0's wait delays bucket 1";
    EXPECT_DOUBLE_EQ(with.straggler_s, base.straggler_s);
  }
  for (auto& b : two.bs) {
    b.plan.phases.at(0).compute_s = 0;
    b.plan.tail_s = 0;
  }
  const NetConfig net{1, 3, "ring", 0, 1};
  EXPECT_DOUBLE_EQ(simulate_step(wj, two.bs, two.f, net, two.st, 0).step_time_s,
                   simulate_step(two.w, two.bs, two.f, net, two.st, 0).step_time_s);
}

TEST(CodecCpuShare, RanksBeyondTheCoresStretchTheCodec) {
  // Each bucket's codec: 0.2 ms encode + 0.3 ms decode alone. Bucket 0 is ready 1 ms into
  // backward (3 ms), bucket 1 at its end.
  TwoBucketStep two;
  for (auto& b : two.bs) {
    b.plan.phases.at(0).compute_s = 2e-4;
    b.plan.tail_s = 3e-4;
  }
  Fabric& f = two.f;
  f.intra.cores_per_node = f.inter.cores_per_node = 2;
  StepConfig st = two.st;
  auto codecs = [&](const StepConfig& s) {
    const StepResult r = simulate_step(two.w, two.bs, f, two.net, s, 0);
    return std::make_pair(r.buckets.at(0).codec_s, r.buckets.at(1).codec_s);
  };
  // 2 ranks on 2 cores: alone.
  EXPECT_DOUBLE_EQ(codec_cpu_share(f, two.net, st), 1.0);
  EXPECT_NEAR(codecs(st).first, 5e-4, 1e-15);
  // The run's 3 ranks shared one machine's 2 cores (3 testbed hosts on one machine): the
  // ranks encode in lock step, two at a time, then the third: 2x, as a collective's steps.
  st.machine_ranks = 3;
  st.machine_cores = 2;
  EXPECT_DOUBLE_EQ(codec_cpu_share(f, two.net, st), 2.0);
  EXPECT_NEAR(codecs(st).first, 1e-3, 1e-15);
  EXPECT_NEAR(codecs(st).second, 1e-3, 1e-15);
  st.machine_ranks = 5;
  EXPECT_DOUBLE_EQ(codec_cpu_share(f, two.net, st), 3.0);
  st.machine_cores = 8;
  EXPECT_DOUBLE_EQ(codec_cpu_share(f, two.net, st), 1.0);
  // Without the machine's figures, a node's ranks and the fabric's cores; unknown cores: 1.
  st.machine_ranks = st.machine_cores = 0;
  EXPECT_DOUBLE_EQ(codec_cpu_share(f, NetConfig{1, 4, "ring", 0, 1}, st), 2.0);
  Fabric open = f;
  open.intra.cores_per_node = open.inter.cores_per_node = 0;
  EXPECT_DOUBLE_EQ(codec_cpu_share(open, NetConfig{1, 4, "ring", 0, 1}, st), 1.0);
  // Inside backward the codec thread shares the cores with the ranks' compute threads:
  // 2 x (1 + 1) threads on 2 cores, bucket 0's codec at half speed; bucket 1, after
  // backward, alone.
  st.compute_threads = 1;
  EXPECT_NEAR(codecs(st).first, 1e-3, 1e-15);
  EXPECT_NEAR(codecs(st).second, 5e-4, 1e-15);
  // Not when the codec runs in the compute thread (a PyTorch hook), without overlap, or
  // with the communication thread preempting compute.
  for (int k = 0; k < 3; ++k) {
    StepConfig s = st;
    if (k == 0) s.codec_beside_compute = false;
    if (k == 1) s.overlap = false;
    if (k == 2) s.comm_preempts_compute = true;
    EXPECT_NEAR(codecs(s).first, 5e-4, 1e-15) << k;
  }
}

TEST(Straggler, AJitteryCodecIsWaitedForOnTheSlowestRank) {
  // Two buckets whose codec (0.2 ms encode + 0.3 ms decode each) varies from step to step by
  // sigma 10% and 30% of it (BucketPlan::codec_sigma, a PyTorch hook's): the step waits
  // E[max of p] x (0.1 + 0.3) x 0.5 ms for the slowest rank's codec; one rank or a steady
  // codec: nothing; a negative sigma (a replay whose recorded ranks waited more) shortens it.
  TwoBucketStep two;
  for (auto& b : two.bs) {
    b.plan.phases.at(0).compute_s = 2e-4;
    b.plan.tail_s = 3e-4;
  }
  for (int p : {1, 2, 4, 8}) {
    const NetConfig net{1, p, "ring", 0, 1};
    const StepResult steady = simulate_step(two.w, two.bs, two.f, net, two.st, 0);
    auto bs = two.bs;
    bs[0].plan.codec_sigma = 0.1;
    bs[1].plan.codec_sigma = 0.3;
    const StepResult jitter = simulate_step(two.w, bs, two.f, net, two.st, 0);
    const double want = expected_max_std_normal(p) * 0.4 * 5e-4;
    EXPECT_EQ(steady.straggler_s, 0.0);
    EXPECT_NEAR(jitter.straggler_s, want, 1e-15) << p << " ranks";
    EXPECT_NEAR(jitter.step_time_s - steady.step_time_s, want, 1e-12) << p << " ranks";
    EXPECT_DOUBLE_EQ(jitter.comm_exposed_s, steady.comm_exposed_s);
    for (auto& b : bs) b.plan.codec_sigma = -b.plan.codec_sigma;
    EXPECT_NEAR(simulate_step(two.w, bs, two.f, net, two.st, 0).straggler_s, -want, 1e-15) << p << " ranks";
  }
}

// ---- working-set regimes (the shared-memory cache cliff) --------------------------------------

namespace {
// Shared memory with a last-level cache: in cache (node working set <= 16 MiB) both-ways
// copies stream at 10 GB/s per direction, past it at 2.4; ping-pong at 3.5 GB/s in both.
Fabric cache_fabric() {
  Fabric f = simple_fabric(1e-6, 3.5e9);
  f.name = "llc";
  f.intra.regime_key = RegimeKey::WorkingSet;
  f.intra.regimes = {Regime{16.0 * (1 << 20), 2e-6, 3.5e9, 10e9}, Regime{kInf, 40e-6, 3.5e9, 2.4e9}};
  f.intra.gamma_Bps = 12e9;
  f.inter = f.intra;
  return f;
}

// The microbenchmark set on 2 ranks: ping-pong, sendrecv and ring sweeps (seeds s, s+1, s+2).
std::vector<BenchPoint> sweep_set(const Fabric& f, unsigned s) {
  std::vector<BenchPoint> pts;
  for (const auto& v : {points(f, "pingpong", "mpi", 1, 2, 0.01, s), points(f, "sendrecv", "mpi", 1, 2, 0.01, s + 1),
                        points(f, "allreduce", "ring", 1, 2, 0.01, s + 2)})
    pts.insert(pts.end(), v.begin(), v.end());
  return pts;
}
}  // namespace

TEST(WorkingSet, NodeFootprintPerOperation) {
  const double n = 1 << 20;
  const Topology two{1, 2}, four{1, 4};
  EXPECT_DOUBLE_EQ(node_working_set(Op::Sendrecv, "mpi", two, n), 2 * 2 * n);     // send + receive, 2 ranks
  EXPECT_DOUBLE_EQ(node_working_set(Op::Pingpong, "mpi", two, n), 2 * 2 * n);
  EXPECT_DOUBLE_EQ(node_working_set(Op::Allreduce, "ring", two, n), 2 * 2.5 * n);  // in, out, n/p scratch
  EXPECT_DOUBLE_EQ(node_working_set(Op::Allreduce, "rd", four, n), 4 * 3 * n);     // a whole-vector scratch
  EXPECT_DOUBLE_EQ(node_working_set(Op::Allreduce, "tree", four, n), 4 * 2 * n);
  EXPECT_DOUBLE_EQ(node_working_set(Op::Allreduce, "ring", Topology{2, 1}, n), 2.5 * n);  // one rank per node
}

TEST(WorkingSet, EveryStepOfACollectiveRunsInItsFootprintsRegime) {
  const Fabric f = cache_fabric();
  const Topology two{1, 2};
  const double mib = 1 << 20;
  // sendrecv 4 MiB spans 16 MiB: in cache; 8 MiB spans 32 MiB: out.
  EXPECT_NEAR(collective_time(f, Op::Sendrecv, "mpi", two, 4 * mib), 2e-6 + 4 * mib / 10e9, 1e-12);
  EXPECT_NEAR(collective_time(f, Op::Sendrecv, "mpi", two, 8 * mib), 40e-6 + 8 * mib / 2.4e9, 1e-12);
  // A ring all-reduce of 4 MiB spans 2 x (4 + 4 + 2) MiB = 20 MiB: out of cache, although
  // each of its messages (2 MiB) is smaller than the sendrecv's that stays in.
  const Fabric out = [&] {
    Fabric g = f;
    g.intra = g.inter = f.intra.at_working_set(kInf);
    return g;
  }();
  EXPECT_DOUBLE_EQ(collective_time(f, Op::Allreduce, "ring", two, 4 * mib),
                   collective_time(out, Op::Allreduce, "ring", two, 4 * mib));
  const Fabric in = [&] {
    Fabric g = f;
    g.intra = g.inter = f.intra.at_working_set(0);
    return g;
  }();
  EXPECT_DOUBLE_EQ(collective_time(f, Op::Allreduce, "ring", two, 2 * mib),
                   collective_time(in, Op::Allreduce, "ring", two, 2 * mib));
  EXPECT_EQ(in.intra.regimes.size(), 0u);
  EXPECT_DOUBLE_EQ(in.intra.duplex_bw(1), 10e9);
}

TEST(WorkingSet, FileRoundTripAndValidation) {
  const Fabric f = cache_fabric();
  const std::string text = fabric_to_toml(f);
  EXPECT_NE(text.find("regimes_by = \"working_set\""), std::string::npos) << text;
  const Fabric g = parse_fabric(text, "rt.toml");
  EXPECT_EQ(g.intra.regime_key, RegimeKey::WorkingSet);
  for (double n : {1e3, 1e6, 4e6, 8e6, 64e6})
    EXPECT_NEAR(collective_time(g, Op::Allreduce, "ring", Topology{1, 2}, n) /
                    collective_time(f, Op::Allreduce, "ring", Topology{1, 2}, n), 1.0, 1e-9) << n;
  try {
    parse_fabric("name = \"x\"\n[intra]\nalpha_us = 1\nbw_GBps = 1\nregimes_by = \"cache\"\n", "bad.toml");
    FAIL() << "regimes_by = \"cache\" was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("intra.regimes_by"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bad.toml"), std::string::npos) << e.what();
  }
}

// Calibrate on ping-pong + sendrecv + ring sweeps of a cache-cliff host: message-size
// regimes cannot hold the cliff (sendrecv leaves the cache at 8 MiB, the ring at 4 MiB),
// working-set regimes can; the fit picks them, finds the bound and predicts rd and
// rabenseifner all-reduces it never saw within 3%.
TEST(WorkingSet, CalibratePicksWorkingSetRegimesForACacheCliff) {
  const Fabric planted = cache_fabric();
  const LevelFit l = calibrate_fabric(sweep_set(planted, 21), "llc").levels.at(0);
  EXPECT_EQ(l.params.regime_key, RegimeKey::WorkingSet) << l.notes;
  ASSERT_GE(l.params.regimes.size(), 2u) << l.notes;
  // The last bound below the cliff lies between the in-cache and out-of-cache footprints.
  const double bound = l.params.regimes[l.params.regimes.size() - 2].up_to_bytes;
  EXPECT_GE(bound, 16.0 * (1 << 20)) << l.notes;
  EXPECT_LT(bound, 20.0 * (1 << 20)) << l.notes;
  EXPECT_NE(l.notes.find("working set"), std::string::npos) << l.notes;
  for (const char* algo : {"ring", "rd", "rabenseifner"})
    for (int ranks : {2, 4})
      for (double n : {1.0 * (1 << 20), 16.0 * (1 << 20)}) {
        const Topology t{1, ranks};
        const double want = collective_time(planted, Op::Allreduce, algo, t, n);
        Fabric fitted = planted;
        fitted.intra = fitted.inter = l.params;
        EXPECT_NEAR(collective_time(fitted, Op::Allreduce, algo, t, n) / want, 1.0, 0.03) << algo << " " << ranks << " " << n;
      }
  EXPECT_EQ(l.params.regimes.back().gamma_Bps, 0) << "no own rate was planted past the cache: " << l.notes;
  // Message-size regimes on the same points: the fit keeps message keys where they do as
  // well (one operation only: the two keys are proportional).
  const LevelFit one_op = calibrate_fabric(points(planted, "sendrecv", "mpi", 1, 2, 0.01, 24), "sr").levels.at(0);
  EXPECT_EQ(one_op.params.regime_key, RegimeKey::Message) << one_op.notes;
}

// Past the cache a sum reads two operands from memory: the last working-set regime sums at
// 3 GB/s where the cache did 12. Calibrate gives that regime its own gamma, says so, and
// the fitted fabric predicts an rd all-reduce (one 16 MiB exchange and sum) within 3%.
TEST(WorkingSet, TheLastRegimeSumsAtItsOwnRate) {
  Fabric planted = cache_fabric();
  planted.intra.regimes.back().gamma_Bps = 3e9;
  planted.inter = planted.intra;
  const LevelFit l = calibrate_fabric(sweep_set(planted, 31), "llc-sums").levels.at(0);
  ASSERT_EQ(l.params.regime_key, RegimeKey::WorkingSet) << l.notes;
  EXPECT_NEAR(l.params.regimes.back().gamma_Bps / 3e9, 1.0, 0.05) << l.notes;
  EXPECT_NEAR(l.params.gamma_Bps / 12e9, 1.0, 0.1) << l.notes;
  EXPECT_NE(l.notes.find("sums past the last bound"), std::string::npos) << l.notes;
  Fabric fitted = planted;
  fitted.intra = fitted.inter = l.params;
  for (const char* algo : {"rd", "ring"})
    for (double n : {1.0 * (1 << 20), 16.0 * (1 << 20)}) {
      const double want = collective_time(planted, Op::Allreduce, algo, Topology{1, 2}, n);
      EXPECT_NEAR(collective_time(fitted, Op::Allreduce, algo, Topology{1, 2}, n) / want, 1.0, 0.03) << algo << " " << n;
    }
  // The file keeps the regime's rate; a message-keyed level refuses one.
  const Fabric back = parse_fabric(fabric_to_toml(fitted), "rt.toml");
  EXPECT_DOUBLE_EQ(back.intra.regimes.back().gamma_Bps, l.params.regimes.back().gamma_Bps);
  try {
    parse_fabric("name = \"x\"\n[intra]\n[[intra.regime]]\nup_to_bytes = 100\nalpha_us = 1\nbw_GBps = 1\n"
                 "[[intra.regime]]\nalpha_us = 1\nbw_GBps = 1\ngamma_GBps = 3\n", "msg.toml");
    FAIL() << "a regime gamma on a message-keyed level was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("intra.regime[1].gamma_GBps"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("working_set"), std::string::npos) << e.what();
  }
}
