// Tests of netmodel/: fabric files, collective formulas (hand values and brute-force
// schedules), the step timeline (hand-worked cases), grids, calibration from synthetic
// bench files, and compare on synthetic train files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <tuple>
#include <functional>
#include <random>

#include "core/error.hpp"
#include "core/h5io.hpp"
#include "core/provenance.hpp"
#include "plan/algos.hpp"
#include "netmodel/calibrate.hpp"
#include "netmodel/collectives.hpp"
#include "netmodel/compare.hpp"
#include "netmodel/compress.hpp"
#include "netmodel/fabric.hpp"
#include "netmodel/grid.hpp"
#include "netmodel/predict.hpp"
#include "netmodel/timeline.hpp"

using namespace gradsync;
using namespace gradsync::netmodel;

namespace {

// This process's scratch folder: made on first use, removed when the test program exits.
struct ScratchDir {
  std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("gs_netmodel_test." + std::to_string(::getpid()));
  ScratchDir() { std::filesystem::create_directories(path); }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

std::string tmp_path(const std::string& name) {
  static const ScratchDir dir;
  return (dir.path / name).string();
}

template <typename F>
std::string usage_error_of(F&& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no UsageError)";
}

// A two-level fabric with distinct numbers per level.
Fabric two_level(double gamma = kInf) {
  Fabric f;
  f.name = "test";
  f.intra.alpha_s = 2e-6;
  f.intra.bw_Bps = 20e9;
  f.intra.gamma_Bps = gamma;
  f.inter.alpha_s = 10e-6;
  f.inter.bw_Bps = 2e9;
  f.inter.gamma_Bps = gamma;
  return f;
}

}  // namespace

// ---- fabrics -------------------------------------------------------------------------------

TEST(Fabric, BuiltinsLoadAndValidate) {
  EXPECT_EQ(fabric_names().size(), 13u);
  for (const auto& n : fabric_names()) {
    const Fabric f = builtin_fabric(n);
    EXPECT_NO_THROW(validate_fabric(f)) << n;
    EXPECT_FALSE(f.inter.source.empty()) << n;
    // TOML round trip.
    const Fabric g = parse_fabric(fabric_to_toml(f), n + ".toml");
    EXPECT_DOUBLE_EQ(g.inter.alpha_s, f.inter.alpha_s) << n;
    EXPECT_DOUBLE_EQ(g.inter.bw(1e6), f.inter.bw(1e6)) << n;
    EXPECT_DOUBLE_EQ(g.intra.gamma_Bps, f.intra.gamma_Bps) << n;
    EXPECT_EQ(g.inter.regimes.size(), f.inter.regimes.size()) << n;
  }
  const Fabric s = builtin_fabric("seed-tcp");
  EXPECT_DOUBLE_EQ(s.inter.alpha_s, 80e-6);
  EXPECT_DOUBLE_EQ(s.inter.bw_Bps, 1.2e9);
  const Fabric r = builtin_fabric("seed-roce");
  EXPECT_DOUBLE_EQ(r.inter.alpha_s, 35e-6);
  EXPECT_DOUBLE_EQ(r.inter.bw_Bps, 2.7e9);
}

TEST(Fabric, UnknownNameListsKnown) {
  const std::string e = usage_error_of([] { load_fabric("infiniband-xyz"); });
  EXPECT_NE(e.find("infiniband-xyz"), std::string::npos) << e;
  EXPECT_NE(e.find("seed-roce"), std::string::npos) << e;
}

TEST(Fabric, ConnectionCap) {
  Level l;
  l.alpha_s = 0;
  l.bw_Bps = 11.5e9;
  l.conn_bw_Bps = 4.4e9;
  EXPECT_DOUBLE_EQ(l.flow_bw(1e6), 4.4e9);
  l.connections = 2;
  EXPECT_DOUBLE_EQ(l.flow_bw(1e6), 8.8e9);
  l.connections = 4;
  EXPECT_DOUBLE_EQ(l.flow_bw(1e6), 11.5e9);
  // 4 flows sharing the NIC, 1 connection each: min(11.5, 4 x 4.4) / 4
  l.connections = 1;
  EXPECT_DOUBLE_EQ(l.flow_bw(1e6, 4), 11.5e9 / 4);
}

TEST(Fabric, RegimesPiecewise) {
  const Fabric f = parse_fabric(R"(
name = "r"
[inter]
[[inter.regime]]
up_to_bytes = 65536
alpha_us = 10
bw_GBps = 1
[[inter.regime]]
alpha_us = 30
bw_GBps = 2
)", "r.toml");
  EXPECT_DOUBLE_EQ(f.inter.alpha(65536), 10e-6);
  EXPECT_DOUBLE_EQ(f.inter.alpha(65537), 30e-6);
  EXPECT_DOUBLE_EQ(f.inter.bw(1e9), 2e9);
  EXPECT_DOUBLE_EQ(f.intra.alpha(8), 10e-6);  // missing level copies the other
}

TEST(Fabric, MalformedFilesNameLineAndKey) {
  // Syntax error: line and column.
  std::string e = usage_error_of([] { parse_fabric("name = \"x\"\n[inter]\nalpha_us = = 3\n", "bad.toml"); });
  EXPECT_NE(e.find("bad.toml:3"), std::string::npos) << e;
  // Unknown key: line and key.
  e = usage_error_of([] { parse_fabric("name = \"x\"\n[inter]\nalpha_us = 3\nbw_GBps = 1\nbandwith = 2\n", "k.toml"); });
  EXPECT_NE(e.find("k.toml:5"), std::string::npos) << e;
  EXPECT_NE(e.find("inter.bandwith"), std::string::npos) << e;
  // Non-positive bandwidth.
  e = usage_error_of([] { parse_fabric("name = \"x\"\n[inter]\nalpha_us = 3\nbw_GBps = -1\n", "n.toml"); });
  EXPECT_NE(e.find("n.toml:4"), std::string::npos) << e;
  EXPECT_NE(e.find("inter.bw_GBps"), std::string::npos) << e;
  EXPECT_NE(e.find("> 0"), std::string::npos) << e;
  // Negative alpha, zero gamma, wrong type, missing key, missing levels.
  e = usage_error_of([] { parse_fabric("name = \"x\"\n[intra]\nalpha_us = -3\nbw_GBps = 1\n", "a.toml"); });
  EXPECT_NE(e.find("intra.alpha_us"), std::string::npos) << e;
  e = usage_error_of([] { parse_fabric("name = \"x\"\n[intra]\nalpha_us = 3\nbw_GBps = 1\ngamma_GBps = 0\n", "g.toml"); });
  EXPECT_NE(e.find("intra.gamma_GBps"), std::string::npos) << e;
  e = usage_error_of([] { parse_fabric("name = \"x\"\n[intra]\nalpha_us = \"fast\"\nbw_GBps = 1\n", "t.toml"); });
  EXPECT_NE(e.find("must be a number"), std::string::npos) << e;
  e = usage_error_of([] { parse_fabric("name = \"x\"\n[intra]\nalpha_us = 3\n", "m.toml"); });
  EXPECT_NE(e.find("intra.bw_GBps"), std::string::npos) << e;
  EXPECT_NE(e.find("missing"), std::string::npos) << e;
  e = usage_error_of([] { parse_fabric("name = \"x\"\n", "e.toml"); });
  EXPECT_NE(e.find("at least one level"), std::string::npos) << e;
  // Regimes out of order.
  e = usage_error_of([] {
    parse_fabric("name = \"x\"\n[inter]\n[[inter.regime]]\nup_to_bytes = 100\nalpha_us = 1\nbw_GBps = 1\n"
                 "[[inter.regime]]\nup_to_bytes = 50\nalpha_us = 1\nbw_GBps = 1\n[[inter.regime]]\nalpha_us = 1\nbw_GBps = 1\n",
                 "o.toml");
  });
  EXPECT_NE(e.find("o.toml:8"), std::string::npos) << e;
  EXPECT_NE(e.find("up_to_bytes"), std::string::npos) << e;
}

TEST(Fabric, SaveLoadFile) {
  const std::string p = tmp_path("roce.toml");
  save_fabric(builtin_fabric("roce-100g"), p);
  const Fabric f = load_fabric(p);
  EXPECT_EQ(f.name, "roce-100g");
  EXPECT_DOUBLE_EQ(f.inter.alpha(1e6), builtin_fabric("roce-100g").inter.alpha(1e6));
}

TEST(Fabric, ShaperFieldsRoundTripAndValidate) {
  Fabric f = simple_fabric(10e-6, 12.5e6);
  f.name = "tbf";
  f.inter.burst_bytes = 65536;
  f.inter.peak_bw_Bps = 2e9;
  const Fabric g = parse_fabric(fabric_to_toml(f), "round trip");
  EXPECT_DOUBLE_EQ(g.inter.burst_bytes, 65536);
  EXPECT_DOUBLE_EQ(g.inter.peak_bw_Bps, 2e9);
  EXPECT_EQ(g.intra.burst_bytes, 0);
  try {
    parse_fabric("name = \"x\"\n[inter]\nalpha_us = 1\nbw_GBps = 1\nburst_bytes = -5\n", "bad.toml");
    FAIL() << "a negative burst was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("inter.burst_bytes"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bad.toml:5:"), std::string::npos) << e.what();
  }
}

// ---- collective formulas: hand-computed values -----------------------------------------------

TEST(Collectives, HockneyExactOneLevel) {
  const double a = 10e-6, B = 1e9;
  const Fabric f = simple_fabric(a, B);
  for (int p : {2, 4, 8, 16}) {
    for (double n : {8.0, 65536.0, 1048576.0, 1e8}) {
      const double lg = std::log2(p);
      const Topology t{1, p};
      EXPECT_NEAR(collective_time(f, Op::Allreduce, "ring", t, n), 2 * (p - 1) * a + 2.0 * (p - 1) / p * n / B, 1e-12);
      EXPECT_NEAR(collective_time(f, Op::Allreduce, "rd", t, n), lg * (a + n / B), 1e-12);
      EXPECT_NEAR(collective_time(f, Op::Allreduce, "rabenseifner", t, n), 2 * lg * a + 2.0 * (p - 1) / p * n / B, 1e-12);
      EXPECT_NEAR(collective_time(f, Op::Allreduce, "tree", t, n), 2 * lg * (a + n / B), 1e-12);
      EXPECT_NEAR(collective_time(f, Op::Allgather, "ring", t, n), (p - 1) * (a + n / p / B), 1e-12);
      // Same with ranks spread over nodes: one level everywhere, so the same numbers.
      const Topology t2{p / 2, 2};
      EXPECT_NEAR(collective_time(f, Op::Allreduce, "ring", t2, n), 2 * (p - 1) * a + 2.0 * (p - 1) / p * n / B, 1e-12);
    }
  }
  // A worked example by hand: ring, 8 ranks, 1 MiB, 10 us, 1 GB/s:
  // 14 x 10 us + 14/8 x 1048576 B / 1e9 B/s = 140 us + 1835.008 us = 1975.008 us.
  EXPECT_NEAR(collective_time(f, Op::Allreduce, "ring", Topology{1, 8}, 1048576) * 1e6, 1975.008, 1e-9);
}

TEST(Collectives, GammaTermAndNonPowerOfTwo) {
  const double a = 5e-6, B = 2e9, G = 4e9;
  const Fabric f = simple_fabric(a, B, G);
  const double n = 1 << 20;
  // ring: 2(p-1) a + 2(p-1)/p n/B + (p-1)/p n/G, p = 6
  EXPECT_NEAR(collective_time(f, Op::Allreduce, "ring", Topology{1, 6}, n),
              10 * a + 10.0 / 6 * n / B + 5.0 / 6 * n / G, 1e-12);
  // rd, p = 6: pre (a + n/B + n/G) + 2 steps (a + n/B + n/G) + post (a + n/B)
  EXPECT_NEAR(collective_time(f, Op::Allreduce, "rd", Topology{1, 6}, n), 3 * (a + n / B + n / G) + a + n / B, 1e-12);
  // rabenseifner, p = 6 (p' = 4): pre + RS (n/2, n/4) + AG (n/4, n/2) + post
  EXPECT_NEAR(collective_time(f, Op::Allreduce, "rabenseifner", Topology{1, 6}, n),
              (a + n / B + n / G) + 2 * a + 0.75 * n / B + 0.75 * n / G + 2 * a + 0.75 * n / B + (a + n / B), 1e-12);
}

TEST(Collectives, AutoAndMpiResolution) {
  // The runtime's rule (runtime/plan/algos.hpp): hier on several nodes of several ranks.
  const Topology t{2, 4};
  EXPECT_EQ(resolve_algo("auto", Op::Allreduce, 65536, t), "rd");
  EXPECT_EQ(resolve_algo("auto", Op::Allreduce, 65537, t), "hier");
  EXPECT_EQ(resolve_algo("auto", Op::Allreduce, (1 << 20) + 1, t), "hier");
  for (const Topology flat : {Topology{8, 1}, Topology{4, 1}}) {
    EXPECT_EQ(resolve_algo("auto", Op::Allreduce, 65537, flat), "rabenseifner");
    EXPECT_EQ(resolve_algo("auto", Op::Allreduce, 1 << 20, flat), "rabenseifner");
    EXPECT_EQ(resolve_algo("auto", Op::Allreduce, (1 << 20) + 1, flat), "ring");
  }
  EXPECT_EQ(resolve_algo("mpi", Op::Allreduce, 9999, t), "rd");
  EXPECT_EQ(resolve_algo("mpi", Op::Allreduce, 10000, t), "ring");
  EXPECT_THROW(check_algo_name("butterfly"), UsageError);
  // One node of several ranks: the runtime's one-node rule (native small, shm large).
  const Topology one{1, 4};
  EXPECT_EQ(resolve_algo("auto", Op::Allreduce, 8, one), "rd");  // what "mpi" does at 8 B
  EXPECT_EQ(resolve_algo("auto", Op::Allreduce, 65536, one), "ring");
  EXPECT_EQ(resolve_algo("auto", Op::Allreduce, 65537, one), "shm");
  EXPECT_EQ(resolve_algo("auto", Op::Allreduce, 1 << 26, one), "shm");
  EXPECT_EQ(resolve_algo("auto", Op::Allreduce, 1 << 26, Topology{1, 1}), "ring");
}

TEST(Collectives, ShmScheduleOnOneNode) {
  // 2 ceil(n/R) a + 2 (g-1)/g n/B + (g-1)/g n/G, R = 4 MiB by default.
  const double a = 1e-6, B = 5e9, G = 8e9;
  const Fabric f = simple_fabric(a, B, G);
  const double n = 16.0 * (1 << 20);
  EXPECT_NEAR(collective_time(f, Op::Allreduce, "shm", Topology{1, 4}, n),
              2 * 4 * a + 2 * 0.75 * n / B + 0.75 * n / G, 1e-12);
  CollOptions o;
  o.chunk_bytes = 1.0 * (1 << 20);  // --chunk-bytes is the round size
  EXPECT_NEAR(collective_time(f, Op::Allreduce, "shm", Topology{1, 2}, n, o), 2 * 16 * a + n / B + 0.5 * n / G,
              1e-12);
  // Fewer syncs than the ring's 2 (p-1) steps, the same bytes: never slower than ring.
  EXPECT_LT(collective_time(f, Op::Allreduce, "shm", Topology{1, 4}, 4096), collective_time(f, Op::Allreduce, "ring", Topology{1, 4}, 4096));
  // Across nodes the runtime falls back to ring, and so does the model.
  EXPECT_DOUBLE_EQ(collective_time(f, Op::Allreduce, "shm", Topology{2, 2}, n),
                   collective_time(f, Op::Allreduce, "ring", Topology{2, 2}, n));
  EXPECT_EQ(collective_time(f, Op::Allreduce, "shm", Topology{1, 1}, n), 0);
}

TEST(Collectives, ShmOnRegisteredBuffersSkipsTheCopyIn) {
  // From kShmZeroCopyMinBytes on: 3 a + (3 - 1/g)/(5 - 2/g) of the rounds' copies and sums
  // (the bytes each rank moves through memory: no copy-in, one write of its part).
  const double a = 1e-6, B = 5e9, G = 8e9;
  const Fabric f = simple_fabric(a, B, G);
  CollOptions reg;
  reg.registered = true;
  const double n = 16.0 * (1 << 20);
  EXPECT_NEAR(collective_time(f, Op::Allreduce, "shm", Topology{1, 4}, n, reg),
              3 * a + (2.75 / 4.5) * (2 * 0.75 * n / B + 0.75 * n / G), 1e-12);
  // Below it the rounds run as on private buffers.
  const double small = static_cast<double>(plan::kShmZeroCopyMinBytes) - 4;
  EXPECT_DOUBLE_EQ(collective_time(f, Op::Allreduce, "shm", Topology{1, 2}, small, reg),
                   collective_time(f, Op::Allreduce, "shm", Topology{1, 2}, small));
  // Other algorithms do not read peers' buffers: registration changes nothing.
  EXPECT_DOUBLE_EQ(collective_time(f, Op::Allreduce, "ring", Topology{1, 4}, n, reg),
                   collective_time(f, Op::Allreduce, "ring", Topology{1, 4}, n));
  // No segment: the working set is the buffers alone.
  EXPECT_DOUBLE_EQ(node_working_set(Op::Allreduce, "shm", Topology{1, 2}, n, reg), 2 * 2 * n);
}

TEST(Collectives, ChunkPipelining) {
  // No gamma, one node: chunking only adds per-chunk alpha (shared memory: every chunk pays
  // it): step = k a + m/B.
  const double a = 10e-6, B = 1e9;
  const Fabric f = simple_fabric(a, B);
  const double n = 8.0 * (1 << 20), p = 8, m = n / p, C = 256 * 1024;
  const double k = m / C;  // 4 chunks
  const double alphas = k;
  CollOptions o;
  o.chunk_bytes = C;
  EXPECT_NEAR(collective_time(f, Op::Allreduce, "ring", Topology{1, 8}, n, o), 2 * (p - 1) * (alphas * a + m / B),
              1e-12);
  // With gamma the reduction of one chunk overlaps the next chunk's transfer.
  const double G = 2e9;
  const Fabric fg = simple_fabric(a, B, G);
  const double c = C;
  const double rs_step = alphas * a + k * std::max(c / B, c / G) + std::min(c / B, c / G);
  const double ag_step = alphas * a + m / B;
  EXPECT_NEAR(collective_time(fg, Op::Allreduce, "ring", Topology{1, 8}, n, o), (p - 1) * (rs_step + ag_step), 1e-12);
  // ...which beats the unpipelined ring when the reduction is slow enough.
  const Fabric slow = simple_fabric(1e-6, B, 1e9);
  EXPECT_LT(collective_time(slow, Op::Allreduce, "ring", Topology{1, 8}, n, o),
            collective_time(slow, Op::Allreduce, "ring", Topology{1, 8}, n));
  // Between nodes small chunks keep 1 MiB in flight (32 KiB: W = 32) and share the network
  // latency, so on a slow link with a long latency (the 1 Gbit/s testbed: 64 us, 262 us per 32 KiB chunk) the ring runs at the
  // link's rate: within 1% of the unchunked ring, not 1 + a/(c/B) = 1.24x of it.
  const Fabric tcp = simple_fabric(64e-6, 0.125e9);
  CollOptions small;
  small.chunk_bytes = 32 * 1024;
  EXPECT_EQ(gradsync::plan::pipeline_slots(32 * 1024), 32u);
  const double whole = collective_time(tcp, Op::Allreduce, "ring", Topology{2, 1}, 64.0 * (1 << 20));
  const double chunked = collective_time(tcp, Op::Allreduce, "ring", Topology{2, 1}, 64.0 * (1 << 20), small);
  EXPECT_GT(chunked, whole);
  EXPECT_LT(chunked, 1.01 * whole);
}

TEST(Collectives, FlatRingAcrossNodesIsInterLimited) {
  const Fabric f = two_level();
  const double n = 64e6;
  // 2 nodes x 4: every step waits for the inter-node edge.
  const double p = 8, m = n / p;
  const double step = std::max(f.intra.alpha_s + m / f.intra.bw_Bps, f.inter.alpha_s + m / f.inter.bw_Bps);
  EXPECT_NEAR(collective_time(f, Op::Allreduce, "ring", Topology{2, 4}, n), 2 * (p - 1) * step, 1e-12);
  // hier (runtime/algos/hier.cpp): the node's shm engine in one round (copy-in of (g-1)/g,
  // sums, copy-out of (g-1)/g, two syncs) with, between its sums and its copy-out, an inter
  // ring of each rank's part n/4 among 2 nodes, 4 flows per NIC.
  const double g = 4, shard = n / g;
  const double hier = 2 * f.intra.alpha_s + 2 * (g - 1) / g * n / f.intra.bw_Bps +
                      2 * (f.inter.alpha_s + shard / 2 * g / f.inter.bw_Bps);
  EXPECT_NEAR(collective_time(f, Op::Allreduce, "hier", Topology{2, 4}, n), hier, 1e-12);
  EXPECT_LT(hier, 2 * (p - 1) * step);
}

TEST(Collectives, HierNodeStepIgnoresTheInterNodeChunk) {
  // The runtime's hier sums on the node through shm, one round of the whole vector; the
  // chunk (32 KiB between nodes over TCP by default) is the inter ring's only. A node level
  // whose alpha is 300 us (what a 2-core host's sweep fitted past the cache) must not be paid
  // per 32 KiB of the node's steps: 16 MiB on 2 nodes of 2 ranks once cost 159 ms so (the
  // namespace testbed measured 29 ms; 2026-12-06, netmodel/README.md).
  Fabric f = two_level();
  f.intra.alpha_s = 300e-6;
  const double n = 16.0 * (1 << 20);
  CollOptions small, whole;
  small.chunk_bytes = 32 * 1024;
  whole.chunk_bytes = 4 << 20;
  const double t_small = collective_time(f, Op::Allreduce, "hier", Topology{2, 2}, n, small);
  const double t_whole = collective_time(f, Op::Allreduce, "hier", Topology{2, 2}, n, whole);
  EXPECT_LT(t_small, 1.1 * t_whole);
  EXPECT_LT(t_small, 2 * (n / 2 / (32 * 1024)) * f.intra.alpha_s) << "node-local steps priced per chunk";
  // Its node part is shm's on one node in one round, private buffers.
  CollOptions one;
  one.chunk_bytes = n;
  one.registered = false;
  const double node = collective_time(f, Op::Allreduce, "shm", Topology{1, 2}, n, one);
  // ... and the inter ring all-reduces each rank's part n/2 across the 2 nodes (steps of n/4,
  // 2 flows per NIC; a 4 MiB chunk is the whole step).
  EXPECT_NEAR(t_whole, node + 2 * (f.inter.alpha_s + n / 4 * 2 / f.inter.bw_Bps), 1e-12);
}

// ---- collective formulas against brute-force schedules -------------------------------------

namespace {

struct Msg {
  int src, dst;
  double bytes, reduce;
};

// Costs explicit message lists: a step takes as long as its slowest message; a message
// between nodes shares its NIC with the other off-node messages of the same node and
// direction in that step.
double brute_cost(const Fabric& f, int g, const std::vector<std::vector<Msg>>& steps) {
  double total = 0;
  for (const auto& st : steps) {
    std::map<int, int> out, in;
    for (const auto& m : st)
      if (m.src / g != m.dst / g) {
        out[m.src / g]++;
        in[m.dst / g]++;
      }
    double worst = 0;
    for (const auto& m : st) {
      double t;
      if (m.src / g == m.dst / g) {
        t = f.intra.alpha(m.bytes) + m.bytes / f.intra.bw(m.bytes) + m.reduce / f.intra.gamma_Bps;
      } else {
        const int s = std::max(out[m.src / g], in[m.dst / g]);
        t = f.inter.alpha(m.bytes) + m.bytes * s / f.inter.bw(m.bytes) + m.reduce / f.inter.gamma_Bps;
      }
      worst = std::max(worst, t);
    }
    total += worst;
  }
  return total;
}

std::vector<std::vector<Msg>> ring_schedule(int p, double n) {
  std::vector<std::vector<Msg>> s;
  for (int k = 0; k < 2 * (p - 1); ++k) {
    std::vector<Msg> st;
    for (int r = 0; r < p; ++r) st.push_back({r, (r + 1) % p, n / p, k < p - 1 ? n / p : 0});
    s.push_back(st);
  }
  return s;
}

// MPICH-style recursive doubling / Rabenseifner with the non-power-of-two pre/post step.
std::vector<std::vector<Msg>> xor_schedule_bf(int p, double n, bool rab) {
  int pp = 1;
  while (pp * 2 <= p) pp *= 2;
  const int rem = p - pp;
  auto real = [&](int q) { return q < rem ? 2 * q + 1 : q + rem; };
  std::vector<std::vector<Msg>> s;
  if (rem) {
    std::vector<Msg> st;
    for (int i = 0; i < rem; ++i) st.push_back({2 * i, 2 * i + 1, n, n});
    s.push_back(st);
  }
  std::vector<int> dists;
  for (int d = 1; d < pp; d *= 2) dists.push_back(d);
  if (!rab) {
    for (int d : dists) {
      std::vector<Msg> st;
      for (int q = 0; q < pp; ++q) st.push_back({real(q), real(q ^ d), n, n});
      s.push_back(st);
    }
  } else {
    double m = n;
    for (int d : dists) {
      m /= 2;
      std::vector<Msg> st;
      for (int q = 0; q < pp; ++q) st.push_back({real(q), real(q ^ d), m, m});
      s.push_back(st);
    }
    for (auto it = dists.rbegin(); it != dists.rend(); ++it) {
      std::vector<Msg> st;
      for (int q = 0; q < pp; ++q) st.push_back({real(q), real(q ^ *it), m, 0});
      s.push_back(st);
      m *= 2;
    }
  }
  if (rem) {
    std::vector<Msg> st;
    for (int i = 0; i < rem; ++i) st.push_back({2 * i + 1, 2 * i, n, 0});
    s.push_back(st);
  }
  return s;
}

std::vector<std::vector<Msg>> tree_schedule_bf(int p, double n) {
  std::vector<std::vector<Msg>> red, s;
  for (int d = 1; d < p; d *= 2) {
    std::vector<Msg> st;
    for (int r = 0; r < p; ++r)
      if (r % (2 * d) == d) st.push_back({r, r - d, n, n});
    red.push_back(st);
  }
  for (const auto& st : red) s.push_back(st);
  for (auto it = red.rbegin(); it != red.rend(); ++it) {
    std::vector<Msg> b;
    for (const auto& m : *it) b.push_back({m.dst, m.src, n, 0});
    s.push_back(b);
  }
  return s;
}

std::vector<std::vector<Msg>> alltoall_schedule_bf(int p, double n) {
  std::vector<std::vector<Msg>> s;
  for (int k = 1; k < p; ++k) {
    std::vector<Msg> st;
    for (int r = 0; r < p; ++r) st.push_back({r, (r + k) % p, n / p, 0});
    s.push_back(st);
  }
  return s;
}

}  // namespace

TEST(Collectives, MatchBruteForceSchedules) {
  for (double gamma : {kInf, 5e9}) {
    const Fabric f = two_level(gamma);
    for (int nodes = 1; nodes <= 5; ++nodes) {
      for (int g = 1; g <= 4; ++g) {
        const int p = nodes * g;
        if (p < 2) continue;
        const Topology t{nodes, g};
        for (double n : {1024.0, 3.0e6}) {
          const std::string where = std::to_string(nodes) + "x" + std::to_string(g) + " n=" + std::to_string(n);
          auto near = [&](double a, double b) { EXPECT_NEAR(a, b, 1e-12 + 1e-12 * b) << where; };
          near(collective_time(f, Op::Allreduce, "ring", t, n), brute_cost(f, g, ring_schedule(p, n)));
          near(collective_time(f, Op::Allreduce, "rd", t, n), brute_cost(f, g, xor_schedule_bf(p, n, false)));
          near(collective_time(f, Op::Allreduce, "rabenseifner", t, n), brute_cost(f, g, xor_schedule_bf(p, n, true)));
          near(collective_time(f, Op::Allreduce, "tree", t, n), brute_cost(f, g, tree_schedule_bf(p, n)));
          near(collective_time(f, Op::Alltoall, "ring", t, n), brute_cost(f, g, alltoall_schedule_bf(p, n)));
        }
      }
    }
  }
}

// ---- compressors ----------------------------------------------------------------------------

TEST(Compress, WireBytes) {
  const DeviceRates rt{1e12, 1e11};
  // PowerSGD rank 4 on a 1000 x 500 matrix + a bias of 1000 (never compressed).
  const std::vector<GradShape> ts = {{500000, 1000, 2}, {1000, 1000, 1}};
  const BucketPlan p = Compressor("powersgd:rank=4").plan(ts, 4, 8, rt);
  ASSERT_EQ(p.phases.size(), 3u);
  EXPECT_DOUBLE_EQ(p.phases[0].bytes, 1000 * 4);      // the bias, uncompressed
  EXPECT_DOUBLE_EQ(p.phases[1].bytes, 1000 * 4 * 4);  // P: n r
  EXPECT_DOUBLE_EQ(p.phases[2].bytes, 500 * 4 * 4);   // Q: m r
  // Too small to compress: (n + m) r min_rate >= n m.
  const BucketPlan small = Compressor("powersgd:rank=4").plan({{64, 8, 2}}, 4, 8, rt);
  ASSERT_EQ(small.phases.size(), 1u);
  // QSGD 16 levels: one code byte per element (sign + 7-bit level), + one fp32 norm per 512;
  // all-gather: (p - 1) x the message on the wire.
  const BucketPlan q = Compressor("qsgd:levels=16").plan({{1024, 1024, 1}}, 4, 8, rt);
  EXPECT_DOUBLE_EQ(q.payload_bytes, 1024 + 2 * 4);
  EXPECT_DOUBLE_EQ(q.wire_bytes, 7 * (1024 + 2 * 4));
  EXPECT_EQ(q.phases[0].op, Op::Allgather);
  // The runtime's limits: levels 1..127 (one byte), levels and rank required.
  EXPECT_THROW(Compressor("qsgd:levels=200"), UsageError);
  EXPECT_THROW(Compressor("qsgd"), UsageError);
  EXPECT_THROW(Compressor("powersgd"), UsageError);
  // Odd sizes: codes padded to 4 bytes.
  EXPECT_DOUBLE_EQ(Compressor("qsgd:levels=127,bucket=1024").plan({{1001, 1001, 1}}, 4, 8, rt).payload_bytes, 1004 + 4);
  // PowerSGD's rank is capped by the matrix: a 3 x 4000 matrix at rank 8 uses r = 3
  // (compressible only with min_rate < 1 then).
  const BucketPlan capped = Compressor("powersgd:rank=8,min_rate=0.5").plan({{12000, 3, 2}}, 4, 2, rt);
  ASSERT_EQ(capped.phases.size(), 2u);
  EXPECT_DOUBLE_EQ(capped.phases[0].bytes, 3 * 3 * 4);
  EXPECT_DOUBLE_EQ(capped.phases[1].bytes, 4000 * 3 * 4);
  // onebit: chunks of ceil(n/p) rounded up to 32 elements; all-to-all of p x c/8 bytes.
  const BucketPlan ob = Compressor("onebit").plan({{1000, 1000, 1}}, 4, 3, rt);
  EXPECT_DOUBLE_EQ(ob.phases[0].bytes, 3 * 352 / 8);  // c = ceil(1000/3) = 334 -> 352
  EXPECT_DOUBLE_EQ(ob.payload_bytes, 3 * 44 + 3 * 4 + 44 + 4);
  // top-k: k = ceil(F n) int32 + fp32 pairs, at least one.
  EXPECT_DOUBLE_EQ(Compressor("topk:ratio=0.01").plan({{50, 50, 1}}, 4, 2, rt).payload_bytes, 8);
  // fp16 precision halves the wire bytes of "none".
  EXPECT_DOUBLE_EQ(Compressor("none").plan({{1000, 1000, 1}}, 2, 8, rt).phases[0].bytes, 2000);
  // ... but not PowerSGD's or top-k's own formats (fp32 at any precision, as the runtime).
  EXPECT_DOUBLE_EQ(Compressor("powersgd:rank=4").plan(ts, 2, 8, rt).payload_bytes, p.payload_bytes);
  EXPECT_DOUBLE_EQ(Compressor("topk:ratio=0.1").plan({{1000, 1000, 1}}, 2, 8, rt).payload_bytes, 800);
  EXPECT_EQ(Compressor("sign").name(), "onebit");
  EXPECT_THROW(Compressor("zip"), UsageError);
  EXPECT_THROW(Compressor("powersgd:rnk=4"), UsageError);
  EXPECT_THROW(Compressor("topk:ratio=0"), UsageError);
}

// ---- timeline -------------------------------------------------------------------------------

namespace {
// Three tensors of 1 MiB (fp32) ready at 1, 2, 3 ms after backward start; buckets of 1 MiB.
Workload three_grads() {
  Workload w;
  w.forward_s = 2e-3;
  w.backward_s = 3e-3;
  w.optimizer_s = 0.5e-3;
  for (int i = 0; i < 3; ++i) w.grads.push_back({GradShape{262144, 262144, 1}, (i + 1) * 1e-3});
  return w;
}
std::vector<Bucket> planned(const Workload& w) {
  auto bs = make_buckets(w.grads, 1, 1);
  for (auto& b : bs) b.plan = Compressor("none").plan(b.tensors, 4, 2, DeviceRates{});
  return bs;
}
}  // namespace

TEST(Timeline, Bucketing) {
  std::vector<ReadyGrad> g;
  const int64_t mib_elems = 262144;
  for (int64_t n : {mib_elems / 2, mib_elems, mib_elems / 4, mib_elems / 4, mib_elems * 3, int64_t{10}})
    g.push_back({GradShape{n, n, 1}, 0});
  // first bucket 1 MiB: 0.5 + 1 crosses -> {0,1}; then 2 MiB: 0.25+0.25+3 crosses -> {2,3,4}; {5}
  const auto bs = make_buckets(g, 2, 1);
  ASSERT_EQ(bs.size(), 3u);
  EXPECT_EQ(bs[0].tensors.size(), 2u);
  EXPECT_EQ(bs[1].tensors.size(), 3u);
  EXPECT_EQ(bs[2].tensors.size(), 1u);
}

TEST(Timeline, FullOverlapHidesAllButTheLastBucketTail) {
  // Comm of one bucket: 0.1 ms (2 ranks, alpha 0, bw chosen so that 2 x 1/2 x 1 MiB / B = 0.1 ms).
  const double comm = 1e-4;
  const Fabric f = simple_fabric(0, 1048576.0 / comm);
  const Workload w = three_grads();
  const auto bs = planned(w);
  ASSERT_EQ(bs.size(), 3u);
  const StepResult r = simulate_step(w, bs, f, NetConfig{1, 2, "ring", 0, 1}, StepConfig{32, true, 1, 4, 0}, 0);
  // Buckets start when ready (1, 2, 3 ms after backward start at 2 ms) and take 0.1 ms.
  EXPECT_NEAR(r.buckets[0].start_s, 3e-3, 1e-12);
  EXPECT_NEAR(r.buckets[2].end_s, 5.1e-3, 1e-12);
  EXPECT_NEAR(r.comm_exposed_s, comm, 1e-12);  // the last bucket's tail
  EXPECT_NEAR(r.step_time_s, 2e-3 + 3e-3 + comm + 0.5e-3, 1e-12);
  EXPECT_NEAR(r.comm_total_s, 3 * comm, 1e-12);
}

TEST(Timeline, NoOverlapExposesEverything) {
  const double comm = 1e-4;
  const Fabric f = simple_fabric(0, 1048576.0 / comm);
  const Workload w = three_grads();
  const StepResult r = simulate_step(w, planned(w), f, NetConfig{1, 2, "ring", 0, 1}, StepConfig{32, false, 1, 4, 0}, 0);
  EXPECT_NEAR(r.comm_exposed_s, 3 * comm, 1e-12);
  EXPECT_NEAR(r.buckets[0].start_s, 5e-3, 1e-12);
  EXPECT_NEAR(r.step_time_s, 5e-3 + 3 * comm + 0.5e-3, 1e-12);
}

TEST(Timeline, SlowNetworkQueuesBuckets) {
  // Comm of 2.5 ms per bucket: buckets queue on the stream; the tail is everything that
  // cannot fit after the first bucket's ready time: end = 3 ms + 3 x 2.5 ms.
  const double comm = 2.5e-3;
  const Fabric f = simple_fabric(0, 1048576.0 / comm);
  const Workload w = three_grads();
  const StepResult r = simulate_step(w, planned(w), f, NetConfig{1, 2, "ring", 0, 1}, StepConfig{32, true, 1, 4, 0}, 1000);
  EXPECT_NEAR(r.buckets[1].start_s, r.buckets[0].end_s, 1e-15);  // no earlier than the previous end
  EXPECT_NEAR(r.buckets[2].end_s, 3e-3 + 3 * comm, 1e-12);
  EXPECT_NEAR(r.comm_exposed_s, 3e-3 + 3 * comm - 5e-3, 1e-12);
  // Epoch: ceil(1000 / (32 x 2)) = 16 steps.
  EXPECT_EQ(r.steps_per_epoch, 16);
  EXPECT_NEAR(r.epoch_time_s, 16 * r.step_time_s, 1e-12);
}

TEST(Timeline, DataLoading) {
  const Fabric f = simple_fabric(0, 1e12);
  const Workload w = three_grads();
  // 32 samples x 1 ms = 32 ms of loading; 0 workers: serial.
  StepResult r = simulate_step(w, planned(w), f, NetConfig{1, 2, "ring", 0, 1}, StepConfig{32, true, 1, 0, 1e-3}, 0);
  EXPECT_NEAR(r.data_s, 32e-3, 1e-12);
  // 4 workers: 8 ms in the background vs a ~5.5 ms step: 2.5 ms exposed (approximately).
  r = simulate_step(w, planned(w), f, NetConfig{1, 2, "ring", 0, 1}, StepConfig{32, true, 1, 4, 1e-3}, 0);
  EXPECT_NEAR(r.data_s + (r.step_time_s - r.data_s), 8e-3, 1e-12);
  // 16 workers: hidden.
  r = simulate_step(w, planned(w), f, NetConfig{1, 2, "ring", 0, 1}, StepConfig{32, true, 1, 16, 1e-3}, 0);
  EXPECT_EQ(r.data_s, 0);
}

TEST(Timeline, ShapedLinkBurstThenSustainedRate) {
  // 2 nodes x 1 rank over a token bucket: sustained 1e5 B/s, burst 1000 B, unlimited peak,
  // alpha 0. Two buckets of 700 B (2-rank ring: each rank sends 700 B) ready 1 ms apart at
  // the end of a 1 s backward. The first fits in the full bucket (0 s; 300 B left); 1 ms
  // refills 100 B, so the second sends 400 B on tokens (0 s) and 300 B at the rate: 3 ms,
  // leaving the bucket empty. Between steps it refills: every step is the same.
  Fabric f = simple_fabric(0, 1e5);
  f.inter.burst_bytes = 1000;
  Workload w;
  w.backward_s = 1.0;
  std::vector<Bucket> bs(2);
  for (int b = 0; b < 2; ++b) {
    bs[b].tensors = {GradShape{175, 175, 1}};
    bs[b].grad_bytes = 700;
    bs[b].ready_s = 0.999 + 1e-3 * b;
    bs[b].plan.phases = {Phase{0, Op::Allreduce, 700}};
  }
  const StepConfig st{32, true, 1, 4, 0};
  StepResult r = simulate_step(w, bs, f, NetConfig{2, 1, "ring", 0, 1}, st, 0);
  EXPECT_NEAR(r.buckets[0].end_s - r.buckets[0].start_s, 0, 1e-12);
  EXPECT_NEAR(r.buckets[1].end_s - r.buckets[1].start_s, 3e-3, 1e-12);
  EXPECT_NEAR(r.step_time_s, 1.003, 1e-12);
  // A short step cannot refill the bucket: the link's rate sets the step time. One 700 B
  // bucket per step after 1 ms of backward: in steady state the step lasts 700 B / rate.
  Workload ws;
  ws.backward_s = 1e-3;
  std::vector<Bucket> one(1, bs[0]);
  one[0].ready_s = 1e-3;
  r = simulate_step(ws, one, f, NetConfig{2, 1, "ring", 0, 1}, st, 0);
  EXPECT_NEAR(r.step_time_s, 700 / 1e5, 1e-6);
  // One node: the shaper (an inter-node link) is not on the path; both take 7 ms, queued.
  r = simulate_step(w, bs, f, NetConfig{1, 2, "ring", 0, 1}, st, 0);
  EXPECT_NEAR(r.step_time_s, 0.999 + 2 * 7e-3, 1e-12);
  // No burst: the same queueing across nodes.
  f.inter.burst_bytes = 0;
  r = simulate_step(w, bs, f, NetConfig{2, 1, "ring", 0, 1}, st, 0);
  EXPECT_NEAR(r.step_time_s, 0.999 + 2 * 7e-3, 1e-12);
}

PredictConfig resnet50_on(const std::string& fabric, int nodes, int ranks_per_node) {
  PredictConfig c;
  c.model = "resnet50";
  c.fabric = fabric;
  c.nodes = nodes;
  c.ranks_per_node = ranks_per_node;
  return c;
}

TEST(Predict, RegisteredBucketsSpeedUpShmOnlyForPlainBuckets) {
  // One node of 2 ranks on shm: a plain fp32 bucket is all-reduced in place, so registered
  // buckets (gradsync-train's default) skip shm's copy-in; a cast bucket (fp16) is
  // all-reduced in a wire buffer of its own and costs the same either way.
  Predictor p;
  PredictConfig c = resnet50_on("shm-local", 1, 2);
  c.algo = "shm";
  c.overlap = false;
  const StepResult reg = p.predict(c);
  c.registered_buckets = false;
  const StepResult priv = p.predict(c);
  EXPECT_LT(reg.comm_total_s, 0.9 * priv.comm_total_s);
  c.precision = "fp16";
  const StepResult half_priv = p.predict(c);
  c.registered_buckets = true;
  EXPECT_DOUBLE_EQ(p.predict(c).comm_total_s, half_priv.comm_total_s);
  // ring reads no peer's buffer: the same either way.
  c.precision = "fp32";
  c.algo = "ring";
  const StepResult ring_reg = p.predict(c);
  c.registered_buckets = false;
  EXPECT_DOUBLE_EQ(p.predict(c).comm_total_s, ring_reg.comm_total_s);
}

TEST(Predict, ResNet50Sanity) {
  Predictor p;
  PredictConfig c = resnet50_on("roce-100g", 2, 8);
  const StepResult r = p.predict(c);
  EXPECT_GT(r.buckets.size(), 3u);
  int64_t bytes = 0;
  for (const auto& b : r.buckets) bytes += b.grad_bytes;
  EXPECT_EQ(bytes, 25557032LL * 4);
  EXPECT_GE(r.step_time_s, r.forward_s + r.backward_s);
  // Slower fabric, slower step; more compression, fewer bytes.
  c.fabric = "seed-tcp";
  const StepResult slow = p.predict(c);
  EXPECT_GT(slow.step_time_s, r.step_time_s);
  c.compress = "powersgd:rank=4";
  EXPECT_LT(p.predict(c).bytes_sent, slow.bytes_sent / 10);
  c.compress = "none";
  c.precision = "fp16";
  EXPECT_NEAR(p.predict(c).bytes_sent, slow.bytes_sent / 2, 1);
  c.model = "no-such-model";
  EXPECT_THROW(p.predict(c), UsageError);
}

// ---- grids ----------------------------------------------------------------------------------

TEST(Grid, ParseLists) {
  EXPECT_EQ(parse_number_list("8", "--nodes"), std::vector<double>({8}));
  EXPECT_EQ(parse_number_list("1,2,4", "--nodes"), std::vector<double>({1, 2, 4}));
  EXPECT_EQ(parse_number_list("1..4", "--nodes"), std::vector<double>({1, 2, 3, 4}));
  EXPECT_EQ(parse_number_list("0..100:25", "--nodes"), std::vector<double>({0, 25, 50, 75, 100}));
  EXPECT_EQ(parse_number_list("1,4..5", "--nodes"), std::vector<double>({1, 4, 5}));
  EXPECT_EQ(parse_number_list("4M", "--chunk-bytes"), std::vector<double>({4194304}));
  EXPECT_NE(usage_error_of([] { parse_number_list("5..1", "--nodes"); }).find("--nodes"), std::string::npos);
  EXPECT_THROW(parse_number_list("1..5:0", "--nodes"), UsageError);
  EXPECT_THROW(parse_number_list("x", "--nodes"), UsageError);
  EXPECT_THROW(parse_number_list("1,,2", "--nodes"), UsageError);
  EXPECT_THROW(parse_number_list("1.5..3", "--nodes"), UsageError);
}

TEST(Grid, ChunkAutoIsTheRuntimesOwn) {
  // `--chunk-bytes auto` (as gradsync-bench and gradsync-train take it) prices the chunk the
  // runtime picks when none is given: plan::chunk_used(algo, nodes, 0); 0 stays unpipelined.
  EXPECT_EQ(parse_chunk_list("auto", "--chunk-bytes"), std::vector<double>({kAutoChunk}));
  EXPECT_EQ(parse_chunk_list("0,auto,4M", "--chunk-bytes"), std::vector<double>({0, kAutoChunk, 4194304}));
  EXPECT_NE(usage_error_of([] { parse_chunk_list("-5", "--chunk-bytes"); }).find("or auto"), std::string::npos);
  EXPECT_THROW(parse_chunk_list("autox", "--chunk-bytes"), UsageError);
  EXPECT_THROW(parse_chunk_list("auto,", "--chunk-bytes"), UsageError);
  Predictor p;
  PredictConfig c;
  c.model = "resnet18-cifar";
  c.fabric = "seed-tcp";
  c.compute_profile = "a100";
  bool differs = false;  // between nodes over TCP the runtime's chunk is not "none"
  for (const char* algo : {"ring", "rd", "rabenseifner", "mpi", "auto", "hier", "shm"})
    for (int nodes : {1, 2, 4}) {
      if (std::string(algo) == "shm" && nodes > 1) continue;
      c.algo = algo;
      c.nodes = nodes;
      c.ranks_per_node = 2;
      c.chunk_bytes = kAutoChunk;
      const double own = static_cast<double>(plan::chunk_used(algo, nodes, 0));
      EXPECT_EQ(chunk_priced(c), own) << algo << " on " << nodes;
      const double t_auto = p.predict(c, false).step_time_s;
      c.chunk_bytes = own;  // the same chunk given in bytes (0 where the runtime runs whole messages)
      EXPECT_DOUBLE_EQ(t_auto, p.predict(c, false).step_time_s) << algo << " on " << nodes;
      c.chunk_bytes = 0;
      differs = differs || t_auto != p.predict(c, false).step_time_s;
    }
  EXPECT_TRUE(differs);
}

TEST(Grid, CrossProductMatchesSinglePredictions) {
  PredictConfig base;
  base.model = "resnet18-cifar";
  base.fabric = "tcp-25g";
  base.compute_profile = "a100";
  std::vector<Axis> axes(3);
  axes[0] = {"nodes", {1, 2, 4}, {}};
  axes[1] = {"bucket-mb", {1, 25}, {}};
  axes[2] = {"fabric", {}, {"tcp-25g", "ib-hdr"}};
  Predictor p;
  const GridTable g = run_grid(base, axes, p);
  ASSERT_EQ(g.rows, 12u);
  // Row 7 = nodes 4 (index 1), bucket 25 (index 1), fabric ib-hdr (index 1)... the last axis is fastest.
  const std::size_t row = 1 * 4 + 1 * 2 + 1;
  EXPECT_EQ(g.axis_numbers[0][row], 2);
  EXPECT_EQ(g.axis_numbers[1][row], 25);
  EXPECT_EQ(g.axis_strings[0][row], "ib-hdr");
  PredictConfig c = base;
  c.nodes = 2;
  c.bucket_mb = 25;
  c.fabric = "ib-hdr";
  EXPECT_DOUBLE_EQ(g.step_time_s[row], p.predict(c).step_time_s);
  const std::string out = tmp_path("grid.h5");
  write_grid(g, out, {"test"});
  h5::Reader r(out);
  EXPECT_EQ(r.read_double("/grid/step_time_s").size(), 12u);
  EXPECT_EQ(r.read_strings("/grid/fabric")[row], "ib-hdr");
}

// ---- calibration ------------------------------------------------------------------------------

namespace {

// Writes a synthetic gradsync-bench file (results/README.md schema) whose raw per-iteration
// times come from `fabric` with multiplicative noise.
std::string bench_file(const std::string& name, const std::string& op, const std::string& algo, int nodes, int rpn,
                       const std::vector<int64_t>& sizes, const Fabric& fabric, double noise, unsigned seed,
                       const std::function<void(h5::Writer&)>& extra = {}, const std::string& dtype = "float",
                       double chunk = 0) {
  const std::string path = tmp_path(name);
  h5::Writer w(path);
  Provenance prov;
  prov.program = "gradsync-bench";
  prov.argv = {"gradsync-bench", "-o", path};
  prov.hostnames.assign(static_cast<std::size_t>(nodes * rpn), "host");
  prov.nranks = nodes * rpn;
  prov.nnodes = nodes;
  write_provenance(w, prov);
  const int iters = 20;
  std::mt19937 rng(seed);
  std::normal_distribution<double> nd(0.0, noise);
  const Topology t{nodes, rpn};
  const Op o = parse_op(op);
  std::vector<double> raw, avg, algbw, busbw;
  std::vector<int64_t> count, nwrong;
  std::vector<std::string> used;
  for (int64_t s : sizes) {
    CollOptions co;
    co.chunk_bytes = chunk;
    if (op != "pingpong") co.reduce_dtype = parse_dtype(dtype);
    const double base = collective_time(fabric, o, algo, t, static_cast<double>(s), co) * 1e6;
    double sum = 0;
    for (int i = 0; i < iters; ++i) {
      const double v = base * (1 + nd(rng));
      raw.push_back(v);
      sum += v;
    }
    avg.push_back(sum / iters);
    algbw.push_back(s / (sum / iters) / 1e3);
    busbw.push_back(algbw.back() * busbw_factor(o, t.ranks()));
    count.push_back(s / 4);
    nwrong.push_back(0);
    used.push_back(resolve_algo(algo, o, static_cast<double>(s), t));
  }
  const std::vector<uint64_t> dims = {sizes.size(), static_cast<uint64_t>(iters)};
  w.write("/size_bytes", sizes);
  w.write("/count", count);
  w.write("/algo_used", used);
  if (op == "pingpong") {
    w.write("/pingpong/half_rtt_us", raw, dims);
    w.write("/pingpong/bw_GBps", algbw);
  } else {
    for (const std::string g : {"/oop", "/ip"}) {
      w.write(g + "/time_us", raw, dims);
      w.write(g + "/time_us_avg", avg);
      w.write(g + "/algbw_GBps", algbw);
      w.write(g + "/busbw_GBps", busbw);
      w.write(g + "/nwrong", nwrong);
    }
  }
  w.attr("/", "op", op);
  w.attr("/", "algo", algo);
  w.attr("/", "dtype", dtype);
  w.attr("/", "redop", std::string("sum"));
  w.attr("/", "ranks_per_node", static_cast<int64_t>(rpn));
  w.attr("/", "chunk_bytes", static_cast<int64_t>(0));
  w.attr("/", "chunk_bytes_used", static_cast<int64_t>(chunk));
  w.attr("/", "channels", static_cast<int64_t>(1));
  w.attr("/", "iters", static_cast<int64_t>(iters));
  w.attr("/", "warmup", static_cast<int64_t>(5));
  w.attr("/", "check", static_cast<int64_t>(1));
  w.attr("/", "root", static_cast<int64_t>(0));
  if (extra) extra(w);
  w.commit();
  return path;
}

std::vector<int64_t> pow2_sizes(int64_t lo, int64_t hi) {
  std::vector<int64_t> v;
  for (int64_t s = lo; s <= hi; s *= 2) v.push_back(s);
  return v;
}

// The points of three sweeps of `planted` on 4 nodes x 1 rank (the ping-pong on 2), each
// with relative noise `noise`: ping-pong, rd and ring all-reduce (files named prefix-*.h5).
std::vector<BenchPoint> three_sweeps(const std::string& prefix, const std::vector<int64_t>& sizes,
                                     const Fabric& planted, double noise) {
  std::vector<BenchPoint> pts;
  for (const auto& f : {bench_file(prefix + "-pp.h5", "pingpong", "ring", 2, 1, sizes, planted, noise, 1),
                        bench_file(prefix + "-rd.h5", "allreduce", "rd", 4, 1, sizes, planted, noise, 2),
                        bench_file(prefix + "-ring.h5", "allreduce", "ring", 4, 1, sizes, planted, noise, 3)}) {
    auto v = read_bench_file(f);
    pts.insert(pts.end(), v.begin(), v.end());
  }
  return pts;
}

}  // namespace

TEST(Calibrate, RecoversAlphaBetaGammaWithinOnePercent) {
  Fabric planted = simple_fabric(12e-6, 3.0e9, 2.0e9);
  planted.name = "planted";
  const auto sizes = pow2_sizes(8, 64 << 20);
  std::vector<BenchPoint> pts = three_sweeps("abg", sizes, planted, 0.02);
  const FabricFit fit = calibrate_fabric(pts, "fitted");
  ASSERT_EQ(fit.levels.size(), 1u);
  const LevelFit& l = fit.levels[0];
  EXPECT_EQ(l.level, "inter");
  EXPECT_TRUE(l.params.regimes.empty()) << "no breakpoint was planted";
  EXPECT_NEAR(l.params.alpha_s / 12e-6, 1.0, 0.01);
  EXPECT_NEAR(l.params.bw_Bps / 3.0e9, 1.0, 0.01);
  ASSERT_TRUE(l.gamma_fitted) << l.notes;
  EXPECT_NEAR(l.params.gamma_Bps / 2.0e9, 1.0, 0.01);
  EXPECT_GT(l.r2, 0.999);
  EXPECT_LT(l.max_abs_rel_residual, 0.05);
  // Written and read back.
  const std::string out = tmp_path("fitted.toml");
  save_fabric(fit.fabric, out);
  EXPECT_NEAR(load_fabric(out).inter.bw_Bps / 3.0e9, 1.0, 0.01);
}

TEST(Calibrate, ChunkedSharedMemoryRingIsPricedAsFitted) {
  // On a host's shared memory (cores_per_node > 0) a rank copies a chunk and reduces the one
  // before on its own core: a chunked ring step costs k (a + c/B + c/G), the sum calibrate's
  // linear fit assumes. Sweeps priced that way (ping-pong, and a ring all-reduce in the
  // runtime's 4 MiB chunks on 2 ranks) are fitted back within 1%, and the fit predicts a
  // chunked 48 MiB all-reduce within 1% of the planted fabric.
  Fabric planted = simple_fabric(5e-6, 8e9, 4e9);
  planted.name = "planted-shm";
  planted.intra.cores_per_node = planted.inter.cores_per_node = 2;
  const double chunk = 4 << 20;
  auto cores = [](h5::Writer& w) { w.attr("/", "cores_per_node", static_cast<int64_t>(2)); };
  const auto sizes = pow2_sizes(1 << 10, 64 << 20);
  std::vector<BenchPoint> pts;
  for (const auto& f : {bench_file("shm-pp.h5", "pingpong", "ring", 1, 2, sizes, planted, 0.005, 1, cores),
                        bench_file("shm-ring.h5", "allreduce", "ring", 1, 2, sizes, planted, 0.005, 2, cores, "float",
                                   chunk)}) {
    auto v = read_bench_file(f);
    pts.insert(pts.end(), v.begin(), v.end());
  }
  const FabricFit fit = calibrate_fabric(pts, "fitted");
  ASSERT_EQ(fit.levels.size(), 1u);
  const LevelFit& l = fit.levels[0];
  EXPECT_EQ(l.level, "intra");
  ASSERT_TRUE(l.gamma_fitted) << l.notes;
  EXPECT_NEAR(l.params.bw_Bps / 8e9, 1.0, 0.01) << l.notes;
  EXPECT_NEAR(l.params.gamma_Bps / 4e9, 1.0, 0.01) << l.notes;
  CollOptions o;
  o.chunk_bytes = chunk;
  const double n = 48.0 * (1 << 20);
  const double want = collective_time(planted, Op::Allreduce, "ring", Topology{1, 2}, n, o);
  EXPECT_NEAR(collective_time(fit.fabric, Op::Allreduce, "ring", Topology{1, 2}, n, o) / want, 1.0, 0.01);
  // The sum, not the overlap of transfer and reduction a network gets: 6 chunks per step.
  const double k = n / 2 / chunk, c = chunk;
  EXPECT_NEAR(want, k * (5e-6 + c / 8e9 + c / 4e9) + k * (5e-6 + c / 8e9), 1e-12);
}

TEST(Calibrate, SixteenBitSumsGetTheirOwnRate) {
  // fp32 sums at 2 GB/s, fp16 sums at 0.5 GB/s per byte (a CPU converting each half),
  // bf16 sums as fp32's. The float sweeps fit alpha, bw and gamma; each 16-bit sweep then
  // its own rate, with the rest fixed.
  Fabric planted = simple_fabric(12e-6, 3.0e9, 2.0e9);
  planted.inter.gamma_fp16_Bps = 0.5e9;
  planted.intra.gamma_fp16_Bps = 0.5e9;
  const auto sizes = pow2_sizes(1024, 64 << 20);
  std::vector<BenchPoint> pts = three_sweeps("g16", sizes, planted, 0.01);
  for (const auto& f : {bench_file("ring-half.h5", "allreduce", "ring", 4, 1, sizes, planted, 0.01, 4, {}, "half"),
                        bench_file("ring-bf16.h5", "allreduce", "ring", 4, 1, sizes, planted, 0.01, 5, {}, "bfloat16")}) {
    auto v = read_bench_file(f);
    pts.insert(pts.end(), v.begin(), v.end());
  }
  const FabricFit fit = calibrate_fabric(pts, "fitted16");
  ASSERT_EQ(fit.levels.size(), 1u);
  const LevelFit& l = fit.levels[0];
  ASSERT_TRUE(l.gamma_fitted) << l.notes;
  EXPECT_NEAR(l.params.gamma_Bps / 2.0e9, 1.0, 0.02);
  EXPECT_NEAR(l.params.gamma_fp16_Bps / 0.5e9, 1.0, 0.02) << l.notes;
  EXPECT_NEAR(l.params.gamma_bf16_Bps / 2.0e9, 1.0, 0.05) << l.notes;
  EXPECT_NE(l.notes.find("half sums: reduced at"), std::string::npos) << l.notes;
  EXPECT_EQ(l.points.size(), 3 * sizes.size()) << "the 16-bit points are not in the fp32 fit";
  // The fitted fabric prices an fp16 all-reduce at its own rate; a written file keeps it.
  CollOptions h;
  h.reduce_dtype = DType::F16;
  const Topology t{4, 1};
  const double n = 16 << 20;
  EXPECT_NEAR(collective_time(fit.fabric, Op::Allreduce, "ring", t, n, h) /
                  collective_time(planted, Op::Allreduce, "ring", t, n, h), 1.0, 0.02);
  EXPECT_GT(collective_time(fit.fabric, Op::Allreduce, "ring", t, n, h),
            1.2 * collective_time(fit.fabric, Op::Allreduce, "ring", t, n));
  const std::string out = tmp_path("fitted16.toml");
  save_fabric(fit.fabric, out);
  EXPECT_DOUBLE_EQ(load_fabric(out).inter.gamma_fp16_Bps, fit.fabric.inter.gamma_fp16_Bps);
  // Ring all-reduce of n bytes on 4 ranks sums 3/4 n: the fp16 rate adds exactly that.
  Fabric g = simple_fabric(12e-6, 3.0e9, 2.0e9);
  const double t32 = collective_time(g, Op::Allreduce, "ring", t, n);
  EXPECT_DOUBLE_EQ(collective_time(g, Op::Allreduce, "ring", t, n, h), t32) << "no 16-bit rate: gamma applies";
  g.inter.gamma_fp16_Bps = 0.5e9;
  EXPECT_NEAR(collective_time(g, Op::Allreduce, "ring", t, n, h) - t32, 0.75 * n * (1 / 0.5e9 - 1 / 2.0e9), 1e-9);
  // A level with only 16-bit sums (here intra: one node of 4 ranks) cannot fit them: named
  // as skipped, while the inter level fits from its float points.
  std::vector<BenchPoint> mixed;
  for (const auto& p : pts)
    if (p.opt.reduce_dtype == DType::F32) mixed.push_back(p);
  for (const auto& p : read_bench_file(bench_file("intra-half.h5", "allreduce", "ring", 1, 4, sizes, planted, 0.01, 6,
                                                  {}, "half")))
    mixed.push_back(p);
  const FabricFit f2 = calibrate_fabric(mixed, "mixed16");
  ASSERT_EQ(f2.levels.size(), 1u);
  EXPECT_EQ(f2.levels[0].level, "inter");
  int named = 0;
  for (const auto& sk : f2.skipped) named += sk.find("half elements") != std::string::npos ? 1 : 0;
  EXPECT_EQ(named, static_cast<int>(sizes.size())) << "every intra half point is named as skipped";
}

TEST(Calibrate, BenchFilesSayWhetherShmReadPeersBuffersInPlace) {
  const Fabric f = simple_fabric(1e-6, 5e9, 8e9);
  const std::vector<int64_t> sizes = {1 << 20, 16 << 20};
  const auto shared = read_bench_file(bench_file("shm-shared.h5", "allreduce", "shm", 1, 2, sizes, f, 0, 1,
                                                 [](h5::Writer& w) { w.attr("/", "buffers", std::string("shared")); }));
  const auto priv = read_bench_file(bench_file("shm-private.h5", "allreduce", "shm", 1, 2, sizes, f, 0, 1,
                                               [](h5::Writer& w) { w.attr("/", "buffers", std::string("private")); }));
  const auto old = read_bench_file(bench_file("shm-old.h5", "allreduce", "shm", 1, 2, sizes, f, 0, 1));
  ASSERT_FALSE(shared.empty());
  ASSERT_FALSE(priv.empty());
  ASSERT_FALSE(old.empty());
  EXPECT_TRUE(shared.front().opt.registered);
  EXPECT_FALSE(priv.front().opt.registered);
  EXPECT_FALSE(old.front().opt.registered);  // files before --buffers ran on private buffers
}

TEST(Calibrate, ContentionFromSweepsWhileTheHostComputes) {
  // A level measured alone (ping-pong, rd and ring sweeps) and its ring sweep again with a
  // busy thread per rank, planted as 800 us + 1.5 x the time alone (a woken thread waits for
  // a core; the copies share it). The alone sweeps fit alpha and bw; the busy one the
  // contention, with the level fixed.
  const Fabric planted = simple_fabric(12e-6, 3.0e9, 2.0e9);
  const auto sizes = pow2_sizes(1024, 64 << 20);
  std::vector<BenchPoint> pts = three_sweeps("busy", sizes, planted, 0.01);
  const auto busy_file = bench_file("ring-busy.h5", "allreduce", "ring", 4, 1, sizes, planted, 0.01, 4,
                                    [](h5::Writer& w) { w.attr("/", "busy_threads", std::int64_t{1}); });
  const auto busy = read_bench_file(busy_file);
  ASSERT_EQ(busy.size(), sizes.size());
  std::mt19937 rng(7);
  std::normal_distribution<double> nd(0.0, 0.02);
  for (auto p : busy) {
    EXPECT_EQ(p.busy_threads, 1);
    p.time_s = (800e-6 + 1.5 * collective_time(planted, p.op, p.algo, p.topo, p.bytes, p.opt)) * (1 + nd(rng));
    pts.push_back(p);
  }
  // Two descheduled sizes, 5x off: L1 keeps them from moving the fit.
  pts.back().time_s *= 5;
  pts[pts.size() - 4].time_s *= 5;
  const FabricFit fit = calibrate_fabric(pts, "busy");
  ASSERT_EQ(fit.levels.size(), 1u);
  const LevelFit& l = fit.levels[0];
  EXPECT_EQ(l.points.size(), 3 * sizes.size()) << "busy points are not in the level's fit";
  EXPECT_NEAR(l.params.alpha_s / 12e-6, 1.0, 0.1);
  EXPECT_NEAR(l.params.bw_Bps / 3.0e9, 1.0, 0.03);
  EXPECT_NEAR(fit.fabric.inter.contention / 1.5, 1.0, 0.03) << l.notes;
  EXPECT_NEAR(fit.fabric.inter.contention_alpha_s / 800e-6, 1.0, 0.05) << l.notes;
  EXPECT_DOUBLE_EQ(l.params.contention, fit.fabric.inter.contention);
  EXPECT_NE(l.notes.find("while the host computes (1 busy thread per rank)"), std::string::npos) << l.notes;
  const std::string out = tmp_path("busy.toml");
  save_fabric(fit.fabric, out);
  EXPECT_DOUBLE_EQ(load_fabric(out).inter.contention_alpha_s, fit.fabric.inter.contention_alpha_s);
  // Alone points that fit the planted level exactly: no contention (c = 1, a = 0).
  std::vector<BenchPoint> calm;
  for (const auto& p : pts)
    if (p.busy_threads == 0) calm.push_back(p);
  for (auto p : busy) {
    p.time_s = collective_time(planted, p.op, p.algo, p.topo, p.bytes, p.opt);
    calm.push_back(p);
  }
  const FabricFit none = calibrate_fabric(calm, "calm");
  EXPECT_NEAR(none.fabric.inter.contention, 1.0, 0.02);
  EXPECT_LT(none.fabric.inter.contention_alpha_s, 5e-6);
  // Busy points of a level with no points alone are named as skipped.
  const FabricFit only = calibrate_fabric(
      [&] {
        std::vector<BenchPoint> v = read_bench_file(bench_file("ppc1.h5", "pingpong", "ring", 2, 1, sizes, planted, 0.01, 5));
        for (auto p : read_bench_file(bench_file("intra-busy.h5", "allreduce", "ring", 1, 4, sizes, planted, 0.01, 6,
                                                 [](h5::Writer& w) { w.attr("/", "busy_threads", std::int64_t{2}); })))
          v.push_back(p);
        return v;
      }(),
      "only");
  int named = 0;
  for (const auto& sk : only.skipped) named += sk.find("measured with busy threads") != std::string::npos ? 1 : 0;
  EXPECT_EQ(named, static_cast<int>(sizes.size()));
  EXPECT_DOUBLE_EQ(only.fabric.intra.contention_alpha_s, 0.0);
}

TEST(Compress, CastPlansSumSixteenBitElements) {
  // The casts' all-reduce sums fp16/bf16 elements (Phase::dtype, priced at Level::gamma(t));
  // fp16 precision through "none" sums halves; PowerSGD's collectives are fp32.
  const std::vector<GradShape> g = {{4096, 64, 2}, {64, 64, 1}};
  EXPECT_EQ(Compressor("fp16").plan(g, 4, 2, DeviceRates{}).phases.at(0).dtype, DType::F16);
  EXPECT_EQ(Compressor("bf16").plan(g, 4, 2, DeviceRates{}).phases.at(0).dtype, DType::BF16);
  EXPECT_EQ(Compressor("none").plan(g, 4, 2, DeviceRates{}).phases.at(0).dtype, DType::F32);
  EXPECT_EQ(Compressor("none").plan(g, 2, 2, DeviceRates{}).phases.at(0).dtype, DType::F16);
  EXPECT_EQ(Compressor("none").plan(g, 2, 2, DeviceRates{}, DType::BF16).phases.at(0).dtype, DType::BF16);
  for (const auto& ph : Compressor("powersgd:rank=2,start=0").plan(g, 4, 2, DeviceRates{}).phases)
    EXPECT_EQ(ph.dtype, DType::F32);
}

TEST(Calibrate, StatesTheInterRateOnTheWire) {
  // Two hosts whose traffic crossed eth1 (MTU 1500): the note converts the fitted payload
  // bandwidth to the rate on the wire (1448 payload bytes per 1514-byte frame). Files that
  // crossed links of different MTUs get no such line.
  Fabric planted = simple_fabric(40e-6, 117.6e6);
  planted.name = "planted";
  const auto sizes = pow2_sizes(1 << 10, 16 << 20);
  auto net = [](std::int64_t mtu, std::string cc = "") {
    return [mtu, cc](h5::Writer& w) {
      w.write("/net/interface", std::vector<std::string>{"eth1", "lo"});
      w.write("/net/tx_bytes", std::vector<std::int64_t>{900000000, 5, 900000000, 5}, {2, 2});
      w.write("/net/rx_bytes", std::vector<std::int64_t>{900000000, 5, 900000000, 5}, {2, 2});
      w.write("/net/mtu", std::vector<std::int64_t>{mtu, 65536, mtu, 65536}, {2, 2});
      if (!cc.empty()) w.write("/net/tcp_congestion_control", std::vector<std::string>{cc, cc});
    };
  };
  auto fit_of = [&](std::int64_t mtu_pp, std::int64_t mtu_ring, std::string cc = "") {
    std::vector<BenchPoint> pts;
    for (const auto& f : {bench_file("w-pp.h5", "pingpong", "ring", 2, 1, sizes, planted, 0.0, 1, net(mtu_pp, cc)),
                          bench_file("w-ring.h5", "allreduce", "ring", 2, 1, sizes, planted, 0.0, 2, net(mtu_ring, cc))}) {
      auto v = read_bench_file(f);
      pts.insert(pts.end(), v.begin(), v.end());
    }
    return calibrate_fabric(pts, "fitted");
  };
  const FabricFit fit = fit_of(1500, 1500);
  ASSERT_EQ(fit.levels.size(), 1u);
  const std::string& n = fit.levels[0].notes;
  EXPECT_NE(n.find("at eth1's MTU 1500"), std::string::npos) << n;
  EXPECT_NE(n.find("1448 payload bytes per 1514-byte frame"), std::string::npos) << n;
  EXPECT_NE(n.find("0.9837 Gbit/s"), std::string::npos) << n;  // 117.6 MB/s x 8 x 1514/1448
  EXPECT_NEAR(tcp_payload_per_wire_byte(9000), 8948.0 / 9014.0, 1e-12);
  EXPECT_EQ(fit_of(1500, 9000).levels[0].notes.find("on the wire"), std::string::npos);
  // The ranks' TCP congestion control: BBR's PROBE_RTT pauses are said; cubic's files, and
  // files without the dataset (above), say nothing of it.
  EXPECT_EQ(n.find("PROBE_RTT"), std::string::npos) << n;
  EXPECT_NE(fit_of(1500, 1500, "bbr").levels[0].notes.find("TCP congestion control bbr"), std::string::npos);
  EXPECT_EQ(fit_of(1500, 1500, "cubic").levels[0].notes.find("PROBE_RTT"), std::string::npos);
}

TEST(Calibrate, ShaperLeavesOutPointsThatRanOnTheBurst) {
  // 2 hosts x 1 rank, ring all-reduce 1 KiB .. 1 MiB, 5 warm-up + 20 iterations, out of
  // place and in place: 1 KiB's median iteration starts after 15 KiB (<= 64 KiB burst),
  // 2 KiB's after 50 KiB + 30 KiB: only 1 KiB is left out.
  Fabric planted = simple_fabric(30e-6, 12.5e6);
  planted.name = "planted";
  const auto f = bench_file("tbf.h5", "allreduce", "ring", 2, 1, pow2_sizes(1024, 1 << 20), planted, 0.01, 7);
  const auto pts = read_bench_file(f);
  const FabricFit fit = calibrate_fabric(pts, "shaped", "tcp-10g", Shaper{65536, kInf});
  ASSERT_EQ(fit.levels.size(), 1u);
  ASSERT_EQ(fit.levels[0].points.size(), pts.size() - 1);
  bool named = false;
  for (const auto& s : fit.skipped) named = named || (s.find("1024 B ran on the shaper's burst") != std::string::npos);
  EXPECT_TRUE(named);
  EXPECT_DOUBLE_EQ(fit.fabric.inter.burst_bytes, 65536);
  EXPECT_EQ(fit.fabric.intra.burst_bytes, 0);
  EXPECT_NEAR(fit.fabric.inter.bw(1e6) / 12.5e6, 1.0, 0.02);
  // Without inter-node points there is no shaped level, and the fit says so.
  const auto g = bench_file("tbf1.h5", "allreduce", "ring", 1, 2, pow2_sizes(1024, 1 << 20), planted, 0.01, 8);
  const FabricFit fit1 = calibrate_fabric(read_bench_file(g), "local", "tcp-10g", Shaper{65536, kInf});
  EXPECT_EQ(fit1.fabric.inter.burst_bytes, 0);
  EXPECT_EQ(fit1.levels[0].points.size(), read_bench_file(g).size());
}

TEST(Calibrate, APingPongOnAShapedLinkFindsTheBucketRefilledByTheReply) {
  // 2 hosts, 200 Mbit/s tbf (23.9 MB/s of TCP payload), 64 KiB burst: while the reply
  // travels each direction's bucket refills, so in the steady state a message of m bytes
  // finds c = min(burst, m / 2) tokens: t = alpha + (m - c) / bw (the testbed's ping-pongs
  // of 16 KiB .. 4 MiB, 2026-12-06, within 1% of it). Next to a ring sweep (no credit:
  // back-to-back iterations keep the bucket empty) the fit recovers the link's rate; read
  // without the credit the ping-pongs look faster than the link and the rate comes out high.
  const double alpha = 40e-6, bw = 23.9e6, burst = 65536;
  Fabric planted = simple_fabric(alpha, bw);
  planted.name = "planted";
  const auto sizes = pow2_sizes(16 << 10, 4 << 20);
  auto pts = read_bench_file(bench_file("spp.h5", "pingpong", "ring", 2, 1, sizes, planted, 0.0, 4));
  for (auto& p : pts) p.time_s = alpha + (p.bytes - std::min(burst, p.bytes / 2)) / bw;
  const auto ring = read_bench_file(bench_file("sring.h5", "allreduce", "ring", 2, 1, sizes, planted, 0.0, 5));
  pts.insert(pts.end(), ring.begin(), ring.end());
  for (auto& p : pts) p.link_bytes_before = kInf;  // none ran on a first, untouched burst
  const Level with = calibrate_fabric(pts, "shaped", "tcp-10g", Shaper{burst, kInf}).fabric.inter;
  EXPECT_NEAR(with.bw(4 << 20) / bw, 1.0, 0.01);
  EXPECT_NEAR(with.duplex_bw(4 << 20) / bw, 1.0, 0.01);
  const Level without = calibrate_fabric(pts, "unshaped", "tcp-10g", Shaper{0, kInf}).fabric.inter;
  EXPECT_GT(without.bw(4 << 20) / bw, 1.03);
}

TEST(Calibrate, AnOffCacheSweepOnAShapedLinkStartsEachIterationWithAFullBurst) {
  // 2 hosts x 1 rank, ring all-reduce 256 KiB .. 32 MiB on a 125 MB/s tbf link with a
  // 125,000-byte burst, swept with --off-cache: the eviction between iterations refills the
  // bucket, so each all-reduce sends its first 125,000 bytes at no link time:
  // t = 2 alpha + max(0, m - burst) / bw (a ring of 2 sends m bytes per rank).
  const double alpha = 140e-6, bw = 118.5e6, burst = 125000;
  Fabric planted = simple_fabric(alpha, bw);
  planted.name = "planted";
  auto pts = read_bench_file(bench_file("oc.h5", "allreduce", "ring", 2, 1, pow2_sizes(1 << 18, 32 << 20), planted, 0.0, 3));
  ASSERT_FALSE(pts.empty());
  for (auto& p : pts) {
    p.time_s = 2 * alpha + std::max(0.0, p.bytes - burst) / bw;
    p.link_bytes_before = kInf;  // none ran on a first, untouched burst
  }
  auto fit = [&](bool off_cache) {
    auto q = pts;
    for (auto& p : q) p.off_cache = off_cache;
    return calibrate_fabric(q, "shaped", "tcp-10g", Shaper{burst, kInf}).fabric.inter;
  };
  const Level with = fit(true), without = fit(false);
  EXPECT_NEAR(with.bw(32 << 20) / bw, 1.0, 0.002);
  EXPECT_NEAR(with.alpha(32 << 20) / alpha, 1.0, 0.05);
  // Priced as drained, the same points bend the rate up (256 KiB runs at 1.9x the link; its
  // regimes absorb part of it).
  EXPECT_GT(without.bw(32 << 20) / bw, 1.01);
  // A sweep without --off-cache is not credited (it drains the bucket back to back).
  EXPECT_DOUBLE_EQ(pts[0].link_credit_bytes, 0.0);
}

TEST(Calibrate, FindsPlantedBreakpoint) {
  Fabric planted = simple_fabric(5e-6, 10e9);
  planted.name = "planted";
  planted.intra.regimes = {Regime{65536, 4e-6, 6e9}, Regime{kInf, 20e-6, 10e9}};
  planted.inter = planted.intra;
  const auto sizes = pow2_sizes(8, 64 << 20);
  const auto pts = read_bench_file(bench_file("bp.h5", "pingpong", "ring", 1, 2, sizes, planted, 0.01, 4));
  const FabricFit fit = calibrate_fabric(pts, "bp");
  const LevelFit& l = fit.levels.at(0);
  EXPECT_EQ(l.level, "intra");
  ASSERT_EQ(l.params.regimes.size(), 2u);
  EXPECT_DOUBLE_EQ(l.params.regimes[0].up_to_bytes, 65536);
  EXPECT_NEAR(l.params.regimes[0].alpha_s / 4e-6, 1.0, 0.01);
  EXPECT_NEAR(l.params.regimes[0].bw_Bps / 6e9, 1.0, 0.01);
  EXPECT_NEAR(l.params.regimes[1].alpha_s / 20e-6, 1.0, 0.01);
  EXPECT_NEAR(l.params.regimes[1].bw_Bps / 10e9, 1.0, 0.01);
  EXPECT_FALSE(l.gamma_fitted);  // pingpong reduces nothing
}

// A loaded shared-memory host: in cache ~7 GB/s, a rendezvous step at 64 KiB, out of
// cache (past 4 MiB) ~1.5 GB/s with a large alpha, and a few sizes hit by descheduling
// (100x slower). Three regimes must be found, the outliers excluded and named.
TEST(Calibrate, ThreeRegimesAndOutliers) {
  Fabric planted = simple_fabric(1e-6, 7e9);
  planted.name = "cliff";
  planted.intra.regimes = {Regime{65536, 1e-6, 7e9}, Regime{4 << 20, 10e-6, 5e9}, Regime{kInf, 2e-3, 1.5e9}};
  planted.inter = planted.intra;
  const auto sizes = pow2_sizes(8, 64 << 20);
  std::vector<BenchPoint> pts;
  for (const auto& f : {bench_file("c-pp.h5", "pingpong", "ring", 1, 2, sizes, planted, 0.01, 11),
                        bench_file("c-ring.h5", "allreduce", "ring", 1, 2, sizes, planted, 0.01, 12)}) {
    auto v = read_bench_file(f);
    pts.insert(pts.end(), v.begin(), v.end());
  }
  for (std::size_t i : {3u, 17u, 30u}) pts[i].time_s *= 100;  // descheduled
  const FabricFit fit = calibrate_fabric(pts, "cliff");
  const LevelFit& l = fit.levels.at(0);
  ASSERT_EQ(l.params.regimes.size(), 3u) << l.notes;
  EXPECT_NEAR(l.params.regimes[2].bw_Bps / 1.5e9, 1.0, 0.03);
  EXPECT_NEAR(l.params.regimes[2].alpha_s / 2e-3, 1.0, 0.05);
  EXPECT_NEAR(l.params.regimes[0].bw_Bps / 7e9, 1.0, 0.1);
  ASSERT_FALSE(l.warnings.empty());
  EXPECT_NE(l.warnings.back().find("excluded 3 of"), std::string::npos) << l.warnings.back();
  EXPECT_GT(l.r2, 0.99);
}

TEST(Calibrate, CacheRegimesOnARealSharedMemorySweep) {
  // 4 ranks on this project's 2-core host (tests/data/shm-sweeps): with at most three
  // regimes the fit spent its breaks on small working sets (9 and 288 KiB) and priced the
  // 1 MiB all-reduce (9 MiB of buffers on the node) and the 16 MiB one (144 MiB, past the
  // 32 MiB L3) in one regime: +15..+64% and -24..-38% against fresh runs. A fourth
  // regime must separate them; a fifth (since 2026-12-04) splits the small working sets
  // once more (9 / 32 / 288 KiB) and keeps the L3 break.
  const std::string dir = GRADSYNC_SHM_SWEEP_DATA;
  std::vector<BenchPoint> pts;
  for (const char* f : {"pingpong-2.h5", "sendrecv-4.h5", "ring-4.h5"}) {
    auto v = read_bench_file(dir + "/" + f);
    pts.insert(pts.end(), v.begin(), v.end());
  }
  const FabricFit fit = calibrate_fabric(pts, "shm-4");
  const LevelFit& l = fit.levels.at(0);
  EXPECT_EQ(l.level, "intra");
  ASSERT_EQ(l.params.regimes.size(), 5u) << l.notes;
  ASSERT_EQ(l.params.regime_key, RegimeKey::WorkingSet) << l.notes;
  // The last break sits at the last-level cache (32 MiB; 36 MiB of working set here).
  const double l3 = l.params.regimes[l.params.regimes.size() - 2].up_to_bytes;
  EXPECT_GE(l3, 24.0 * (1 << 20)) << l.notes;
  EXPECT_LE(l3, 48.0 * (1 << 20)) << l.notes;
  CollOptions o;
  o.chunk_bytes = 4 << 20;
  const Topology t{1, 4};
  const double small = node_working_set(Op::Allreduce, "ring", t, 1 << 20, o);
  const double large = node_working_set(Op::Allreduce, "ring", t, 16 << 20, o);
  auto regime = [&](double ws) {
    std::size_t j = 0;
    while (j + 1 < l.params.regimes.size() && ws > l.params.regimes[j].up_to_bytes) ++j;
    return j;
  };
  EXPECT_LT(regime(small), regime(large)) << small << " and " << large << " B: " << l.notes;
  // Past the cache the copies are slower than in it.
  EXPECT_LT(l.params.regimes[regime(large)].bw_Bps, l.params.regimes[regime(small)].bw_Bps);
}

TEST(Calibrate, TheFitDoesNotDependOnTheOrderOfItsFiles) {
  // The flagship's sweep on this project's 2-core host (tests/data/shm-sweeps/flagship-*):
  // fitted with the ping-pong file first, the regime search's near-ties kept a 16 MiB
  // all-reduce 53% off the rest and priced 64 MiB 31% fast (R^2 0.94); with the all-reduce
  // file first it excluded that point (R^2 0.997). The same points in any order now give
  // the same fabric, to the last bit.
  const std::string dir = GRADSYNC_SHM_SWEEP_DATA;
  const auto pp = read_bench_file(dir + "/flagship-pingpong-2.h5");
  const auto ring = read_bench_file(dir + "/flagship-ring-2.h5");
  auto fit = [&](std::vector<BenchPoint> a, const std::vector<BenchPoint>& b, bool reverse) {
    a.insert(a.end(), b.begin(), b.end());
    if (reverse) std::reverse(a.begin(), a.end());
    return calibrate_fabric(a, "flagship").levels.at(0);
  };
  const LevelFit first = fit(pp, ring, false);
  EXPECT_GT(first.r2, 0.99) << first.notes;
  ASSERT_FALSE(first.warnings.empty());
  EXPECT_NE(first.warnings.back().find("excluded 1 of 23"), std::string::npos) << first.warnings.back();
  for (const LevelFit& other : {fit(ring, pp, false), fit(pp, ring, true), fit(ring, pp, true)}) {
    EXPECT_EQ(other.r2, first.r2);
    EXPECT_EQ(other.params.alpha_s, first.params.alpha_s);
    EXPECT_EQ(other.params.bw_Bps, first.params.bw_Bps);
    EXPECT_EQ(other.params.gamma_Bps, first.params.gamma_Bps);
    ASSERT_EQ(other.params.regimes.size(), first.params.regimes.size()) << other.notes;
    for (std::size_t j = 0; j < first.params.regimes.size(); ++j) {
      EXPECT_EQ(other.params.regimes[j].up_to_bytes, first.params.regimes[j].up_to_bytes) << j;
      EXPECT_EQ(other.params.regimes[j].alpha_s, first.params.regimes[j].alpha_s) << j;
      EXPECT_EQ(other.params.regimes[j].bw_Bps, first.params.regimes[j].bw_Bps) << j;
      EXPECT_EQ(other.params.regimes[j].duplex_bw_Bps, first.params.regimes[j].duplex_bw_Bps) << j;
    }
  }
}

namespace {

// A sweep_fidelity.sh set kept in tests/data/shm-sweeps (its ping-pong, sendrecv and ring
// files), fitted as the script fits it.
FabricFit fit_kept_sweeps(const std::vector<std::string>& files, const std::string& name) {
  const std::string dir = GRADSYNC_SHM_SWEEP_DATA;
  std::vector<BenchPoint> pts;
  for (const std::string& f : files) {
    auto v = read_bench_file(dir + "/" + f);
    pts.insert(pts.end(), v.begin(), v.end());
  }
  return calibrate_fabric(pts, name);
}

// A fresh all-reduce measurement of the same minute: the medians (us) of three launches,
// in the chunk the runs used (0: unpipelined).
struct FreshRuns {
  const char* algo;
  double bytes, chunk;
  std::vector<double> us;
};

// Each prediction within 15% of each of its fresh runs (issue 14's target).
void expect_within_15_percent(const Fabric& f, const Topology& t, const std::vector<FreshRuns>& fresh) {
  for (const FreshRuns& r : fresh) {
    CollOptions o;
    o.chunk_bytes = r.chunk;
    const double us = collective_time(f, Op::Allreduce, r.algo, t, r.bytes, o) * 1e6;
    for (double m : r.us) EXPECT_NEAR(us / m, 1.0, 0.15) << r.algo << " " << r.bytes << " B: " << us << " us predicted";
  }
}

}  // namespace

TEST(Calibrate, TheBetterFittingRegimeKeysWin) {
  // A 2-rank sweep on this project's 2-core host (tests/data/shm-sweeps/fid-*, 2026-12-06):
  // working-set keys fit it better than message keys (log-error sum 0.573 vs 0.615) but
  // not by the tenth they once had to, so the fit kept message keys and priced the 1 MiB
  // ring 17-21% fast against the runs of the same minute (gradsync-bench -n 10 -w 3 -b 1M
  // -e 16M -f 16).
  const FabricFit fit = fit_kept_sweeps({"fid-pingpong-2.h5", "fid-sendrecv-2.h5", "fid-ring-2.h5"}, "fid-2");
  const LevelFit& l = fit.levels.at(0);
  EXPECT_EQ(l.params.regime_key, RegimeKey::WorkingSet) << l.notes;
  expect_within_15_percent(fit.fabric, Topology{1, 2},
                           {{"ring", 1 << 20, 4 << 20, {130.0, 127.1, 132.9}},
                            {"ring", 16 << 20, 4 << 20, {2084.2, 2104.7, 2080.7}},
                            {"rabenseifner", 1 << 20, 0, {124.8, 127.3, 129.1}},
                            {"rabenseifner", 16 << 20, 0, {2072.6, 2068.7, 2077.4}},
                            // rd at 1 MiB (162-170 us) is still priced 15-20% slow: its 1 MiB
                            // exchange sits on the cache edge, where the sweep's own 1 MiB
                            // sendrecv is the fit's largest residual.
                            {"rd", 16 << 20, 0, {2978.7, 2823.2, 3071.0}}});
}

TEST(Calibrate, AStepOfThreeRanksOnTwoCoresTakesTwiceItsTime) {
  // A 3-rank sweep on this project's 2-core host (tests/data/shm-sweeps/fid-*-3,
  // 2026-12-06 06:03 UTC). Its ring and sendrecv keep 3 ranks busy in every step; fitted
  // with the node's fair share (1.5x) they made the fabric's copies and sums a third too
  // slow, and rabenseifner and rd, whose steps keep 2 ranks busy, came out 14-21% slow at
  // 16 MiB. A step's share is ceil(3 / 2) = 2 (Level::step_share).
  const FabricFit fit = fit_kept_sweeps({"fid-pingpong-3.h5", "fid-sendrecv-3.h5", "fid-ring-3.h5"}, "fid-3");
  EXPECT_EQ(fit.fabric.intra.cores_per_node, 2);
  expect_within_15_percent(fit.fabric, Topology{1, 3},
                           {{"ring", 1 << 20, 4 << 20, {381.3, 385.8, 361.9}},
                            {"ring", 16 << 20, 4 << 20, {5700.4, 5514.0, 5466.4}},
                            // At 1 MiB rabenseifner (422-502 us) and rd (469-598 us) spread
                            // more than 15% among their own launches.
                            {"rabenseifner", 16 << 20, 0, {6672.0, 6866.4, 7080.4}},
                            {"rd", 16 << 20, 0, {7974.4, 7951.3, 7783.1}}});
}

TEST(Calibrate, TheLastRegimesOwnGammaLeavesEveryRegimeABandwidth) {
  // A 3-rank sweep of this project's 2-core host in its slow state (tests/data/shm-sweeps/
  // fid2-*-3, 2026-12-06 17:37 UTC). Its last working-set regime's own gamma (the sums past
  // the cache) took all of that regime's time and left its 1/bw at -2.5e-13, and calibrate
  // refused the sweep ("fitted bandwidth is not positive"). The term is kept only when every
  // regime keeps a positive bandwidth, as a regime split is.
  FabricFit fit;
  ASSERT_NO_THROW(fit = fit_kept_sweeps({"fid2-pingpong-3.h5", "fid2-sendrecv-3.h5", "fid2-ring-3.h5"}, "fid2-3"));
  const Level& l = fit.fabric.intra;
  ASSERT_GT(l.regimes.size(), 1u) << fit.levels.at(0).notes;
  for (const Regime& r : l.regimes) EXPECT_GT(r.bw_Bps, 0) << r.up_to_bytes;
  EXPECT_GT(l.gamma_Bps, 0);
  // The fit still follows its own large ring points (4-32 MiB) within a quarter.
  for (const PointFit& p : fit.levels.at(0).points) {
    if (p.point.op == Op::Allreduce && p.point.bytes >= (4 << 20)) {
      EXPECT_LT(std::abs(p.rel_residual), 0.25) << p.point.bytes;
    }
  }
}

TEST(Calibrate, WarnsWhenTheFitIsPoor) {
  // Times that do not follow alpha + n/bw at all (random in [1 us, 10 ms]).
  const Fabric f = simple_fabric(5e-6, 10e9);
  auto pts = read_bench_file(bench_file("poor.h5", "pingpong", "ring", 1, 2, pow2_sizes(8, 1 << 20), f, 0.01, 13));
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(-6, -2);
  for (auto& p : pts) p.time_s = std::pow(10.0, u(rng));
  const FabricFit fit = calibrate_fabric(pts, "poor");
  const LevelFit& l = fit.levels.at(0);
  ASSERT_FALSE(l.warnings.empty());
  bool poor = false;
  for (const auto& w : l.warnings) poor = poor || w.find("poor fit") != std::string::npos;
  EXPECT_TRUE(poor);
}

// ---- kernel rates ------------------------------------------------------------------------------

TEST(Kernels, CalibrateFromBenchmarkJson) {
  // Synthetic gradsync-kernels-bench output: qsgd_encode at 2 GB/s, onebit_decode at 4 GB/s,
  // PowerSGD square matrices at exactly 20 GFLOP/s (encode) and 10 GFLOP/s (decode).
  const std::string path = tmp_path("kb.json");
  {
    std::ofstream f(path);
    f.precision(12);
    f << R"({"context": {"gradsync_isa": "avx2"}, "benchmarks": [)";
    bool first = true;
    auto row = [&](const std::string& name, double mib, double time_ms, double bps, double matrix) {
      f << (first ? "" : ",") << R"({"name": ")" << name << "/MiB:" << mib << R"(/real_time", "run_name": ")" << name
        << "/MiB:" << mib << R"(/real_time", "run_type": "iteration", "real_time": )" << time_ms
        << R"(, "time_unit": "ms", "bytes_per_second": )" << bps << R"(, "MiB": )" << mib;
      if (matrix > 0) f << R"(, "matrix": )" << matrix;
      f << "}";
      first = false;
    };
    for (double mib : {1.0, 16.0, 64.0}) {
      const double bytes = mib * 1048576;
      row("qsgd_encode", mib, bytes / 2e9 * 1e3, 2e9, 0);
      row("onebit_decode", mib, bytes / 4e9 * 1e3, 4e9, 0);
      const double side = std::round(std::sqrt(bytes / 4));
      const double fe = 4 * side * side * 4 + 2 * side * 16, fd = 2 * side * side * 4;
      row("powersgd_encode", mib, fe / 20e9 * 1e3, side * side * 4 / (fe / 20e9), side);
      row("powersgd_decode", mib, fd / 10e9 * 1e3, side * side * 4 / (fd / 10e9), side);
    }
    // A failed case is ignored.
    f << R"(, {"name": "topk_encode/MiB:1/real_time", "run_type": "iteration", "error_occurred": true,
              "error_message": "wrong", "real_time": 0, "time_unit": "ms"})";
    f << "]}";
  }
  const KernelRates k = calibrate_kernels(path, "kb");
  EXPECT_NEAR(k.Bps.at("qsgd_encode"), 2e9, 1);
  EXPECT_NEAR(k.Bps.at("onebit_decode"), 4e9, 1);
  EXPECT_EQ(k.Bps.count("topk_encode"), 0u);
  EXPECT_NEAR(k.powersgd_encode_flops / 20e9, 1.0, 1e-4);
  EXPECT_NEAR(k.powersgd_decode_flops / 10e9, 1.0, 1e-4);
  // Round trip through the TOML file, then used by a plan.
  const std::string toml = tmp_path("kb.toml");
  save_kernel_rates(k, toml);
  const KernelRates back = load_kernel_rates(toml);
  EXPECT_NEAR(back.Bps.at("qsgd_encode") / 2e9, 1.0, 1e-5);
  EXPECT_NEAR(back.powersgd_encode_flops / 20e9, 1.0, 1e-4);
  DeviceRates rt{1e12, 1e11, &back};
  const double n = 1 << 20;
  const BucketPlan q = Compressor("qsgd:levels=16").plan({{1 << 20, 1 << 20, 1}}, 4, 2, rt);
  EXPECT_NEAR(q.phases[0].compute_s, n * 4 / 2e9, 1e-9);  // measured encode rate
  const BucketPlan ps = Compressor("powersgd:rank=4").plan({{1 << 20, 1024, 2}}, 4, 2, rt);
  ASSERT_EQ(ps.phases.size(), 2u);
  EXPECT_NEAR(ps.phases[0].compute_s, 2.0 * 1024 * 1024 * 4 / 20e9, 1e-8);  // P = MQ at the encode rate
  EXPECT_NEAR(ps.tail_s, 2.0 * 1024 * 1024 * 4 / 10e9, 1e-8);               // M = PQ^T at the decode rate
  // Not benchmark JSON / nothing usable.
  const std::string bad = tmp_path("bad.json");
  {
    std::ofstream f(bad);
    f << R"({"benchmarks": [{"name": "memcpy/MiB:1/real_time", "real_time": 1, "time_unit": "ms"}]})";
  }
  EXPECT_THROW(calibrate_kernels(bad, "x"), CalibrationError);
  {
    std::ofstream f(bad);
    f << "not json";
  }
  EXPECT_THROW(calibrate_kernels(bad, "x"), UsageError);
  {
    std::ofstream f(bad);
    f << "name = \"x\"\n[Bps]\nqsgd_encode = -1\n";
  }
  EXPECT_THROW(load_kernel_rates(bad), UsageError);
}

TEST(Kernels, PerTensorCodecFixedCostsAreFittedAndPriced) {
  // gradsync_torch.codecs output: PyTorch's PowerSGD hook on k square matrices of a side in
  // one bucket, times made exactly FLOPs / F + matrices x c + d (encode: F 8 GFLOP/s, c 40 us,
  // d 150 us; decode: 2 GFLOP/s, 25 us, 400 us; rank 4).
  const std::string path = tmp_path("torch-codecs.json");
  const double r = 4;
  const std::vector<std::pair<double, double>> cases = {  // (side, matrices)
      {64, 1}, {128, 1}, {256, 1}, {512, 1}, {1024, 1}, {64, 16}, {128, 8}, {32, 64}, {256, 4}};
  {
    std::ofstream f(path);
    f.precision(12);
    f << R"({"context": {"executable": "gradsync_torch.codecs"}, "benchmarks": [)";
    bool first = true;
    for (const auto& [side, k] : cases) {
      const double n = side * side;
      const double fe = k * (4 * n * r + 2 * side * r * r), fd = k * 2 * n * r;
      for (const auto& [part, t] : {std::pair<std::string, double>{"encode", fe / 8e9 + k * 40e-6 + 150e-6},
                                    {"decode", fd / 2e9 + k * 25e-6 + 400e-6}}) {
        f << (first ? "" : ",") << R"({"name": "powersgd_)" << part << "/" << side << "/" << k << R"(", "run_type": "iteration", "real_time": )"
          << t * 1e9 << R"(, "time_unit": "ns", "matrix": )" << side << R"(, "matrices": )" << k
          << R"(, "buckets": 1, "rank": 4})";
        first = false;
      }
      // The hook's collectives as it ran them: 300, 310, ... us a case (median 340 us).
      static int i = 0;
      f << R"(,{"name": "powersgd_collective/)" << side << "/" << k << R"(", "run_type": "iteration", "real_time": )"
        << 300 + 10 * i++ << R"(, "time_unit": "us", "matrix": )" << side << R"(, "matrices": )" << k
        << R"(, "buckets": 1, "rank": 4, "collectives": 3})";
    }
    f << "]}";
  }
  const KernelRates k = calibrate_kernels(path, "torch-hooks");
  EXPECT_NEAR(k.powersgd_encode_flops / 8e9, 1.0, 1e-3);
  EXPECT_NEAR(k.powersgd_encode_s_per_matrix / 40e-6, 1.0, 1e-3);
  EXPECT_NEAR(k.powersgd_encode_s_per_bucket / 150e-6, 1.0, 1e-3);
  EXPECT_NEAR(k.powersgd_decode_flops / 2e9, 1.0, 1e-3);
  EXPECT_NEAR(k.powersgd_decode_s_per_matrix / 25e-6, 1.0, 1e-3);
  EXPECT_NEAR(k.powersgd_decode_s_per_bucket / 400e-6, 1.0, 1e-3);
  EXPECT_EQ(k.powersgd_encode_Bps, 0.0);  // no memory term in these times: not fitted
  EXPECT_NEAR(k.powersgd_collective_s, 340e-6, 1e-12);  // the median of the nine cases
  const std::string toml = tmp_path("torch-hooks.toml");
  save_kernel_rates(k, toml);
  const KernelRates back = load_kernel_rates(toml);
  EXPECT_NEAR(back.powersgd_decode_s_per_matrix / 25e-6, 1.0, 1e-4);
  EXPECT_NEAR(back.powersgd_encode_s_per_bucket / 150e-6, 1.0, 1e-4);
  EXPECT_NEAR(back.powersgd_collective_s / 340e-6, 1.0, 1e-4);
  // A bucket of three compressed 1024 x 1024 matrices and a bias: the fixed costs count the
  // three matrices once each and the bucket once.
  DeviceRates rt{1e12, 1e11, &back};
  const BucketPlan ps =
      Compressor("powersgd:rank=4").plan({{1 << 20, 1024, 2}, {1 << 20, 1024, 2}, {1 << 20, 1024, 2}, {1024, 1024, 1}}, 4, 2, rt);
  ASSERT_EQ(ps.phases.size(), 3u);  // plain batch, P, Q
  const double mn = 1024.0 * 1024.0;
  EXPECT_NEAR(ps.phases[1].compute_s, 3 * 2 * mn * r / 8e9 + 3 * 40e-6 + 150e-6, 1e-7);
  EXPECT_NEAR(ps.tail_s, 3 * 2 * mn * r / 2e9 + 3 * 25e-6 + 400e-6, 1e-7);
  for (const Phase& ph : ps.phases) EXPECT_NEAR(ph.min_s, 340e-6, 1e-12);  // every collective of the hook
  // gradsync's own PowerSGD (no collective_s) leaves the fabric's price alone.
  KernelRates own = back;
  own.powersgd_collective_s = 0;
  DeviceRates rt_own{1e12, 1e11, &own};
  for (const Phase& ph : Compressor("powersgd:rank=4").plan({{1 << 20, 1024, 2}}, 4, 2, rt_own).phases)
    EXPECT_EQ(ph.min_s, 0.0);
  // With the plain all-reduces of the same tensors next to them (250, 260, ... us: 50 us
  // less in every case), the hook adds 50 us to each collective and sets no floor.
  {
    std::ifstream in(path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    text.resize(text.rfind("]}"));
    int i = 0;
    for (const auto& [side, k] : cases) {
      std::ostringstream r;
      r << R"(,{"name": "powersgd_allreduce/)" << side << "/" << k << R"(", "run_type": "iteration", "real_time": )"
        << 250 + 10 * i++ << R"(, "time_unit": "us", "matrix": )" << side << R"(, "matrices": )" << k
        << R"(, "buckets": 1, "rank": 4, "collectives": 3})";
      text += r.str();
    }
    std::ofstream(path) << text << "]}";
  }
  const KernelRates plus = calibrate_kernels(path, "torch-hooks");
  EXPECT_NEAR(plus.powersgd_collective_extra_s, 50e-6, 1e-12);
  EXPECT_EQ(plus.powersgd_collective_s, 0.0);
  save_kernel_rates(plus, toml);
  const KernelRates plus_back = load_kernel_rates(toml);
  EXPECT_NEAR(plus_back.powersgd_collective_extra_s / 50e-6, 1.0, 1e-4);
  DeviceRates rt_plus{1e12, 1e11, &plus_back};
  for (const Phase& ph : Compressor("powersgd:rank=4").plan({{1 << 20, 1024, 2}}, 4, 2, rt_plus).phases) {
    EXPECT_NEAR(ph.extra_s, 50e-6, 1e-9);
    EXPECT_EQ(ph.min_s, 0.0);
  }
}

TEST(Kernels, WhatAHookAddsToItsCollectivesIsAddedToTheFabricsPrice) {
  // gradsync_torch.codecs times the fp16 hook's all-reduce per bucket size (launch -> the
  // future's completion) and a plain all-reduce of the same halves: 300 / 200 us at 0.25
  // MiB, 600 / 450 at 1 MiB, 1900 / 1400 at 4 MiB of fp32 (100, 150 and 500 us added).
  const std::string path = tmp_path("kb-cast.json");
  auto row = [](const std::string& name, double mib, double us) {
    std::ostringstream r;
    r << R"({"name": ")" << name << "/" << mib << R"(", "run_type": "iteration", "real_time": )" << us
      << R"(, "time_unit": "us", "MiB": )" << mib << R"(, "buckets": 1, "collectives": 1})";
    return r.str();
  };
  {
    std::ofstream f(path);
    f << R"({"context": {"executable": "gradsync_torch.codecs"}, "benchmarks": [)";
    bool first = true;
    for (auto [mib, hook, plain] : {std::tuple{1.0, 600.0, 450.0}, std::tuple{0.25, 300.0, 200.0},
                                    std::tuple{4.0, 1900.0, 1400.0}}) {
      f << (first ? "" : ",") << R"({"name": "fp16_encode/)" << mib << R"(", "run_type": "iteration", "real_time": )"
        << mib * 1048576 / 10e9 * 1e9 << R"(, "time_unit": "ns", "MiB": )" << mib
        << R"(, "bytes_per_second": 1e10, "buckets": 1})";
      f << "," << row("fp16_collective", mib, hook) << "," << row("fp16_allreduce", mib, plain);
      first = false;
    }
    // bf16: the hook's times without plain all-reduces (an older file): nothing added.
    f << "," << row("bf16_collective", 1.0, 500.0) << "]}";
  }
  const KernelRates k = calibrate_kernels(path, "torch-hooks");
  ASSERT_EQ(k.hook_extra_s.count("fp16"), 1u);
  ASSERT_EQ(k.hook_extra_s.at("fp16").size(), 3u);
  EXPECT_EQ(k.hook_extra_s.at("fp16").front().first, 262144.0);  // ascending
  EXPECT_EQ(k.hook_extra_s.count("bf16"), 0u);
  // Below the smallest size its value, between sizes linear, past the largest scaled by size.
  EXPECT_NEAR(k.hook_extra("fp16", 65536), 100e-6, 1e-12);
  EXPECT_NEAR(k.hook_extra("fp16", 2 << 20), 150e-6 + (500e-6 - 150e-6) / 3, 1e-12);
  EXPECT_NEAR(k.hook_extra("fp16", 8 << 20), 2 * 500e-6, 1e-12);
  EXPECT_EQ(k.hook_extra("bf16", 1 << 20), 0.0);
  const std::string toml = tmp_path("torch-cast.toml");
  save_kernel_rates(k, toml);
  const KernelRates back = load_kernel_rates(toml);
  ASSERT_EQ(back.hook_extra_s.count("fp16"), 1u);
  EXPECT_NEAR(back.hook_extra("fp16", 2 << 20) / k.hook_extra("fp16", 2 << 20), 1.0, 1e-5);
  // The fp16 hook's all-reduce of a 2 MiB bucket costs the fabric's price plus what the hook
  // adds there, on any fabric; gradsync's fp16 precision cast (compress none) adds nothing.
  DeviceRates rt{1e12, 1e11, &back};
  const BucketPlan hook = Compressor("fp16").plan({{1 << 19, 1 << 19, 1}}, 4, 2, rt);
  ASSERT_EQ(hook.phases.size(), 1u);
  EXPECT_NEAR(hook.phases[0].extra_s, k.hook_extra("fp16", 2 << 20), 1e-12);
  EXPECT_EQ(hook.phases[0].min_s, 0.0);
  const BucketPlan cast = Compressor("none").plan({{1 << 19, 1 << 19, 1}}, 2, 2, rt, DType::F16);
  ASSERT_EQ(cast.phases.size(), 1u);
  EXPECT_EQ(cast.phases[0].extra_s, 0.0);
  // A malformed table is one line naming the file and key.
  const std::string bad = tmp_path("bad-cast.toml");
  { std::ofstream(bad) << "[hook_extra_s]\nfp16 = [[1048576, 2e-4], [262144, 1e-4]]\n"; }
  try {
    load_kernel_rates(bad);
    ADD_FAILURE() << "descending sizes accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("hook_extra_s.fp16"), std::string::npos) << e.what();
  }
  { std::ofstream(bad) << "[hook_extra_s]\nqsgd = [[1048576, 2e-4]]\n"; }
  EXPECT_THROW(load_kernel_rates(bad), UsageError);
  { std::ofstream(bad) << "[hook_extra_s]\nfp16 = [[1048576, -2e-4]]\n"; }
  EXPECT_THROW(load_kernel_rates(bad), UsageError);
}

TEST(Kernels, AHooksCodecJitterIsFittedFromTheSlowestRanksWait) {
  // gradsync_torch.codecs' <hook>_codec_wait cases: per step the slowest of 2 ranks' codec
  // took 0.564 x sigma x codec longer than its median, sigma 5%, 10% and 20% at three sizes
  // (and one case on one rank, which says nothing): calibrate keeps the median, 10%.
  const std::string path = tmp_path("kb-wait.json");
  {
    std::ofstream f(path);
    f << R"({"context": {"executable": "gradsync_torch.codecs"}, "benchmarks": [)";
    f << R"({"name": "fp16_encode/1", "run_type": "iteration", "real_time": 100, "time_unit": "us", "MiB": 1,)"
      << R"( "bytes_per_second": 1e10, "buckets": 1})";
    for (auto [mib, sigma, ranks] : {std::tuple{0.25, 0.05, 2}, std::tuple{1.0, 0.2, 2}, std::tuple{4.0, 0.1, 2},
                                     std::tuple{16.0, 0.9, 1}}) {
      const double codec = 1e-3 * mib;
      f << R"(,{"name": "fp16_codec_wait/)" << mib << R"(", "run_type": "iteration", "real_time": )"
        << expected_max_std_normal(2) * sigma * codec * 1e9 << R"(, "time_unit": "ns", "MiB": )" << mib
        << R"(, "buckets": 1, "ranks": )" << ranks << R"(, "codec_s": )" << codec << "}";
    }
    f << "]}";
  }
  const KernelRates k = calibrate_kernels(path, "torch-hooks");
  ASSERT_EQ(k.codec_sigma.count("fp16"), 1u);
  EXPECT_NEAR(k.codec_sigma.at("fp16"), 0.1, 1e-5);  // the JSON carries 6 digits
  EXPECT_EQ(k.codec_jitter("bf16"), 0.0);
  const std::string toml = tmp_path("torch-wait.toml");
  save_kernel_rates(k, toml);
  const KernelRates back = load_kernel_rates(toml);
  EXPECT_NEAR(back.codec_jitter("fp16"), 0.1, 1e-6);
  // The fp16 hook's bucket carries it; gradsync's fp16 precision cast (compress none) does not.
  DeviceRates rt{1e12, 1e11, &back};
  EXPECT_NEAR(Compressor("fp16").plan({{1 << 19, 1 << 19, 1}}, 4, 2, rt).codec_sigma, 0.1, 1e-6);
  EXPECT_EQ(Compressor("none").plan({{1 << 19, 1 << 19, 1}}, 2, 2, rt, DType::F16).codec_sigma, 0.0);
  const std::string bad = tmp_path("bad-wait.toml");
  { std::ofstream(bad) << "[codec_sigma]\nqsgd = 0.1\n"; }
  try {
    load_kernel_rates(bad);
    ADD_FAILURE() << "an unknown hook accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("codec_sigma.qsgd"), std::string::npos) << e.what();
  }
  { std::ofstream(bad) << "[codec_sigma]\npowersgd = -0.1\n"; }
  EXPECT_THROW(load_kernel_rates(bad), UsageError);
}

TEST(Kernels, RateFollowsTheStepsWorkingSet) {
  // A kernel that runs from cache at 1 MiB and from memory at 64 MiB: the model takes the
  // rate at the step's working set, not the median of the sizes.
  const std::string path = tmp_path("kb-sizes.json");
  {
    std::ofstream f(path);
    f << R"({"context": {}, "benchmarks": [)";
    bool first = true;
    for (auto [mib, bps] : {std::pair{1.0, 40e9}, std::pair{16.0, 14e9}, std::pair{64.0, 5e9}}) {
      f << (first ? "" : ",") << R"({"name": "topk_decode/MiB:)" << mib << R"(/real_time", "run_type": "iteration", )"
        << R"("real_time": )" << mib * 1048576 / bps * 1e3 << R"(, "time_unit": "ms", "bytes_per_second": )" << bps
        << R"(, "MiB": )" << mib << "}";
      first = false;
    }
    f << "]}";
  }
  const KernelRates k = calibrate_kernels(path, "kb");
  ASSERT_EQ(k.by_size.at("topk_decode").size(), 3u);
  EXPECT_NE(k.notes[0].find("64 MiB 5 GB/s"), std::string::npos) << k.notes[0];
  EXPECT_DOUBLE_EQ(k.rate("topk_decode", 0), 14e9);                  // unknown working set: the median
  EXPECT_DOUBLE_EQ(k.rate("topk_decode", 4096), 40e9);               // below the smallest size
  EXPECT_DOUBLE_EQ(k.rate("topk_decode", 1e9), 5e9);                 // past the largest
  EXPECT_NEAR(k.rate("topk_decode", 32 * 1048576.0) / std::sqrt(14e9 * 5e9), 1.0, 1e-9);  // log-log
  EXPECT_DOUBLE_EQ(k.rate("qsgd_encode", 1e9), 0.0);                 // not measured
  const std::string toml = tmp_path("kb-sizes.toml");
  save_kernel_rates(k, toml);
  const KernelRates back = load_kernel_rates(toml);
  ASSERT_EQ(back.by_size.at("topk_decode").size(), 3u);
  EXPECT_NEAR(back.rate("topk_decode", 32 * 1048576.0) / k.rate("topk_decode", 32 * 1048576.0), 1.0, 1e-5);
  // A plan prices the decode at the working set's rate.
  DeviceRates rt{1e12, 1e11, &back};
  rt.working_set_bytes = 11e6 * 20;  // resnet18-cifar with SGD momentum on one rank per node
  const double n = 1 << 20;
  const BucketPlan cold = Compressor("topk:ratio=0.01").plan({{1 << 20, 1 << 20, 1}}, 4, 2, rt);
  rt.working_set_bytes = 512 << 10;  // a model that stays in cache
  const BucketPlan warm = Compressor("topk:ratio=0.01").plan({{1 << 20, 1 << 20, 1}}, 4, 2, rt);
  const double k1 = std::floor(n * 0.01);
  EXPECT_NEAR(cold.tail_s - (k1 * 16.0 / 1e11), n * 4 / 5e9, 1e-7);
  EXPECT_NEAR(warm.tail_s - (k1 * 16.0 / 1e11), n * 4 / 40e9, 1e-7);
  // The predictor's working set: parameters x the optimizer's bytes x ranks per node.
  EXPECT_DOUBLE_EQ(working_set_bytes(1e6, "sgd", 4), 1e6 * 20 * 4);
  EXPECT_DOUBLE_EQ(working_set_bytes(1e6, "adam", 1), 1e6 * 28);
  // Malformed by-size rates are refused with the key.
  {
    std::ofstream f(toml);
    f << "name = \"x\"\n[Bps_by_size]\ntopk_decode = [[67108864, 5e9], [1048576, 4e10]]\n";
  }
  try {
    load_kernel_rates(toml);
    FAIL() << "descending sizes must be refused";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("Bps_by_size.topk_decode"), std::string::npos) << e.what();
  }
}

TEST(Calibrate, RefusesWhatTheDataCannotDetermine) {
  const Fabric f = simple_fabric(5e-6, 10e9);
  const auto pts = read_bench_file(bench_file("one.h5", "pingpong", "ring", 2, 1, {1 << 20}, f, 0.01, 5));
  try {
    calibrate_fabric(pts, "x");
    FAIL() << "a single size must be refused";
  } catch (const CalibrationError& e) {
    EXPECT_NE(std::string(e.what()).find("same size"), std::string::npos) << e.what();
  }
  EXPECT_THROW(calibrate_fabric({}, "x"), CalibrationError);
  // Not a bench file.
  const std::string other = tmp_path("other.h5");
  {
    h5::Writer w(other);
    w.attr("/", "program", std::string("something-else"));
    w.commit();
  }
  EXPECT_THROW(read_bench_file(other), UsageError);
}

// ---- compare ----------------------------------------------------------------------------------

namespace {

// A synthetic gradsync-train file whose steps take `step_s` x (1 + noise).
// 2 ranks on one node of shm-local, ResNet-18/CIFAR on the CPU profile: the truth the
// compute=real tests write as an "mlp" train file (a model the zoo lacks).
PredictConfig two_local_ranks() {
  PredictConfig c;
  c.model = "resnet18-cifar";
  c.fabric = "shm-local";
  c.compute_profile = "cpu";
  c.nodes = 1;
  c.ranks_per_node = 2;
  return c;
}

std::string train_file(const std::string& name, const PredictConfig& c, const std::string& compute,
                       const StepResult& truth, double noise, unsigned seed,
                       const std::function<void(h5::Writer&)>& extra = {},
                       const std::function<void(int, double&, double&)>& vary = {}) {
  const std::string path = tmp_path(name);
  h5::Writer w(path);
  Provenance prov;
  prov.program = "gradsync-train";
  prov.argv = {"gradsync-train"};
  prov.hostnames.assign(static_cast<std::size_t>(c.nodes * c.ranks_per_node), "host");
  prov.nranks = c.nodes * c.ranks_per_node;
  prov.nnodes = c.nodes;
  write_provenance(w, prov);
  std::mt19937 rng(seed);
  std::normal_distribution<double> nd(0, noise);
  const int steps = 30, warmup = 5;
  std::vector<int64_t> step;
  std::vector<double> st, data, fwd, bwd, exp, opt, loss, sent;
  std::vector<int64_t> bstep, bidx;
  std::vector<double> bbytes, bready, bstart, bend;
  for (int i = 0; i < steps; ++i) {
    const double k = i < warmup ? 3.0 : 1 + nd(rng);  // warmup steps are slow: must be dropped
    step.push_back(i);
    st.push_back(truth.step_time_s * k);
    data.push_back(truth.data_s);
    double f = truth.forward_s, bw = truth.backward_s;
    if (vary) vary(i, f, bw);  // this step's forward and backward
    fwd.push_back(f);
    bwd.push_back(bw);
    exp.push_back(truth.comm_exposed_s);
    opt.push_back(truth.optimizer_s);
    loss.push_back(1.0 / (i + 1));
    sent.push_back(truth.bytes_sent);
    for (std::size_t b = 0; b < truth.buckets.size(); ++b) {
      bstep.push_back(i);
      bidx.push_back(static_cast<int64_t>(b));
      bbytes.push_back(static_cast<double>(truth.buckets[b].grad_bytes));
      bready.push_back(truth.buckets[b].ready_s);
      bstart.push_back(truth.buckets[b].start_s);
      bend.push_back(truth.buckets[b].end_s);
    }
  }
  w.write("/steps/step", step);
  w.write("/steps/loss", loss);
  w.write("/steps/step_time_s", st);
  w.write("/steps/data_s", data);
  w.write("/steps/forward_s", fwd);
  w.write("/steps/backward_s", bwd);
  w.write("/steps/comm_exposed_s", exp);
  w.write("/steps/optimizer_s", opt);
  w.write("/steps/bytes_sent", sent);
  w.write("/buckets/step", bstep);
  w.write("/buckets/bucket", bidx);
  w.write("/buckets/bytes", bbytes);
  w.write("/buckets/ready_s", bready);
  w.write("/buckets/start_s", bstart);
  w.write("/buckets/end_s", bend);
  w.write("/epochs/epoch", std::vector<int64_t>{0});
  w.write("/epochs/epoch_time_s", std::vector<double>{truth.epoch_time_s});
  w.attr("/", "model", c.model);
  w.attr("/", "compute", compute);
  w.attr("/", "compute_profile", c.compute_profile);
  w.attr("/", "device", std::string("cpu"));
  w.attr("/", "ranks_per_node", static_cast<int64_t>(c.ranks_per_node));
  w.attr("/", "batch_per_rank", c.batch_per_rank);
  w.attr("/", "bucket_mb", c.bucket_mb);
  w.attr("/", "first_bucket_mb", c.first_bucket_mb);
  w.attr("/", "overlap", static_cast<int64_t>(c.overlap));
  w.attr("/", "accumulate", static_cast<int64_t>(c.accumulate));
  w.attr("/", "algo", c.algo);
  w.attr("/", "chunk_bytes", static_cast<int64_t>(c.chunk_bytes));
  w.attr("/", "channels", static_cast<int64_t>(1));
  w.attr("/", "compress", c.compress);
  w.attr("/", "precision", c.precision);
  w.attr("/", "loader_workers", static_cast<int64_t>(c.loader_workers));
  w.attr("/", "data_time_s", c.data_time_s);
  w.attr("/", "optimizer", c.optimizer);
  w.attr("/", "samples_per_epoch", c.samples_per_epoch);
  w.attr("/", "warmup_steps", static_cast<int64_t>(warmup));
  if (extra) extra(w);
  w.commit();
  return path;
}

// /model as the recorders write it: tensors in forward order, their shapes and buckets.
struct ModelTensor {
  std::string name;
  std::vector<int64_t> shape;
  int64_t bucket;
};
void write_model(h5::Writer& w, const std::vector<ModelTensor>& ts, const std::vector<double>& ready = {}) {
  std::vector<std::string> names;
  std::vector<int64_t> tn, nd, sh, bk;
  for (const auto& t : ts) {
    names.push_back(t.name);
    int64_t n = 1;
    for (auto d : t.shape) n *= d, sh.push_back(d);
    tn.push_back(n);
    nd.push_back(static_cast<int64_t>(t.shape.size()));
    bk.push_back(t.bucket);
  }
  w.group("/model");
  w.write("/model/tensor_names", names);
  w.write("/model/tensor_numel", tn);
  w.write("/model/tensor_ndim", nd);
  w.write("/model/tensor_shape", sh);
  w.write("/model/tensor_bucket", bk);
  if (!ready.empty()) w.write("/model/tensor_ready_s", ready);
}

// /ranks of 2 ranks (30 steps): the truth's phases, rank 1's backward `skew` longer than
// rank 0's (the /steps means stay the truth's).
std::function<void(h5::Writer&)> skewed_ranks(const StepResult& truth, double skew) {
  return [truth, skew](h5::Writer& w) {
    const std::uint64_t steps = 30;
    std::vector<double> data, fwd, bwd, opt, st;
    for (std::uint64_t i = 0; i < steps; ++i)
      for (double sign : {-1.0, 1.0}) {
        data.push_back(truth.data_s);
        fwd.push_back(truth.forward_s);
        bwd.push_back(truth.backward_s + sign * skew / 2);
        opt.push_back(truth.optimizer_s);
        st.push_back(truth.step_time_s);
      }
    w.write("/ranks/data_s", data, {steps, 2});
    w.write("/ranks/forward_s", fwd, {steps, 2});
    w.write("/ranks/backward_s", bwd, {steps, 2});
    w.write("/ranks/optimizer_s", opt, {steps, 2});
    w.write("/ranks/step_time_s", st, {steps, 2});
  };
}

// A recorded bucket: ready (and started) at `ready`, done 0.1 ms later.
BucketTiming recorded_bucket(int64_t bytes, double ready) {
  BucketTiming b;
  b.grad_bytes = bytes;
  b.ready_s = b.start_s = ready;
  b.end_s = ready + 1e-4;
  return b;
}

}  // namespace

TEST(Compare, PredictsEachRunWithItsOwnConfiguration) {
  Predictor p;
  std::vector<std::string> files;
  for (int nodes : {1, 2, 4}) {
    PredictConfig c;
    c.model = "resnet18-cifar";
    c.fabric = "tcp-10g";
    c.compute_profile = "cpu";
    c.nodes = nodes;
    c.ranks_per_node = 2;
    c.samples_per_epoch = 50000;
    c.compress = nodes == 4 ? "powersgd:rank=2" : "none";
    const StepResult truth = p.predict(c);
    files.push_back(train_file("t" + std::to_string(nodes) + ".h5", c, "emulated", truth, 0.01, nodes));
  }
  const CompareReport rep = compare_runs(files, "tcp-10g", "", "");
  ASSERT_EQ(rep.rows.size(), 3u);
  EXPECT_LT(rep.median_abs_error_pct, 2.0);
  EXPECT_LT(rep.p90_abs_error_pct, 3.0);
  EXPECT_EQ(rep.rows[2].run.config.compress, "powersgd:rank=2");
  EXPECT_EQ(rep.rows[1].run.config.nodes, 2);
  // The runs' own spread (steps after warmup scattered 1% around the truth): the 10th and
  // 90th percentiles bracket the median, about 1.3% either side, and the prediction (the
  // truth) lies between them in every run.
  for (const auto& row : rep.rows) {
    EXPECT_LT(row.measured_p10_s, row.run.step_time_s);
    EXPECT_GT(row.measured_p90_s, row.run.step_time_s);
    EXPECT_LT(row.measured_p90_s / row.measured_p10_s - 1, 0.06);
    EXPECT_TRUE(row.inside_spread());
  }
  EXPECT_EQ(rep.inside_spread, 3);
  EXPECT_NE(compare_table(rep).find("3 of 3 predicted inside the run's own steps' p10..p90"), std::string::npos);
  // A different fabric predicts differently.
  EXPECT_NE(compare_runs(files, "ib-hdr", "", "").rows[2].predicted.step_time_s, rep.rows[2].predicted.step_time_s);
  // Another compute profile (an A100's compute for these CPU runs) misses every run by far
  // more than its steps' spread: none is counted inside it.
  const CompareReport a100 = compare_runs(files, "tcp-10g", "", "a100");
  int inside = 0;
  for (const auto& row : a100.rows) {
    if (std::abs(row.step_error_pct) > 100 * (row.measured_p90_s / row.run.step_time_s - 1) &&
        std::abs(row.step_error_pct) > 100 * (1 - row.measured_p10_s / row.run.step_time_s)) {
      EXPECT_FALSE(row.inside_spread()) << row.run.path;
    }
    inside += row.inside_spread() ? 1 : 0;
  }
  EXPECT_EQ(a100.inside_spread, inside);
  EXPECT_EQ(a100.inside_spread, 0);
  const std::string out = tmp_path("report.h5");
  write_compare(rep, out, {"test"});
  h5::Reader r(out);
  EXPECT_EQ(r.read_double("/compare/step_error_pct").size(), 3u);
  EXPECT_EQ(r.read_double("/compare/measured_step_p10_s")[1], rep.rows[1].measured_p10_s);
  EXPECT_EQ(r.read_double("/compare/measured_step_p90_s")[1], rep.rows[1].measured_p90_s);
  const std::string js = compare_json(rep).dump();
  EXPECT_NE(js.find("median_abs_error_pct"), std::string::npos);
  EXPECT_NE(js.find("\"inside_spread\":3"), std::string::npos);
  EXPECT_NE(js.find("measured_step_p90_s"), std::string::npos);
}

TEST(Compare, PricesTheChunkTheRunRanWith) {
  // gradsync-train records chunk_bytes = 0 for the transport-aware default and the chunk it
  // ran with in chunk_bytes_used (32 KiB between nodes over TCP). The model prices that chunk,
  // as it does for a bench file's points; 0 there (mpi, the PyTorch bridge) stays unpipelined.
  Predictor p;
  PredictConfig c;
  c.model = "resnet50";
  c.fabric = "tcp-10g";
  c.compute_profile = "a100";
  c.nodes = 2;
  c.ranks_per_node = 1;
  c.algo = "ring";
  c.overlap = false;  // every bucket's all-reduce is in the step
  c.samples_per_epoch = 50000;
  PredictConfig chunked = c;
  chunked.chunk_bytes = 32 * 1024;
  const StepResult unpipelined = p.predict(c), pipelined = p.predict(chunked);
  ASSERT_GT(std::abs(pipelined.step_time_s / unpipelined.step_time_s - 1), 1e-3) << "the chunk must matter here";
  auto used = [](int64_t bytes) { return [bytes](h5::Writer& w) { w.attr("/", "chunk_bytes_used", bytes); }; };
  const std::string auto_chunk = train_file("chunk-used.h5", c, "emulated", pipelined, 0.0, 3, used(32 * 1024));
  const std::string none = train_file("chunk-none.h5", c, "emulated", unpipelined, 0.0, 3, used(0));
  const std::string old = train_file("chunk-old.h5", c, "emulated", unpipelined, 0.0, 3);  // before the attribute
  EXPECT_EQ(read_train_file(auto_chunk).config.chunk_bytes, 32 * 1024);
  EXPECT_EQ(read_train_file(none).config.chunk_bytes, 0);
  EXPECT_EQ(read_train_file(old).config.chunk_bytes, 0);
  const CompareReport rep = compare_runs({auto_chunk, none, old}, "tcp-10g", "", "");
  ASSERT_EQ(rep.rows.size(), 3u);
  EXPECT_DOUBLE_EQ(rep.rows[0].predicted.step_time_s, pipelined.step_time_s);
  EXPECT_DOUBLE_EQ(rep.rows[1].predicted.step_time_s, unpipelined.step_time_s);
  EXPECT_DOUBLE_EQ(rep.rows[2].predicted.step_time_s, unpipelined.step_time_s);
  const std::string js = compare_json(rep).dump();  // --json says which chunk was priced
  EXPECT_NE(js.find("\"chunk_bytes\":32768"), std::string::npos) << js.substr(0, 400);
}

TEST(Compare, RealComputeUsesMeasuredComputeAndBuckets) {
  // An "mlp" run (not in the zoo): compute comes from the file; the network is modelled.
  Predictor p;
  PredictConfig c = two_local_ranks();
  c.samples_per_epoch = 10000;
  StepResult truth = p.predict(c);
  c.model = "mlp";
  const std::string f = train_file("real.h5", c, "real", truth, 0.0, 9);
  const CompareReport rep = compare_runs({f}, "shm-local", "", "");
  ASSERT_EQ(rep.rows.size(), 1u);
  EXPECT_TRUE(rep.rows[0].compute_measured);
  EXPECT_NEAR(rep.rows[0].predicted.step_time_s / truth.step_time_s, 1.0, 0.02);
  EXPECT_NE(compare_table(rep).find("compute=real"), std::string::npos);
}

TEST(Compare, RealComputeReplaysEachStep) {
  // 10 steps with a slow forward, 10 with a slow backward, 5 normal: each column's median is
  // the normal value, but 20 of 25 steps are slower by `slow`; the measured step time is a
  // median of sums, and so must the prediction be.
  Predictor p;
  PredictConfig c = two_local_ranks();
  StepResult truth = p.predict(c);
  c.model = "mlp";
  const double slow = 0.2 * truth.backward_s;
  const std::string flat = train_file("replay-flat.h5", c, "real", truth, 0.0, 9);
  const std::string varied = train_file("replay-varied.h5", c, "real", truth, 0.0, 9, {}, [&](int i, double& f, double& b) {
    if (i % 5 == 1 || i % 5 == 2) f += slow;
    if (i % 5 == 3 || i % 5 == 4) b += slow;
  });
  const TrainRun run = read_train_file(varied);
  ASSERT_EQ(run.rows.size(), 25u);
  EXPECT_DOUBLE_EQ(run.forward_s, truth.forward_s);  // the column medians see no slow step
  EXPECT_DOUBLE_EQ(run.backward_s, truth.backward_s);
  const CompareReport rep = compare_runs({flat, varied}, "shm-local", "", "");
  ASSERT_EQ(rep.rows.size(), 2u);
  EXPECT_NEAR(rep.rows[1].predicted.step_time_s - rep.rows[0].predicted.step_time_s, slow, 0.05 * slow);
}

TEST(Compare, RealComputeReplaysAccumulatedSteps) {
  // Gradient accumulation: the file's forward_s and backward_s are the step's sums over its
  // micro-steps (gradsync-train, the PyTorch recorder); the replay runs `accumulate` forward
  // + backward pairs of a micro-step's compute each and only the last one's buckets.
  Predictor p;
  PredictConfig c = two_local_ranks();
  c.accumulate = 3;
  StepResult truth = p.predict(c);
  PredictConfig one = c;
  one.accumulate = 1;
  ASSERT_GT(truth.step_time_s, 2 * p.predict(one).step_time_s);  // three micro-steps of compute
  c.model = "mlp";
  const std::string f = train_file("real-acc3.h5", c, "real", truth, 0.0, 9);
  ASSERT_EQ(read_train_file(f).config.accumulate, 3);
  const CompareReport rep = compare_runs({f}, "shm-local", "", "");
  ASSERT_EQ(rep.rows.size(), 1u);
  EXPECT_NEAR(rep.rows[0].predicted.forward_s / truth.forward_s, 1.0, 1e-9);
  EXPECT_NEAR(rep.rows[0].predicted.backward_s / truth.backward_s, 1.0, 0.02);
  EXPECT_NEAR(rep.rows[0].predicted.step_time_s / truth.step_time_s, 1.0, 0.02);
}

TEST(Compare, RealComputeScalesTheCodecByWhatWasMeasured) {
  // fp16 casts, compute=real. encode_s and decode_s measured: the modelled codec adds up to
  // their sum. Only encode_s (the PyTorch recorder: a hook's synchronous part): it prices
  // the encode, and the decode follows at the same ratio -- not folded into encode_s.
  Predictor p;
  PredictConfig c = two_local_ranks();
  c.compress = "fp16";
  StepResult truth = p.predict(c);
  c.model = "mlp";
  const double x = 2e-3;
  auto codec = [&](bool with_decode) {
    return [x, with_decode](h5::Writer& w) {
      w.write("/steps/encode_s", std::vector<double>(30, x));
      if (with_decode) w.write("/steps/decode_s", std::vector<double>(30, x));
    };
  };
  auto total = [](const StepResult& r) {
    double t = 0;
    for (const auto& b : r.buckets) t += b.codec_s;
    return t;
  };
  // Only encode_s, and each bucket's measured codec (/buckets/codec_s: the recorder's time in
  // the bucket outside its collectives, callbacks included): the step's codec is their sum.
  const double y = 3e-3;
  const std::size_t nb = truth.buckets.size();
  auto per_bucket = [&](h5::Writer& w) {
    codec(false)(w);
    w.write("/buckets/codec_s", std::vector<double>(30 * nb, y / static_cast<double>(nb)));
  };
  const CompareReport rep = compare_runs({train_file("codec-both.h5", c, "real", truth, 0.0, 9, codec(true)),
                                          train_file("codec-enc.h5", c, "real", truth, 0.0, 9, codec(false)),
                                          train_file("codec-buckets.h5", c, "real", truth, 0.0, 9, per_bucket)},
                                         "shm-local", "", "");
  EXPECT_NEAR(total(rep.rows[0].predicted), 2 * x, 1e-9);
  EXPECT_GT(total(rep.rows[1].predicted), 1.5 * x);
  ASSERT_GE(nb, 1u);
  EXPECT_NEAR(total(rep.rows[2].predicted), y, 1e-9);
}

TEST(Compare, RealComputeWaitsForTheSlowestRank) {
  // /ranks: rank 1's backward is `d` longer than rank 0's every step (the /steps means are
  // the truth's). A synchronous step waits for rank 1: d/2 longer than the means predict.
  Predictor p;
  PredictConfig c = two_local_ranks();
  StepResult truth = p.predict(c);
  c.model = "mlp";
  const double d = 0.2 * truth.backward_s;
  const std::string even = train_file("ranks-even.h5", c, "real", truth, 0.0, 9, skewed_ranks(truth, 0.0));
  const std::string skewed = train_file("ranks-skewed.h5", c, "real", truth, 0.0, 9, skewed_ranks(truth, d));
  const TrainRun run = read_train_file(skewed);
  ASSERT_EQ(run.rows.size(), 25u);
  ASSERT_EQ(run.rows[0].rank_pre_s.size(), 2u);
  EXPECT_NEAR(run.rows[3].rank_pre_s[1] - run.rows[3].rank_pre_s[0], d, 1e-12);
  const CompareReport rep = compare_runs({even, skewed}, "shm-local", "", "");
  EXPECT_NEAR(rep.rows[0].predicted.step_time_s / truth.step_time_s, 1.0, 0.02);
  EXPECT_NEAR(rep.rows[1].predicted.step_time_s - rep.rows[0].predicted.step_time_s, d / 2, 0.05 * d);
  // A /ranks dataset of the wrong shape is refused, naming it.
  const std::string bad = train_file("ranks-bad.h5", c, "real", truth, 0.0, 9, [](h5::Writer& w) {
    for (const char* n : {"data_s", "forward_s", "backward_s", "optimizer_s"})
      w.write(std::string("/ranks/") + n, std::vector<double>(30, 0.0), {10, 3});
  });
  try {
    read_train_file(bad);
    ADD_FAILURE() << "a /ranks column of the wrong shape was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("/ranks/data_s"), std::string::npos) << e.what();
  }
}

TEST(Calibrate, FromTheBucketsOfNoOverlapTrainRuns) {
  // Runs predicted on a planted 2-node link, written as train files: their buckets'
  // all-reduces (end - start) are calibration points; the fit recovers the link.
  Fabric planted = simple_fabric(40e-6, 60e6);
  planted.name = "planted";
  const std::string fab = tmp_path("planted-link.toml");
  save_fabric(planted, fab);
  Predictor p;
  std::vector<BenchPoint> pts;
  std::vector<std::string> skipped;
  for (double mb : {0.5, 5.0, 25.0}) {
    PredictConfig c;
    c.model = "resnet50";
    c.fabric = fab;
    c.compute_profile = "a100";
    c.nodes = 2;
    c.ranks_per_node = 1;
    c.algo = "ring";
    c.bucket_mb = mb;
    c.overlap = false;
    const StepResult truth = p.predict(c);
    const std::string f = train_file("nov-" + std::to_string(static_cast<int>(mb * 10)) + ".h5", c, "emulated", truth, 0.0, 3);
    const auto v = read_collective_points(f, skipped);
    EXPECT_EQ(v.size(), truth.buckets.size());
    pts.insert(pts.end(), v.begin(), v.end());
    c.overlap = true;  // overlap on, and a compressor: no points, each with its reason
    EXPECT_TRUE(read_collective_points(train_file("ov.h5", c, "emulated", p.predict(c), 0.0, 4), skipped).empty());
    c.overlap = false;
    c.compress = "fp16";
    EXPECT_TRUE(read_collective_points(train_file("fp16.h5", c, "emulated", p.predict(c), 0.0, 5), skipped).empty());
  }
  ASSERT_EQ(skipped.size(), 6u);
  EXPECT_NE(skipped[0].find("overlap on"), std::string::npos) << skipped[0];
  EXPECT_NE(skipped[1].find("compress fp16"), std::string::npos) << skipped[1];
  const FabricFit fit = calibrate_fabric(pts, "from-train", "shm-local");
  ASSERT_EQ(fit.levels.size(), 1u);
  EXPECT_EQ(fit.levels[0].level, "inter");
  EXPECT_NEAR(fit.fabric.inter.bw(1e6) / 60e6, 1.0, 0.01);
  EXPECT_NEAR(fit.fabric.inter.alpha(1e6) / 40e-6, 1.0, 0.05);
}

TEST(Calibrate, ContentionFromOverlapRunsAgainstTheFabricAlone) {
  // Overlap-on runs simulated on a link whose collectives run 1.4x slower during backward,
  // written as train files; against the same link without contention the fit finds 1.4.
  Fabric planted = simple_fabric(20e-6, 5e9);
  planted.name = "planted";
  planted.inter.contention = 1.4;
  const std::string fab = tmp_path("contended-link.toml");
  save_fabric(planted, fab);
  Predictor p;
  std::vector<std::string> files;
  for (double mb : {5.0, 25.0}) {
    PredictConfig c;
    c.model = "resnet50";
    c.fabric = fab;
    c.compute_profile = "a100";
    c.nodes = 2;
    c.ranks_per_node = 1;
    c.algo = "ring";
    c.bucket_mb = mb;
    const StepResult truth = p.predict(c);
    double extra = 0;
    for (const auto& bt : truth.buckets) extra += bt.contention_s;
    EXPECT_GT(extra, 0) << "the predicted timeline shows the contention";
    files.push_back(train_file("ct-" + std::to_string(static_cast<int>(mb)) + ".h5", c, "emulated", truth, 0.0, 21));
    c.overlap = false;
    files.push_back(train_file("ct-off.h5", c, "emulated", p.predict(c), 0.0, 22));
  }
  Fabric alone = planted;
  alone.inter.contention = 1.0;
  const ContentionFit fit = calibrate_contention(files, alone);
  EXPECT_NEAR(fit.fabric.inter.contention, 1.4, 0.01);
  EXPECT_DOUBLE_EQ(fit.fabric.intra.contention, 1.0);
  EXPECT_GT(fit.inter_buckets, 2);
  EXPECT_EQ(fit.skipped.size(), 2u);  // the overlap-off runs, with the reason
  EXPECT_NE(fit.skipped[0].find("overlap off"), std::string::npos) << fit.skipped[0];
  EXPECT_NE(fit.notes.back().find("1.4 x its time alone"), std::string::npos) << fit.notes.back();
}

TEST(Calibrate, ComputeGivesBackwardItsOwnRateWhenOneRateCannotFit) {
  // Runs whose backward is slower against forward than its 2x FLOPs (an emulated backward
  // that generates its gradients on the CPU): one rate plus a per-layer overhead would need
  // a negative overhead. The fit recovers each pass's rate, and a profile that has one
  // (backward_efficiency) gives the planted times back.
  models::ComputeProfile planted = models::load_profile("a100");
  planted.name = "slow-backward";
  planted.per_layer_overhead_s = 0;
  planted.efficiency = 0.2;
  planted.backward_efficiency = 0.08;
  const std::string prof = tmp_path("slow-backward.toml");
  models::save_profile(planted, prof);
  EXPECT_DOUBLE_EQ(models::load_profile(prof).backward_efficiency, 0.08);
  auto two_hosts = [](const std::string& profile, double bucket_mb) {
    PredictConfig c;
    c.model = "resnet18-cifar";
    c.fabric = "tcp-10g";
    c.compute_profile = profile;
    c.nodes = 2;
    c.ranks_per_node = 1;
    c.bucket_mb = bucket_mb;
    return c;
  };
  Predictor p;
  std::vector<std::string> files;
  for (double mb : {5.0, 25.0}) {
    const PredictConfig c = two_hosts(prof, mb);
    const StepResult truth = p.predict(c);
    EXPECT_NEAR(truth.backward_s / truth.forward_s, 2 * 0.2 / 0.08, 0.3) << "the profile slows backward";
    files.push_back(train_file("slowbwd-" + std::to_string(static_cast<int>(mb)) + ".h5", c, "emulated", truth, 0.0, 31));
  }
  const ComputeFit fit = calibrate_compute(files, "fitted");
  EXPECT_DOUBLE_EQ(fit.overhead_s, 0.0);
  const double peak = fit.profile.peak_flops;
  EXPECT_NEAR(fit.profile.efficiency * peak / (0.2 * planted.peak_flops), 1.0, 0.02);
  EXPECT_NEAR(fit.profile.backward_efficiency * peak / (0.08 * planted.peak_flops), 1.0, 0.02);
  EXPECT_LT(fit.max_abs_rel_residual, 0.02);
  // The same runs through a profile with one rate (what the fit used to give: the overhead
  // clamped to 0 after a joint fit) would miss forward by far; the fitted one does not.
  const auto m = models::zoo_model("resnet18-cifar");
  const auto lt = models::layer_times(m, fit.profile, 32, false);
  const auto want = models::layer_times(m, planted, 32, false);
  double f = 0, b = 0, fw = 0, bw = 0;
  for (std::size_t i = 0; i < lt.fwd_s.size(); ++i) {
    f += lt.fwd_s[i];
    b += lt.bwd_s[i];
    fw += want.fwd_s[i];
    bw += want.bwd_s[i];
  }
  EXPECT_NEAR(f / fw, 1.0, 0.02);
  EXPECT_NEAR(b / bw, 1.0, 0.02);
  // Runs that one rate does fit keep the joint fit (no backward rate of its own).
  planted.backward_efficiency = 0;
  planted.per_layer_overhead_s = 2e-5;
  const std::string prof1 = tmp_path("one-rate.toml");
  models::save_profile(planted, prof1);
  const PredictConfig c = two_hosts(prof1, PredictConfig{}.bucket_mb);
  const std::vector<std::string> joint = {train_file("joint.h5", c, "emulated", p.predict(c), 0.0, 32)};
  const ComputeFit j = calibrate_compute(joint, "joint");
  EXPECT_NEAR(j.overhead_s / 2e-5, 1.0, 0.02);
  EXPECT_DOUBLE_EQ(j.profile.backward_efficiency, 0.0);
}

TEST(Calibrate, ComputeFitsTheRanksJitterFromTheirStepTimes) {
  // Four ranks whose step times differ every step: one rank 3 ms late, the others 1 ms early
  // (slowest - mean = 3 ms). The fit gives the jitter that predicts exactly that wait for 4
  // ranks, scales it by E[max of p std normals] for other rank counts, and leaves it 0 for
  // runs without /ranks/step_time_s.
  PredictConfig c = two_local_ranks();
  c.ranks_per_node = 4;
  Predictor p;
  const StepResult truth = p.predict(c);
  ASSERT_EQ(truth.straggler_s, 0.0) << "the built-in profile has no jitter";
  auto ranks = [&](h5::Writer& w) {
    std::vector<double> t;
    for (int i = 0; i < 30; ++i)
      for (int r = 0; r < 4; ++r) t.push_back(truth.step_time_s + (r == i % 4 ? 3e-3 : -1e-3));
    w.write("/ranks/step_time_s", t, {30, 4});
  };
  const std::vector<std::string> files = {train_file("jitter-a.h5", c, "emulated", truth, 0.0, 41, ranks),
                                          train_file("jitter-b.h5", c, "emulated", truth, 0.0, 42, ranks)};
  const ComputeFit fit = calibrate_compute(files, "jittery");
  EXPECT_EQ(fit.jitter_runs, 2);
  const double compute = truth.forward_s + truth.backward_s + truth.optimizer_s;
  EXPECT_NEAR(fit.rank_jitter, 3e-3 / expected_max_std_normal(4) / compute, 1e-9);
  const std::string prof = tmp_path("jittery.toml");
  models::save_profile(fit.profile, prof);
  c.compute_profile = prof;
  const StepResult four = p.predict(c);
  EXPECT_NEAR(four.straggler_s / 3e-3, 1.0, 0.01) << "the fitted compute's forward/backward/optimizer are the runs'";
  c.ranks_per_node = 8;
  EXPECT_NEAR(p.predict(c).straggler_s / four.straggler_s, expected_max_std_normal(8) / expected_max_std_normal(4), 1e-9);
  c.ranks_per_node = 1;
  EXPECT_EQ(p.predict(c).straggler_s, 0.0);
  // Without the per-rank column: no jitter fitted.
  c = two_local_ranks();
  const ComputeFit none = calibrate_compute({train_file("jitter-none.h5", c, "emulated", truth, 0.0, 43)}, "plain");
  EXPECT_EQ(none.jitter_runs, 0);
  EXPECT_EQ(none.profile.rank_jitter, 0.0);
}

TEST(Calibrate, ComputeFitsTheSlowestRanksCodecPerBucket) {
  // Three ranks; per bucket b the ranks' median codec is m_b = (b + 1) ms and one rank (a
  // different one each step) takes E[max of 3] x (0.5 ms + 0.3 m_b) longer. The fit gives
  // back 0.5 ms and 0.3 from /buckets/by_rank/codec_s; runs without the group, or of one
  // rank, fit nothing.
  PredictConfig c = two_local_ranks();
  c.ranks_per_node = 3;
  Predictor p;
  const StepResult truth = p.predict(c);
  const std::size_t nb = truth.buckets.size();
  ASSERT_GE(nb, 2u) << "two bucket sizes are needed to tell the fixed wait from the share";
  const double e3 = expected_max_std_normal(3);
  auto by_rank = [&](h5::Writer& w) {
    std::vector<double> codec;
    for (int i = 0; i < 30; ++i)
      for (std::size_t b = 0; b < nb; ++b) {
        const double m = 1e-3 * static_cast<double>(b + 1);
        for (int r = 0; r < 3; ++r) codec.push_back(r == i % 3 ? m + e3 * (0.5e-3 + 0.3 * m) : m);
      }
    w.write("/buckets/by_rank/codec_s", codec, {30 * nb, 3});
  };
  const std::string file = train_file("wait-a.h5", c, "emulated", truth, 0.0, 51, by_rank);
  const ComputeFit fit = calibrate_compute({file}, "waits");
  EXPECT_EQ(fit.wait_buckets, static_cast<int>(nb));
  EXPECT_NEAR(fit.codec_wait_s, 0.5e-3, 1e-9);
  EXPECT_NEAR(fit.codec_wait_frac, 0.3, 1e-6);
  EXPECT_DOUBLE_EQ(fit.profile.codec_wait_s, fit.codec_wait_s);
  EXPECT_DOUBLE_EQ(fit.profile.codec_wait_frac, fit.codec_wait_frac);
  // The file reads back each bucket's median codec and wait, and compare reports their sum.
  const TrainRun run = read_train_file(file);
  ASSERT_EQ(run.bucket_codec_wait_s.size(), nb);
  double sum = 0;
  for (std::size_t b = 0; b < nb; ++b) {
    const double m = 1e-3 * static_cast<double>(b + 1);
    EXPECT_NEAR(run.bucket_codec_mid_s[b], m, 1e-15);
    EXPECT_NEAR(run.bucket_codec_wait_s[b], e3 * (0.5e-3 + 0.3 * m), 1e-15);
    sum += run.bucket_codec_wait_s[b];
  }
  const std::string js = compare_json(compare_runs({file}, "shm-local", "", "")).dump();
  const std::string key = "\"measured_codec_wait_s\":";
  const auto at = js.find(key);
  ASSERT_NE(at, std::string::npos) << js;
  EXPECT_NEAR(std::strtod(js.c_str() + at + key.size(), nullptr), sum, 1e-12) << js;
  // A wait that shrinks with the codec is no share of it: the fixed part alone (>= 0).
  auto shrinking = [&](h5::Writer& w) {
    std::vector<double> codec;
    for (int i = 0; i < 30; ++i)
      for (std::size_t b = 0; b < nb; ++b) {
        const double m = 1e-3 * static_cast<double>(b + 1);
        for (int r = 0; r < 3; ++r) codec.push_back(r == 0 ? m + e3 * 2e-3 / static_cast<double>(b + 1) : m);
      }
    w.write("/buckets/by_rank/codec_s", codec, {30 * nb, 3});
  };
  const ComputeFit s = calibrate_compute({train_file("wait-b.h5", c, "emulated", truth, 0.0, 52, shrinking)}, "fixed");
  EXPECT_GT(s.codec_wait_s, 0.0);
  EXPECT_EQ(s.codec_wait_frac, 0.0);
  // A by_rank table whose rows are not /buckets' is refused, naming the file and dataset.
  const std::string bad = train_file("wait-bad.h5", c, "emulated", truth, 0.0, 54, [](h5::Writer& w) {
    w.write("/buckets/by_rank/codec_s", std::vector<double>(15, 1e-3), {5, 3});
  });
  try {
    read_train_file(bad);
    ADD_FAILURE() << "a by_rank table of the wrong shape was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("wait-bad.h5: /buckets/by_rank/codec_s is not"), std::string::npos) << e.what();
  }
  const ComputeFit none = calibrate_compute({train_file("wait-none.h5", c, "emulated", truth, 0.0, 53)}, "plain");
  EXPECT_EQ(none.wait_buckets, 0);
  EXPECT_EQ(none.profile.codec_wait_s, 0.0);
  EXPECT_EQ(none.profile.codec_wait_frac, 0.0);
}

TEST(Compare, SaysWhenRanksSaturatedTheCoresTheyShared) {
  // Three ranks on one machine's two cores (the testbed's hosts), each using 0.64 of a core
  // per step (/steps/cpu_s): 96% of the two cores. The run reads back its machine share and
  // busy fraction, compare's JSON carries them, and its table says the run was CPU-bound.
  // The same run with cores enough for its ranks, or without /steps/cpu_s: no such line.
  PredictConfig c = two_local_ranks();
  Predictor p;
  const StepResult truth = p.predict(c);
  auto machine = [&](int ranks, int cores, bool cpu) {
    return [=, &truth](h5::Writer& w) {
      if (cpu) w.write("/steps/cpu_s", std::vector<double>(30, 0.64 * truth.step_time_s));
      w.attr("/", "machine_ranks", static_cast<int64_t>(ranks));
      w.attr("/", "machine_cores", static_cast<int64_t>(cores));
    };
  };
  const std::string shared = train_file("cpu-shared.h5", c, "emulated", truth, 0.0, 61, machine(3, 2, true));
  const TrainRun run = read_train_file(shared);
  EXPECT_EQ(run.machine_ranks, 3);
  EXPECT_EQ(run.machine_cores, 2);
  EXPECT_NEAR(run.cpu_s, 0.64 * truth.step_time_s, 1e-12);
  EXPECT_NEAR(run.machine_cpu_busy(), 3 * 0.64 / 2, 1e-9);
  // The prediction prices the codecs by the machine's share (timeline.hpp codec_cpu_share),
  // run beside compute as gradsync-train runs them; a PyTorch-recorded file runs its hook
  // in the autograd thread.
  EXPECT_EQ(run.config.machine_ranks, 3);
  EXPECT_EQ(run.config.machine_cores, 2);
  EXPECT_TRUE(run.config.codec_beside_compute);
  const std::string torch_file = train_file("cpu-torch.h5", c, "emulated", truth, 0.0, 65, [](h5::Writer& w) {
    w.attr("/", "source", std::string("pytorch"));
  });
  EXPECT_FALSE(read_train_file(torch_file).config.codec_beside_compute);
  const auto rep = compare_runs({shared}, "shm-local", "", "");
  EXPECT_NE(compare_table(rep).find("1 run(s) CPU-bound: 3 ranks on one machine's 2 cores used 96% of them or more"),
            std::string::npos)
      << compare_table(rep);
  const Json j = compare_json(rep);
  EXPECT_NE(j.dump().find("\"machine_cpu_busy\":0.96"), std::string::npos) << j.dump();
  for (const auto& quiet : {train_file("cpu-enough.h5", c, "emulated", truth, 0.0, 62, machine(3, 4, true)),
                            train_file("cpu-none.h5", c, "emulated", truth, 0.0, 63, machine(3, 2, false))}) {
    EXPECT_EQ(compare_table(compare_runs({quiet}, "shm-local", "", "")).find("CPU-bound"), std::string::npos) << quiet;
  }
  EXPECT_TRUE(std::isnan(read_train_file(train_file("cpu-old.h5", c, "emulated", truth, 0.0, 64)).machine_cpu_busy()));
}

TEST(Compare, RealComputeUsesRecordedTensorShapes) {
  // A compute=real PowerSGD run with /model: the plan sees the real shapes (and the recorded
  // bucket of each tensor), so the predicted bytes follow the runtime's rule per tensor:
  // M = shape[0] x rest, r = min(n, m, rank), compressed when (n + m) r min_rate < n m.
  struct T {
    const char* name;
    std::vector<int64_t> shape;
    int64_t bucket;
  };
  const std::vector<T> ts = {{"conv.weight", {16, 3, 3, 3}, 1}, {"conv.bias", {16}, 1},
                             {"fc1.weight", {256, 784}, 1},     {"fc1.bias", {256}, 1},
                             {"small.weight", {4, 4}, 0},       {"fc2.weight", {10, 256}, 0},
                             {"fc2.bias", {10}, 0}};
  const int rank = 2, p = 2;
  const double min_rate = 2;
  std::vector<double> plain(2, 0), pe(2, 0), qe(2, 0), numel(2, 0);
  for (const auto& t : ts) {
    int64_t n = 1;
    for (auto d : t.shape) n *= d;
    const auto b = static_cast<std::size_t>(t.bucket);
    numel[b] += static_cast<double>(n);
    const double rows = static_cast<double>(t.shape[0]), cols = static_cast<double>(n) / rows;
    const double r = std::min({rows, cols, static_cast<double>(rank)});
    if (t.shape.size() >= 2 && (rows + cols) * r * min_rate < rows * cols) {
      pe[b] += rows * r;
      qe[b] += cols * r;
    } else {
      plain[b] += static_cast<double>(n);
    }
  }
  auto sent = [&](double bytes) { return std::round(2.0 * (p - 1) / p * bytes); };
  double expected = 0;
  for (std::size_t b = 0; b < 2; ++b) expected += sent(4 * plain[b]) + sent(4 * pe[b]) + sent(4 * qe[b]);

  PredictConfig c;
  c.model = "mlp";
  c.fabric = "shm-local";
  c.compute_profile = "cpu";
  c.nodes = 1;
  c.ranks_per_node = p;
  c.samples_per_epoch = 10000;
  c.compress = "powersgd:rank=2";
  StepResult truth;
  truth.data_s = 0.001;
  truth.forward_s = 0.002;
  truth.backward_s = 0.004;
  truth.optimizer_s = 0.001;
  truth.comm_exposed_s = 0.001;
  truth.step_time_s = 0.009;
  truth.epoch_time_s = 1;
  truth.bytes_sent = expected;
  for (std::size_t b = 0; b < 2; ++b) {
    BucketTiming bt;
    bt.grad_bytes = static_cast<int64_t>(4 * numel[b]);
    bt.ready_s = truth.data_s + truth.forward_s + 0.002 * static_cast<double>(b + 1);
    bt.start_s = bt.ready_s;
    bt.end_s = bt.ready_s + 0.0005;
    truth.buckets.push_back(bt);
  }
  const std::string with = train_file("model.h5", c, "real", truth, 0.0, 3, [&](h5::Writer& w) {
    std::vector<ModelTensor> mt;
    for (const auto& t : ts) mt.push_back({t.name, t.shape, t.bucket});
    write_model(w, mt);
    // Per bucket codec time, step-major rows (30 steps x 2 buckets): (b + 1) x 0.1 ms x
    // (1 + step % 3), NaN in warmup step 3 (dropped with the warmup).
    std::vector<double> codec;
    for (int i = 0; i < 30; ++i)
      for (int b = 0; b < 2; ++b) codec.push_back(i == 3 ? std::nan("") : (b + 1) * 1e-4 * (1 + i % 3));
    w.write("/buckets/codec_s", codec);
  });
  const std::string without = train_file("nomodel.h5", c, "real", truth, 0.0, 3);

  const TrainRun run = read_train_file(with);
  ASSERT_EQ(run.tensors.size(), ts.size());
  EXPECT_EQ(run.tensors[2].name, "fc1.weight");
  EXPECT_EQ(run.tensors[0].shape, (std::vector<int64_t>{16, 3, 3, 3}));
  EXPECT_EQ(run.tensors[5].bucket, 0);
  EXPECT_TRUE(read_train_file(without).tensors.empty());
  // /buckets/codec_s: medians per bucket after warmup; NaN per bucket when absent.
  ASSERT_EQ(run.bucket_codec_s.size(), 2u);
  EXPECT_DOUBLE_EQ(run.bucket_codec_s[0], 2e-4);
  EXPECT_DOUBLE_EQ(run.bucket_codec_s[1], 4e-4);
  const TrainRun bare = read_train_file(without);
  ASSERT_EQ(bare.bucket_codec_s.size(), 2u);
  EXPECT_TRUE(std::isnan(bare.bucket_codec_s[0]) && std::isnan(bare.bucket_codec_s[1]));

  const CompareReport rep = compare_runs({with, without}, "shm-local", "", "");
  ASSERT_EQ(rep.rows.size(), 2u);
  EXPECT_TRUE(rep.rows[0].compute_measured);
  EXPECT_DOUBLE_EQ(rep.rows[0].predicted.bytes_sent, expected);
  // Without /model each bucket is one 1-D tensor: PowerSGD sends it uncompressed.
  EXPECT_DOUBLE_EQ(rep.rows[1].predicted.bytes_sent, sent(4 * numel[0]) + sent(4 * numel[1]));
  EXPECT_LT(rep.rows[0].predicted.bytes_sent, 0.1 * rep.rows[1].predicted.bytes_sent);
  // compare --json: the measured codec per step (sum over buckets; null when absent) next to
  // the predicted one.
  const Json js = compare_json(rep);
  const std::string d = js.dump();
  EXPECT_NE(d.find("\"measured_codec_s\":0.0006"), std::string::npos) << d;
  EXPECT_NE(d.find("\"measured_codec_s\":null"), std::string::npos) << d;
  EXPECT_NE(d.find("\"predicted_codec_s\":"), std::string::npos) << d;
}

TEST(Compare, ComputeFromAnotherRun) {
  // compare --compute-from REF: each run is predicted with REF's recorded compute and each
  // tensor's ready time from the bucket it went to in REF, under the run's own buckets.
  struct T {
    std::string name;
    int64_t numel, ref_bucket, run_bucket;
  };
  // Forward order; DDP's bucket 0 holds the last layers (ready first).
  const std::vector<T> ts = {{"conv.weight", 4000, 1, 0}, {"conv.bias", 16, 1, 0},
                             {"fc.weight", 20000, 0, 0},    {"fc.bias", 10, 0, 0}};
  auto model = [&](bool ref, const std::string& rename = "") {
    return [&ts, ref, rename](h5::Writer& w) {
      std::vector<ModelTensor> mt;
      for (const auto& t : ts)
        mt.push_back({!rename.empty() && t.name == "fc.bias" ? rename : t.name, {t.numel},
                      ref ? t.ref_bucket : t.run_bucket});
      write_model(w, mt);
    };
  };
  PredictConfig c = two_local_ranks();
  c.model = "mlp";
  c.samples_per_epoch = 10000;
  const auto bucket = recorded_bucket;
  StepResult ref_truth;  // two buckets, ready at 40% and 100% of backward
  ref_truth.data_s = 0;
  ref_truth.forward_s = 0.010;
  ref_truth.backward_s = 0.020;
  ref_truth.optimizer_s = 0.002;
  ref_truth.step_time_s = 0.033;
  ref_truth.epoch_time_s = 1;
  ref_truth.buckets = {bucket(4 * 20010, 0.018), bucket(4 * 4016, 0.030)};
  StepResult run_truth = ref_truth;  // one bucket, and twice the compute
  run_truth.forward_s = 0.020;
  run_truth.backward_s = 0.040;
  run_truth.step_time_s = 0.063;
  run_truth.buckets = {bucket(4 * 24026, 0.060)};
  const std::string ref = train_file("from-ref.h5", c, "real", ref_truth, 0.0, 5, model(true));
  const std::string run = train_file("from-run.h5", c, "real", run_truth, 0.0, 5, model(false));

  // Without compression, a run predicted from its own compute equals its replay.
  const CompareReport own = compare_runs({ref, run}, "shm-local", "", "");
  const CompareReport self = compare_runs({ref}, "shm-local", "", "", "", ref);
  EXPECT_NEAR(self.rows[0].predicted.step_time_s, own.rows[0].predicted.step_time_s, 1e-12);

  const CompareReport from = compare_runs({run}, "shm-local", "", "", "", ref);
  ASSERT_EQ(from.rows.size(), 1u);
  const StepResult& p = from.rows[0].predicted;
  EXPECT_TRUE(from.rows[0].compute_measured);
  EXPECT_NEAR(p.forward_s, ref_truth.forward_s, 1e-12);  // REF's compute, not the run's
  EXPECT_NEAR(p.backward_s, ref_truth.backward_s, 1e-12);
  ASSERT_EQ(p.buckets.size(), 1u);  // the run's one bucket, ready when REF's last tensor is
  EXPECT_NEAR(p.buckets[0].ready_s, ref_truth.buckets[1].ready_s, 1e-9);
  EXPECT_LT(p.step_time_s, own.rows[1].predicted.step_time_s - 0.025);
  EXPECT_EQ(compare_json(from).dump().find("\"compute_from\":null"), std::string::npos);
  EXPECT_NE(compare_json(own).dump().find("\"compute_from\":null"), std::string::npos);
  EXPECT_NE(compare_table(from).find("# * compute from " + ref), std::string::npos);

  // REF records when each tensor itself was ready (/model/tensor_ready_s): conv.bias 6 ms
  // before its bucket. A run that puts conv.bias in a bucket of its own has that bucket
  // ready then, not with conv.weight at the end of backward.
  const auto ref_ready = [&ts](h5::Writer& w) {
    std::vector<ModelTensor> mt;
    for (const auto& t : ts) mt.push_back({t.name, {t.numel}, t.ref_bucket});
    write_model(w, mt, {0.030, 0.024, 0.018, 0.018});
  };
  const auto split = [&ts](h5::Writer& w) {
    std::vector<ModelTensor> mt;
    for (const auto& t : ts) mt.push_back({t.name, {t.numel}, t.name == "conv.weight" ? 2 : t.name == "conv.bias" ? 1 : 0});
    write_model(w, mt);
  };
  StepResult split_truth = run_truth;
  split_truth.buckets = {bucket(4 * 20010, 0.030), bucket(4 * 16, 0.045), bucket(4 * 4000, 0.060)};
  const std::string refr = train_file("from-ref-ready.h5", c, "real", ref_truth, 0.0, 5, ref_ready);
  const std::string runs = train_file("from-split.h5", c, "real", split_truth, 0.0, 5, split);
  const CompareReport by_tensor = compare_runs({runs}, "shm-local", "", "", "", refr);
  const CompareReport by_bucket = compare_runs({runs}, "shm-local", "", "", "", ref);
  ASSERT_EQ(by_tensor.rows[0].predicted.buckets.size(), 3u);
  EXPECT_NEAR(by_bucket.rows[0].predicted.buckets[1].ready_s, 0.030, 1e-9);
  EXPECT_NEAR(by_tensor.rows[0].predicted.buckets[1].ready_s, 0.024, 1e-9);
  EXPECT_NEAR(by_tensor.rows[0].predicted.buckets[2].ready_s, 0.030, 1e-9);
  EXPECT_NEAR(by_tensor.rows[0].predicted.buckets[0].ready_s, 0.018, 1e-9);

  // Another model (a tensor REF lacks) or another rank count: refused, naming both files.
  const std::string other = train_file("from-other.h5", c, "real", run_truth, 0.0, 5, model(false, "head.bias"));
  try {
    compare_runs({other}, "shm-local", "", "", "", ref);
    ADD_FAILURE() << "another model was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'head.bias'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(ref), std::string::npos) << e.what();
  }
  // Another shape is a what-if: REF's compute (2 ranks) priced on the run's 4 ranks.
  PredictConfig four = c;
  four.ranks_per_node = 4;
  const std::string wide = train_file("from-wide.h5", four, "real", run_truth, 0.0, 5, model(false));
  const CompareReport w4 = compare_runs({wide}, "shm-local", "", "", "", ref);
  EXPECT_EQ(w4.rows[0].run.config.ranks_per_node, 4);
  EXPECT_NEAR(w4.rows[0].predicted.backward_s, ref_truth.backward_s, 1e-12);
  EXPECT_DOUBLE_EQ(w4.rows[0].predicted.straggler_s, 0.0);  // REF has no /ranks: no spread to scale
  EXPECT_DOUBLE_EQ(w4.rows[0].predicted.bytes_sent, 1.5 * p.bytes_sent);  // a ring's 2(p-1)/p
  // A file without /model cannot be mapped.
  const std::string bare = train_file("from-bare.h5", c, "real", run_truth, 0.0, 5);
  EXPECT_THROW(compare_runs({bare}, "shm-local", "", "", "", ref), UsageError);
}

TEST(Predict, AWhatIfOfARecordedRun) {
  // predict --from-run: a recorded run's steps replayed on another fabric, shape and
  // compressor. Rank 1 is ready d later than rank 0 in every step: the critical rank is
  // d/2 later than the ranks' mean, E[max of 2] sigma, so sigma = d / (2 E[max of 2]).
  Predictor truth_p;
  PredictConfig c = two_local_ranks();
  StepResult truth = truth_p.predict(c);
  c.model = "mlp";
  c.samples_per_epoch = 6400;
  const double d = 0.2 * truth.backward_s;
  const std::string path = train_file("whatif.h5", c, "real", truth, 0.0, 3, skewed_ranks(truth, d));
  Predictor p;
  PredictConfig w = p.recorded(path).config;
  w.from_run = path;
  w.fabric = "shm-local";
  // At the recorded shape and fabric: exactly compare's prediction of the run.
  const StepResult same = p.predict(w);
  EXPECT_NEAR(same.step_time_s, compare_runs({path}, "shm-local", "", "").rows[0].predicted.step_time_s, 1e-15);
  EXPECT_DOUBLE_EQ(same.straggler_s, 0.0);
  EXPECT_EQ(same.steps_per_epoch, 100);  // 6400 samples / (2 ranks x 32)
  // 4 nodes x 2 ranks over TCP: the same compute, more wire time, a longer wait for the
  // slowest of 8, and a quarter of the steps per epoch.
  w.fabric = "tcp-10g";
  w.nodes = 4;
  const StepResult wide = p.predict(w);
  const double sigma = d / 2 / expected_max_std_normal(2);
  EXPECT_NEAR(wide.straggler_s, (expected_max_std_normal(8) - expected_max_std_normal(2)) * sigma, 1e-9);
  EXPECT_NEAR(wide.backward_s, same.backward_s, 1e-12);
  EXPECT_GT(wide.comm_total_s, same.comm_total_s);
  EXPECT_EQ(wide.steps_per_epoch, 25);
  // One rank waits for no one: less than the recorded steps held.
  w.nodes = 1;
  w.ranks_per_node = 1;
  EXPECT_NEAR(p.predict(w).straggler_s, -d / 2, 1e-9);
  // Another compressor: its codec is modelled (the run measured none).
  w.ranks_per_node = 2;
  w.fabric = "shm-local";
  w.compress = "fp16";
  const StepResult half = p.predict(w);
  double codec = 0;
  for (const auto& b : half.buckets) codec += b.codec_s;
  EXPECT_GT(codec, 0.0);
  EXPECT_NEAR(half.bytes_sent, 0.5 * same.bytes_sent, 1e-6 * same.bytes_sent);
  // A grid over the what-if's axes.
  Axis nodes{"nodes", {1, 2, 4}, {}};
  w.compress = "none";
  const GridTable g = run_grid(w, {nodes}, p);
  ASSERT_EQ(g.rows, 3u);
  EXPECT_NEAR(g.step_time_s[0], same.step_time_s, 1e-15);
  EXPECT_LT(g.step_time_s[0], g.step_time_s[2]);
  // Not a gradsync-train file: refused, naming it.
  w.from_run = tmp_path("none-such.h5");
  try {
    p.predict(w);
    ADD_FAILURE() << "a missing --from-run file was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("none-such.h5"), std::string::npos) << e.what();
  }
}

TEST(Predict, AWhatIfOfAccumulationPricesEachKindOfMicroStep) {
  // A run of 2 micro-steps whose synchronized backward took `extra` longer than the no_sync()
  // one (its buckets' communication beside it): /steps/backward_sync_s splits the recorded
  // sum. predict --from-run --accumulate 4 then prices three no_sync() backwards and one
  // synchronized; without the column, four halves of the sum (`extra` too much).
  Predictor truth_p;
  PredictConfig c = two_local_ranks();
  c.accumulate = 2;
  const StepResult truth = truth_p.predict(c);
  c.model = "mlp";
  const double b = truth.backward_s / 2, extra = 0.5 * b;
  auto longer = [extra](int, double&, double& bw) { bw += extra; };
  auto sync_col = [&](h5::Writer& w) { w.write("/steps/backward_sync_s", std::vector<double>(30, b + extra)); };
  const std::string split = train_file("acc2-split.h5", c, "real", truth, 0.0, 3, sync_col, longer);
  const std::string plain = train_file("acc2-plain.h5", c, "real", truth, 0.0, 3, {}, longer);
  ASSERT_NEAR(read_train_file(split).backward_sync_s, b + extra, 1e-12);
  ASSERT_TRUE(std::isnan(read_train_file(plain).backward_sync_s));
  Predictor p;
  auto what_if = [&](const std::string& path, int acc) {
    PredictConfig w = p.recorded(path).config;
    w.from_run = path;
    w.fabric = "shm-local";
    w.accumulate = acc;
    return p.predict(w);
  };
  // At the recorded accumulate the split changes nothing: compare's replay of the run.
  EXPECT_NEAR(what_if(split, 2).backward_s, 2 * b + extra, 1e-9);
  EXPECT_NEAR(what_if(split, 2).step_time_s, compare_runs({split}, "shm-local", "", "").rows[0].predicted.step_time_s,
              1e-15);
  EXPECT_NEAR(what_if(plain, 2).backward_s, 2 * b + extra, 1e-9);
  const StepResult four = what_if(split, 4), four_plain = what_if(plain, 4);
  EXPECT_NEAR(four.forward_s, 2 * truth.forward_s, 1e-9);  // 4 micro-steps of the recorded one's
  EXPECT_NEAR(four.backward_s, 4 * b + extra, 1e-9);
  EXPECT_NEAR(four_plain.backward_s, 4 * b + 2 * extra, 1e-9);
  EXPECT_NEAR(four_plain.step_time_s - four.step_time_s, extra, 0.02 * extra);
  // One micro-step: the synchronized backward alone.
  EXPECT_NEAR(what_if(split, 1).backward_s, b + extra, 1e-9);
}

TEST(Compare, ComputeFromANoOverlapRunSharesTheCpuWithCommunication) {
  // A no-overlap reference timed backward alone. On a node with as many cores as ranks and
  // one compute thread per rank, a bucket in flight inside backward takes one of every two
  // threads' CPU: backward runs at half speed while it is (cpu_share(4) / cpu_share(2)).
  auto model = [&](h5::Writer& w, bool overlap) {
    write_model(w, {{"a.weight", {200000}, 1}, {"b.weight", {200000}, 0}});
    w.attr("/", "compute_threads", 1.0);
    w.attr("/", "overlap", static_cast<int64_t>(overlap));
  };
  PredictConfig c = two_local_ranks();
  c.model = "mlp";
  auto bucket = [](double ready) { return recorded_bucket(800000, ready); };
  StepResult truth;
  truth.forward_s = 0.010;
  truth.backward_s = 0.020;
  truth.optimizer_s = 0.001;
  truth.step_time_s = 0.032;
  truth.epoch_time_s = 1;
  truth.buckets = {bucket(0.012), bucket(0.030)};  // bucket 0 ready 2 ms into backward
  const std::string alone = train_file("share-alone.h5", c, "real", truth, 0.0, 5, [&](h5::Writer& w) { model(w, false); });
  const std::string beside = train_file("share-beside.h5", c, "real", truth, 0.0, 5, [&](h5::Writer& w) { model(w, true); });
  Fabric f = builtin_fabric("shm-local");
  f.name = "two-cores";
  f.intra.cores_per_node = 2;
  f.intra.contention = 1;
  f.intra.contention_alpha_s = 0;
  const std::string fab = tmp_path("two-cores.toml");
  save_fabric(f, fab);

  const StepResult p = compare_runs({beside}, fab, "", "", "", alone).rows[0].predicted;
  ASSERT_EQ(p.buckets.size(), 2u);
  const BucketTiming& b0 = p.buckets[0];
  EXPECT_NEAR(b0.ready_s, 0.012, 1e-9);  // before any communication: not delayed
  const double bwd_end = truth.forward_s + p.backward_s;
  ASSERT_LT(b0.end_s, bwd_end);  // this bucket's communication ends inside backward
  EXPECT_NEAR(p.backward_s, truth.backward_s + 0.5 * (b0.end_s - b0.start_s), 1e-9);
  EXPECT_NEAR(p.buckets[1].ready_s, truth.forward_s + p.backward_s, 1e-9);  // the last tensor, at its end
  // A reference that overlapped already timed backward beside its communication; a fabric
  // without cores_per_node gives no CPU share: backward as recorded.
  EXPECT_NEAR(compare_runs({beside}, fab, "", "", "", beside).rows[0].predicted.backward_s, truth.backward_s, 1e-12);
  EXPECT_NEAR(compare_runs({beside}, "shm-local", "", "", "", alone).rows[0].predicted.backward_s, truth.backward_s,
              1e-12);
}
