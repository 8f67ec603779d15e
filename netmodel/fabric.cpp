// gradsync/netmodel/fabric.cpp — built-in fabric profiles and the TOML reader/writer.
#include "netmodel/fabric.hpp"

#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <utility>

#if __has_include(<toml++/toml.hpp>)
#include <toml++/toml.hpp>
#else
#include <toml++/toml.h>
#endif

#include "core/error.hpp"
#include "core/named.hpp"

namespace gradsync::netmodel {

// ---- Level ---------------------------------------------------------------------------------

namespace {
const Regime* regime_for(const Level& l, double m) {
  if (l.regimes.empty()) return nullptr;
  for (const auto& r : l.regimes)
    if (m <= r.up_to_bytes) return &r;
  return &l.regimes.back();
}
}  // namespace

double Level::alpha(double m) const {
  const Regime* r = regime_for(*this, m);
  return r ? r->alpha_s : alpha_s;
}

double Level::bw(double m) const {
  const Regime* r = regime_for(*this, m);
  return r ? r->bw_Bps : bw_Bps;
}

double Level::gamma(DType t) const {
  if (t == DType::F16 && gamma_fp16_Bps > 0) return gamma_fp16_Bps;
  if (t == DType::BF16 && gamma_bf16_Bps > 0) return gamma_bf16_Bps;
  return gamma_Bps;
}

double Level::duplex_bw(double m) const {
  const Regime* r = regime_for(*this, m);
  if (r) return r->duplex_bw_Bps > 0 ? r->duplex_bw_Bps : r->bw_Bps;
  return duplex_bw_Bps > 0 ? duplex_bw_Bps : bw_Bps;
}

double Level::flow_bw(double m, int sharing, int channels, bool both_ways) const {
  const double s = sharing < 1 ? 1.0 : sharing;
  const double cap = s * std::max(1, channels) * std::max(1, connections) * conn_bw_Bps;
  const int rails = std::max(1, nics_per_node);
  const double link = both_ways ? duplex_bw(m) : bw(m);
  // Invariant: with one NIC this is min(link, cap) / s, the single-link formula.
  const double node_bw = rails * link;
  const double one_flow = std::min(rails, std::max(1, channels)) * link;
  return std::min(std::min(node_bw, cap) / s, one_flow);
}

double Level::p2p_s(double m, int sharing, int channels) const {
  return alpha(m) + m / flow_bw(m, sharing, channels);
}

Level Level::at_working_set(double ws) const {
  if (regime_key != RegimeKey::WorkingSet || regimes.empty()) return *this;
  Level l = *this;
  l.source.clear();
  const Regime& r = *regime_for(*this, ws);
  l.alpha_s = r.alpha_s;
  l.bw_Bps = r.bw_Bps;
  l.duplex_bw_Bps = r.duplex_bw_Bps;
  if (r.gamma_Bps > 0) l.gamma_Bps = r.gamma_Bps;
  l.regimes.clear();
  l.regime_key = RegimeKey::Message;
  return l;
}

Level Level::at_bandwidth(double bw) const {
  Level l = *this;
  auto set = [bw](double& one_way, double& both_ways) {
    if (both_ways > 0) both_ways = std::isinf(bw) ? kInf : both_ways * (bw / one_way);
    one_way = bw;
  };
  set(l.bw_Bps, l.duplex_bw_Bps);
  for (auto& r : l.regimes) set(r.bw_Bps, r.duplex_bw_Bps);
  return l;
}

// ---- built-in profiles -----------------------------------------------------------------------
// Every number carries its source. "GB/s" is 1e9 bytes/s. alpha is the one-way time of a
// small message through the software stack the runtime uses (MPI or NCCL), not the wire.
// gamma of GPU levels assumes the reduction runs in HBM at ~1/3 of its bandwidth (read
// two operands, write one); with NCCL it is fused into the copy and hardly shows.

namespace {

constexpr double us = 1e-6;
constexpr double GBps = 1e9;

Level make_level(const char* source, double alpha_us, double bw_GBps, double gamma_GBps = kInf,
                 double conn_GBps = kInf, int connections = 1) {
  Level l;
  l.source = source;
  l.alpha_s = alpha_us * us;
  l.bw_Bps = bw_GBps * GBps;
  l.gamma_Bps = std::isinf(gamma_GBps) ? kInf : gamma_GBps * GBps;
  l.conn_bw_Bps = std::isinf(conn_GBps) ? kInf : conn_GBps * GBps;
  l.connections = connections;
  return l;
}

// Two regimes for a network with an eager limit: above it, rendezvous adds a handshake
// (one extra round trip, ~2 alpha).
void eager_rendezvous(Level& l, double eager_limit_bytes) {
  l.regimes = {Regime{eager_limit_bytes, l.alpha_s, l.bw_Bps}, Regime{kInf, 3 * l.alpha_s, l.bw_Bps}};
}

// Intra-node levels (also the single-node fabrics of the same names).
Level pcie_gen4() {
  // PCIe 4.0 x16: 31.5 GB/s raw per direction (PCI-SIG); ~22 GB/s achieved GPU peer-to-peer
  // through a switch (NVIDIA p2pBandwidthLatencyTest on A100 PCIe ~ 20-25 GB/s); ~5 us per
  // message is NCCL's small-message step latency over PCIe (nccl-tests 8 B allreduce on
  // 2 GPUs ~ 10 us for 2 steps). gamma: A100 HBM2e 2,039 GB/s / 3 ~ 680 GB/s.
  return make_level("PCIe 4.0 x16: PCI-SIG 31.5 GB/s raw, ~22 GB/s p2pBandwidthLatencyTest; 5 us NCCL step; "
                    "gamma = A100 HBM 2039 GB/s / 3",
                    5.0, 22.0, 680.0);
}
Level pcie_gen5() {
  // PCIe 5.0 x16: 63 GB/s raw per direction; ~50 GB/s achieved (H100 PCIe p2p tests);
  // 4 us per message; gamma: H100 HBM3 3.35 TB/s / 3.
  return make_level("PCIe 5.0 x16: PCI-SIG 63 GB/s raw, ~50 GB/s achieved p2p; 4 us NCCL step; "
                    "gamma = H100 HBM3 3350 GB/s / 3",
                    4.0, 50.0, 1100.0);
}
Level nvlink_h100() {
  // NVLink 4 on H100 SXM: 900 GB/s bidirectional = 450 GB/s per direction (NVIDIA H100
  // datasheet); nccl-tests all_reduce_perf busbw on 8x H100 SXM ~ 360-480 GB/s: 370 used;
  // ~2 us per step (NCCL LL protocol small-message latency); gamma HBM3 3.35 TB/s / 3.
  return make_level("NVLink 4 (H100 SXM datasheet 450 GB/s/dir); nccl-tests busbw ~370 GB/s on 8x H100; "
                    "2 us NCCL LL step; gamma = HBM3 3350 GB/s / 3",
                    2.0, 370.0, 1100.0);
}
Level shm_local() {
  // CPU ranks over shared memory (Open MPI vader): ~0.5 us latency (osu_latency on one
  // node); copy-in/copy-out = two memcpys at ~10 GB/s (MACHINE-NOTES: memcpy 10 GB/s per
  // core) -> 5 GB/s; reduction reads 2 operands and writes 1 at 10 GB/s -> 3.3 GB/s.
  return make_level("Open MPI vader: osu_latency ~0.5 us; two memcpys at 10 GB/s (MACHINE-NOTES) -> 5 GB/s; "
                    "gamma = 10 GB/s / 3",
                    0.5, 5.0, 3.3);
}

Fabric network(const char* name, const char* description, Level inter, Level intra) {
  Fabric f;
  f.name = name;
  f.description = description;
  f.source = "built-in (netmodel/fabric.cpp); intra level: " + intra.source;
  f.inter = std::move(inter);
  f.intra = std::move(intra);
  return f;
}

Fabric single_node(const char* name, const char* description, Level l) {
  Fabric f;
  f.name = name;
  f.description = std::string(description) + " (single-node fabric: inter level = intra level)";
  f.source = "built-in (netmodel/fabric.cpp)";
  f.intra = l;
  f.inter = l;
  return f;
}

const NamedBuilders<Fabric>& registry() {
  static const NamedBuilders<Fabric> r = {
      {"tcp-10g",
       [] {
         // 10GbE: 1.25 GB/s line, ~9.4 Gb/s TCP goodput = 1.17 GB/s (iperf3); one stream reaches
         // it. ~25 us one-way MPI latency over kernel TCP (osu_latency, Open MPI btl tcp).
         // Open MPI btl_tcp_eager_limit default 65536: above it, rendezvous.
         Level l = make_level("10GbE: 1.25 GB/s line, 1.17 GB/s TCP goodput (iperf3); osu_latency ~25 us "
                              "over btl tcp; eager limit 64 KiB (Open MPI btl_tcp_eager_limit)",
                              25.0, 1.17, 680.0, 1.17, 1);
         eager_rendezvous(l, 65536);
         return network("tcp-10g", "10 Gb Ethernet, kernel TCP; PCIe 4.0 GPU servers", l, pcie_gen4());
       }},
      {"tcp-25g",
       [] {
         // 25GbE: 3.125 GB/s line, ~23.5 Gb/s goodput = 2.9 GB/s; a single TCP stream
         // ~18 Gb/s = 2.2 GB/s (ESnet fasterdata host tuning); ~20 us latency.
         Level l = make_level("25GbE: 3.125 GB/s line, 2.9 GB/s goodput; one TCP stream ~2.2 GB/s (ESnet "
                              "fasterdata); ~20 us osu_latency; eager limit 64 KiB",
                              20.0, 2.9, 680.0, 2.2, 1);
         eager_rendezvous(l, 65536);
         return network("tcp-25g", "25 Gb Ethernet, kernel TCP; PCIe 4.0 GPU servers", l, pcie_gen4());
       }},
      {"tcp-100g",
       [] {
         // 100GbE: 12.5 GB/s line, ~92 Gb/s goodput with several streams = 11.5 GB/s; one
         // stream is CPU-bound near 35 Gb/s = 4.4 GB/s (ESnet fasterdata 100G tuning);
         // ~15 us latency.
         Level l = make_level("100GbE: 12.5 GB/s line, 11.5 GB/s multi-stream goodput; one TCP stream ~4.4 GB/s "
                              "(ESnet fasterdata); ~15 us osu_latency; eager limit 64 KiB",
                              15.0, 11.5, 680.0, 4.4, 1);
         eager_rendezvous(l, 65536);
         return network("tcp-100g", "100 Gb Ethernet, kernel TCP; PCIe 4.0 GPU servers", l, pcie_gen4());
       }},
      {"roce-100g",
       [] {
         // RoCE v2 on ConnectX-5/6 100G: ib_write_bw ~97 Gb/s = 12.1 GB/s, ~11.6 GB/s through
         // MPI/NCCL; ib_send_lat ~1.6 us + ~1.5 us software = 3 us. UCX rendezvous from 8 KiB.
         Level l = make_level("RoCE v2 100G (ConnectX-5/6): perftest ib_write_bw ~97 Gb/s, 11.6 GB/s via NCCL; "
                              "ib_send_lat 1.6 us + stack = 3 us; UCX rndv threshold ~8 KiB",
                              3.0, 11.6, 680.0);
         eager_rendezvous(l, 8192);
         l.regimes[1].alpha_s = 5.0 * us;  // rendezvous: one extra RDMA round trip (~2 us)
         return network("roce-100g", "RoCE v2 100 Gb/s; PCIe 4.0 GPU servers", l, pcie_gen4());
       }},
      {"ib-edr",
       [] {
         // InfiniBand EDR 100 Gb/s: osu_bw ~12.1 GB/s, osu_latency ~1.1 us (MVAPICH/OSU
         // published numbers for ConnectX-4 EDR) + ~0.4 us collective overhead.
         Level l = make_level("InfiniBand EDR 100G: osu_bw ~12.1 GB/s, osu_latency ~1.1 us (OSU benchmarks, "
                              "ConnectX-4) + 0.4 us; rndv from 8 KiB",
                              1.5, 12.1, 680.0);
         eager_rendezvous(l, 8192);
         l.regimes[1].alpha_s = 3.0 * us;
         return network("ib-edr", "InfiniBand EDR 100 Gb/s; PCIe 4.0 GPU servers", l, pcie_gen4());
       }},
      {"ib-hdr",
       [] {
         // InfiniBand HDR 200 Gb/s: osu_bw ~24.5 GB/s, osu_latency ~1.0 us (ConnectX-6, OSU
         // published numbers) + 0.3 us.
         Level l = make_level("InfiniBand HDR 200G: osu_bw ~24.5 GB/s, osu_latency ~1.0 us (ConnectX-6, OSU "
                              "benchmarks) + 0.3 us; rndv from 8 KiB",
                              1.3, 24.5, 680.0);
         eager_rendezvous(l, 8192);
         l.regimes[1].alpha_s = 2.6 * us;
         return network("ib-hdr", "InfiniBand HDR 200 Gb/s; PCIe 4.0 GPU servers", l, pcie_gen4());
       }},
      {"ib-ndr",
       [] {
         // InfiniBand NDR 400 Gb/s: ib_write_bw ~48 GB/s (ConnectX-7), latency ~1.0 us + 0.3 us.
         Level l = make_level("InfiniBand NDR 400G: ib_write_bw ~48 GB/s, ~1.0 us (ConnectX-7 perftest) + "
                              "0.3 us; rndv from 8 KiB",
                              1.3, 48.0, 1100.0);
         eager_rendezvous(l, 8192);
         l.regimes[1].alpha_s = 2.6 * us;
         return network("ib-ndr", "InfiniBand NDR 400 Gb/s; PCIe 5.0 GPU servers", l, pcie_gen5());
       }},
      {"nvlink-h100", [] { return single_node("nvlink-h100", "NVLink 4, 8x H100 SXM", nvlink_h100()); }},
      {"pcie-gen4", [] { return single_node("pcie-gen4", "GPUs over PCIe 4.0 x16", pcie_gen4()); }},
      {"pcie-gen5", [] { return single_node("pcie-gen5", "GPUs over PCIe 5.0 x16", pcie_gen5()); }},
      {"shm-local", [] { return single_node("shm-local", "CPU ranks over shared memory", shm_local()); }},
      {"seed-tcp",
       [] {
         // The seed article: TCP 80 us latency, 1.2 GB/s. No gamma, no regimes: plain Hockney.
         Level l = make_level("seed article: TCP 80 us, 1.2 GB/s", 80.0, 1.2);
         return network("seed-tcp", "the seed article's TCP numbers (80 us, 1.2 GB/s); PCIe 4.0 intra", l,
                        pcie_gen4());
       }},
      {"seed-roce",
       [] {
         Level l = make_level("seed article: RoCE 35 us, 2.7 GB/s", 35.0, 2.7);
         return network("seed-roce", "the seed article's RoCE numbers (35 us, 2.7 GB/s); PCIe 4.0 intra", l,
                        pcie_gen4());
       }},
  };
  return r;
}

}  // namespace

const std::vector<std::string>& fabric_names() { return registry().names(); }

Fabric builtin_fabric(const std::string& name) {
  if (auto f = registry().build(name)) return *f;
  throw UsageError("unknown fabric '" + name + "'; built-in fabrics: " + registry().joined() +
                   " (or give a TOML file)");
}

Fabric simple_fabric(double alpha_s, double bw_Bps, double gamma_Bps) {
  Fabric f;
  f.name = "alpha-beta";
  f.description = "one level from --alpha-us/--bw-GBps";
  f.source = "command line";
  Level l;
  l.source = "command line";
  l.alpha_s = alpha_s;
  l.bw_Bps = bw_Bps;
  l.gamma_Bps = gamma_Bps;
  f.intra = l;
  f.inter = l;
  validate_fabric(f);
  return f;
}

// ---- validation ------------------------------------------------------------------------------

namespace {
std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// First problem of a level: {key, message}, or empty key.
std::pair<std::string, std::string> level_problem(const Level& l) {
  auto positive = [](double v) { return std::isfinite(v) && v > 0; };
  if (!(std::isfinite(l.alpha_s) && l.alpha_s >= 0)) return {"alpha_us", "must be a finite number >= 0, got " + num(l.alpha_s / us)};
  if (!positive(l.bw_Bps)) return {"bw_GBps", "must be a finite number > 0, got " + num(l.bw_Bps / GBps)};
  if (!(l.gamma_Bps > 0) || std::isnan(l.gamma_Bps)) return {"gamma_GBps", "must be > 0, got " + num(l.gamma_Bps / GBps)};
  if (!(l.gamma_fp16_Bps >= 0)) return {"gamma_fp16_GBps", "must be > 0, got " + num(l.gamma_fp16_Bps / GBps)};
  if (!(l.gamma_bf16_Bps >= 0)) return {"gamma_bf16_GBps", "must be > 0, got " + num(l.gamma_bf16_Bps / GBps)};
  if (!(l.conn_bw_Bps > 0) || std::isnan(l.conn_bw_Bps)) return {"conn_bw_GBps", "must be > 0, got " + num(l.conn_bw_Bps / GBps)};
  if (l.connections < 1) return {"connections", "must be an integer >= 1, got " + std::to_string(l.connections)};
  if (l.nics_per_node < 1) return {"nics_per_node", "must be an integer >= 1, got " + std::to_string(l.nics_per_node)};
  if (!(std::isfinite(l.burst_bytes) && l.burst_bytes >= 0)) return {"burst_bytes", "must be a finite number >= 0, got " + num(l.burst_bytes)};
  if (!(l.peak_bw_Bps > 0) || std::isnan(l.peak_bw_Bps)) return {"peak_bw_GBps", "must be > 0, got " + num(l.peak_bw_Bps / GBps)};
  if (!(std::isfinite(l.contention) && l.contention > 0)) return {"contention", "must be a finite number > 0, got " + num(l.contention)};
  if (!(std::isfinite(l.contention_alpha_s) && l.contention_alpha_s >= 0)) return {"contention_us", "must be a finite number >= 0, got " + num(l.contention_alpha_s / us)};
  if (l.cores_per_node < 0) return {"cores_per_node", "must be an integer >= 1, got " + std::to_string(l.cores_per_node)};
  if (!(std::isfinite(l.duplex_bw_Bps) && l.duplex_bw_Bps >= 0)) return {"duplex", "must be a finite number > 0, got " + num(l.duplex_bw_Bps / l.bw_Bps)};
  double prev = 0;
  for (std::size_t i = 0; i < l.regimes.size(); ++i) {
    const Regime& r = l.regimes[i];
    const std::string k = "regime[" + std::to_string(i) + "].";
    if (!(std::isfinite(r.alpha_s) && r.alpha_s >= 0)) return {k + "alpha_us", "must be a finite number >= 0, got " + num(r.alpha_s / us)};
    if (!positive(r.bw_Bps)) return {k + "bw_GBps", "must be a finite number > 0, got " + num(r.bw_Bps / GBps)};
    if (!(std::isfinite(r.duplex_bw_Bps) && r.duplex_bw_Bps >= 0)) return {k + "duplex", "must be a finite number > 0, got " + num(r.duplex_bw_Bps / r.bw_Bps)};
    if (!(std::isfinite(r.gamma_Bps) && r.gamma_Bps >= 0)) return {k + "gamma_GBps", "must be a finite number > 0, got " + num(r.gamma_Bps / GBps)};
    if (r.gamma_Bps > 0 && l.regime_key != RegimeKey::WorkingSet)
      return {k + "gamma_GBps", "a regime's own reduction rate needs regimes_by = \"working_set\""};
    const bool last = i + 1 == l.regimes.size();
    if (!last && !(std::isfinite(r.up_to_bytes) && r.up_to_bytes > prev))
      return {k + "up_to_bytes", "must be a finite size greater than the previous regime's (" + num(prev) + "), got " + num(r.up_to_bytes)};
    if (last && std::isfinite(r.up_to_bytes) && r.up_to_bytes <= prev)
      return {k + "up_to_bytes", "must be greater than the previous regime's"};
    prev = r.up_to_bytes;
  }
  return {};
}
}  // namespace

void validate_fabric(const Fabric& f) {
  GS_USAGE_CHECK(!f.name.empty(), "fabric: name must not be empty");
  for (const auto& [lname, l] : {std::pair<const char*, const Level*>{"intra", &f.intra}, {"inter", &f.inter}}) {
    auto [key, msg] = level_problem(*l);
    if (!key.empty()) throw UsageError("fabric '" + f.name + "': " + lname + "." + key + " " + msg);
  }
}

// ---- TOML reading ----------------------------------------------------------------------------

namespace {

class FabricReader {
 public:
  FabricReader(std::string origin) : origin_(std::move(origin)) {}

  Fabric read(const std::string& text) {
    toml::table tbl;
    try {
      tbl = toml::parse(text, origin_);
    } catch (const toml::parse_error& e) {
      const auto& b = e.source().begin;
      throw UsageError(detail::concat("fabric ", origin_, ":", b.line, ":", b.column,
                                      ": TOML syntax error: ", e.description()));
    }
    check_keys(tbl, "", {"name", "description", "source", "intra", "inter"});
    Fabric f;
    f.name = get_string(tbl, "name", true);
    f.description = get_string(tbl, "description", false);
    f.source = get_string(tbl, "source", false);
    const toml::node* intra = tbl.get("intra");
    const toml::node* inter = tbl.get("inter");
    if (!intra && !inter) fail(0, "intra", "and 'inter' are both missing: a fabric needs at least one level");
    if (intra) f.intra = read_level(*intra, "intra");
    if (inter) f.inter = read_level(*inter, "inter");
    if (!intra) f.intra = f.inter;
    if (!inter) f.inter = f.intra;
    return f;
  }

 private:
  static int64_t line_of(const toml::node& n) { return static_cast<int64_t>(n.source().begin.line); }

  [[noreturn]] void fail(int64_t line, const std::string& key, const std::string& what) const {
    std::string where = "fabric " + origin_;
    if (line > 0) where += ":" + std::to_string(line);
    throw UsageError(where + ": key '" + key + "' " + what);
  }

  static std::string type_name(const toml::node& n) {
    std::ostringstream os;
    os << n.type();
    return os.str();
  }

  void check_keys(const toml::table& t, const std::string& prefix, const std::vector<std::string>& known) const {
    for (auto&& [k, v] : t) {
      bool ok = false;
      std::string all;
      for (const auto& kk : known) {
        ok = ok || k.str() == kk;
        all += (all.empty() ? "" : ", ") + kk;
      }
      if (!ok) fail(static_cast<int64_t>(k.source().begin.line), prefix + std::string(k.str()), "is unknown (known: " + all + ")");
    }
  }

  std::string get_string(const toml::table& t, const std::string& key, bool required) const {
    const toml::node* n = t.get(key);
    if (!n) {
      if (required) fail(0, key, "is missing");
      return {};
    }
    if (!n->is_string()) fail(line_of(*n), key, "must be a string, got " + type_name(*n));
    return n->as_string()->get();
  }

  // A number (integer accepted) that must satisfy `ok`; `what` describes the requirement.
  double get_number(const toml::table& t, const std::string& key, const std::string& full, bool required,
                    double def, bool (*ok)(double), const char* what) const {
    const toml::node* n = t.get(key);
    if (!n) {
      if (required) fail(line_of(t), full, "is missing");
      return def;
    }
    double v = 0;
    if (n->is_integer()) v = static_cast<double>(n->as_integer()->get());
    else if (n->is_floating_point()) v = n->as_floating_point()->get();
    else fail(line_of(*n), full, "must be a number, got " + type_name(*n));
    if (!ok(v)) fail(line_of(*n), full, std::string("must be ") + what + ", got " + num(v));
    return v;
  }

  static bool positive(double v) { return std::isfinite(v) && v > 0; }
  static bool nonneg(double v) { return std::isfinite(v) && v >= 0; }
  static bool at_least_one(double v) { return std::isfinite(v) && v >= 1 && v == std::floor(v); }

  Level read_level(const toml::node& node, const std::string& name) const {
    if (!node.is_table()) fail(line_of(node), name, "must be a table ([" + name + "]), got " + type_name(node));
    const toml::table& t = *node.as_table();
    check_keys(t, name + ".", {"alpha_us", "bw_GBps", "gamma_GBps", "gamma_fp16_GBps", "gamma_bf16_GBps", "conn_bw_GBps", "connections", "burst_bytes", "peak_bw_GBps",
                           "nics_per_node", "duplex", "contention", "contention_us", "cores_per_node", "source", "regime",
                           "regimes_by"});
    Level l;
    l.source = get_string(t, "source", false);
    if (const toml::node* kn = t.get("regimes_by")) {
      const auto v = kn->value<std::string>();
      if (!v || (*v != "message" && *v != "working_set"))
        fail(line_of(*kn), name + ".regimes_by", "must be \"message\" or \"working_set\"");
      l.regime_key = *v == "working_set" ? RegimeKey::WorkingSet : RegimeKey::Message;
    }
    const bool has_regimes = t.get("regime") != nullptr;
    l.alpha_s = get_number(t, "alpha_us", name + ".alpha_us", !has_regimes, 0, nonneg, "a finite number >= 0") * us;
    l.bw_Bps = get_number(t, "bw_GBps", name + ".bw_GBps", !has_regimes, 0, positive, "a finite number > 0") * GBps;
    const double g = get_number(t, "gamma_GBps", name + ".gamma_GBps", false, 0, positive, "a finite number > 0");
    l.gamma_Bps = g > 0 ? g * GBps : kInf;
    l.gamma_fp16_Bps = get_number(t, "gamma_fp16_GBps", name + ".gamma_fp16_GBps", false, 0, positive, "a finite number > 0") * GBps;
    l.gamma_bf16_Bps = get_number(t, "gamma_bf16_GBps", name + ".gamma_bf16_GBps", false, 0, positive, "a finite number > 0") * GBps;
    const double c = get_number(t, "conn_bw_GBps", name + ".conn_bw_GBps", false, 0, positive, "a finite number > 0");
    l.conn_bw_Bps = c > 0 ? c * GBps : kInf;
    l.connections = static_cast<int>(get_number(t, "connections", name + ".connections", false, 1, at_least_one, "an integer >= 1"));
    l.burst_bytes = get_number(t, "burst_bytes", name + ".burst_bytes", false, 0, nonneg, "a size in bytes >= 0");
    const double pk = get_number(t, "peak_bw_GBps", name + ".peak_bw_GBps", false, 0, positive, "a finite number > 0");
    l.peak_bw_Bps = pk > 0 ? pk * GBps : kInf;
    l.nics_per_node = static_cast<int>(get_number(t, "nics_per_node", name + ".nics_per_node", false, 1, at_least_one, "an integer >= 1"));
    const double dx = get_number(t, "duplex", name + ".duplex", false, 0, positive, "a finite number > 0");
    l.contention = get_number(t, "contention", name + ".contention", false, 1, positive, "a finite number > 0");
    l.contention_alpha_s = get_number(t, "contention_us", name + ".contention_us", false, 0, nonneg, "a finite number >= 0") * us;
    l.cores_per_node = static_cast<int>(get_number(t, "cores_per_node", name + ".cores_per_node", false, 0, at_least_one, "an integer >= 1"));
    if (const toml::node* rn = t.get("regime")) {
      const toml::array* arr = rn->as_array();
      if (!arr || arr->empty() || !arr->is_array_of_tables())
        fail(line_of(*rn), name + ".regime", "must be an array of tables ([[" + name + ".regime]])");
      double prev = 0;
      for (std::size_t i = 0; i < arr->size(); ++i) {
        const toml::table& rt = *(*arr)[i].as_table();
        const std::string k = name + ".regime[" + std::to_string(i) + "]";
        check_keys(rt, k + ".", {"up_to_bytes", "alpha_us", "bw_GBps", "duplex", "gamma_GBps"});
        Regime r;
        r.alpha_s = get_number(rt, "alpha_us", k + ".alpha_us", true, 0, nonneg, "a finite number >= 0") * us;
        r.bw_Bps = get_number(rt, "bw_GBps", k + ".bw_GBps", true, 0, positive, "a finite number > 0") * GBps;
        const double rdx = get_number(rt, "duplex", k + ".duplex", false, 0, positive, "a finite number > 0");
        if (rdx > 0 || dx > 0) r.duplex_bw_Bps = (rdx > 0 ? rdx : dx) * r.bw_Bps;
        r.gamma_Bps = get_number(rt, "gamma_GBps", k + ".gamma_GBps", false, 0, positive, "a finite number > 0") * GBps;
        if (r.gamma_Bps > 0 && l.regime_key != RegimeKey::WorkingSet)
          fail(line_of(*rt.get("gamma_GBps")), k + ".gamma_GBps",
               "a regime's own reduction rate needs regimes_by = \"working_set\" on the level");
        const bool last = i + 1 == arr->size();
        const double up = get_number(rt, "up_to_bytes", k + ".up_to_bytes", !last, kInf, positive, "a size in bytes > 0");
        if (up <= prev)
          fail(line_of(*rt.get("up_to_bytes")), k + ".up_to_bytes",
               "must be greater than the previous regime's up_to_bytes (" + num(prev) + "), got " + num(up));
        r.up_to_bytes = up;
        prev = up;
        l.regimes.push_back(r);
      }
      if (!t.get("alpha_us")) l.alpha_s = l.regimes.back().alpha_s;
      if (!t.get("bw_GBps")) l.bw_Bps = l.regimes.back().bw_Bps;
    }
    if (dx > 0) l.duplex_bw_Bps = dx * l.bw_Bps;
    return l;
  }

  std::string origin_;
};

std::string toml_str(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::string toml_num(double v) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, res.ptr);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

void level_toml(std::ostringstream& os, const std::string& name, const Level& l) {
  os << "\n[" << name << "]\n";
  if (!l.source.empty()) os << "source = " << toml_str(l.source) << "\n";
  os << "alpha_us = " << toml_num(l.alpha_s / us) << "\n";
  os << "bw_GBps = " << toml_num(l.bw_Bps / GBps) << "\n";
  if (std::isfinite(l.gamma_Bps)) os << "gamma_GBps = " << toml_num(l.gamma_Bps / GBps) << "\n";
  if (l.gamma_fp16_Bps > 0) os << "gamma_fp16_GBps = " << toml_num(l.gamma_fp16_Bps / GBps) << "\n";
  if (l.gamma_bf16_Bps > 0) os << "gamma_bf16_GBps = " << toml_num(l.gamma_bf16_Bps / GBps) << "\n";
  if (std::isfinite(l.conn_bw_Bps)) os << "conn_bw_GBps = " << toml_num(l.conn_bw_Bps / GBps) << "\n";
  if (l.connections != 1) os << "connections = " << l.connections << "\n";
  if (l.burst_bytes > 0) os << "burst_bytes = " << toml_num(l.burst_bytes) << "\n";
  if (std::isfinite(l.peak_bw_Bps)) os << "peak_bw_GBps = " << toml_num(l.peak_bw_Bps / GBps) << "\n";
  if (l.nics_per_node != 1) os << "nics_per_node = " << l.nics_per_node << "\n";
  if (l.duplex_bw_Bps > 0) os << "duplex = " << toml_num(l.duplex_bw_Bps / l.bw_Bps) << "\n";
  if (l.contention != 1) os << "contention = " << toml_num(l.contention) << "\n";
  if (l.contention_alpha_s > 0) os << "contention_us = " << toml_num(l.contention_alpha_s / us) << "\n";
  if (l.cores_per_node > 0) os << "cores_per_node = " << l.cores_per_node << "\n";
  if (l.regime_key == RegimeKey::WorkingSet) os << "regimes_by = \"working_set\"\n";
  for (const auto& r : l.regimes) {
    os << "[[" << name << ".regime]]\n";
    if (std::isfinite(r.up_to_bytes)) os << "up_to_bytes = " << toml_num(r.up_to_bytes) << "\n";
    os << "alpha_us = " << toml_num(r.alpha_s / us) << "\n";
    os << "bw_GBps = " << toml_num(r.bw_Bps / GBps) << "\n";
    if (r.duplex_bw_Bps > 0) os << "duplex = " << toml_num(r.duplex_bw_Bps / r.bw_Bps) << "\n";
    if (r.gamma_Bps > 0) os << "gamma_GBps = " << toml_num(r.gamma_Bps / GBps) << "\n";
  }
}

}  // namespace

Fabric parse_fabric(const std::string& text, const std::string& origin) {
  Fabric f = FabricReader(origin).read(text);
  validate_fabric(f);
  return f;
}

Fabric load_fabric(const std::string& name_or_path) {
  if (auto f = registry().build(name_or_path)) return *f;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(name_or_path, ec))
    throw UsageError("unknown fabric '" + name_or_path + "': not a built-in (" + registry().joined() +
                     ") and no such file");
  std::ifstream in(name_or_path, std::ios::binary);
  if (!in) throw UsageError("fabric '" + name_or_path + "': cannot open: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return parse_fabric(text.str(), name_or_path);
}

std::string fabric_to_toml(const Fabric& f) {
  std::ostringstream os;
  os << "# gradsync fabric profile (format: netmodel/fabric.hpp, netmodel/README.md)\n";
  os << "name = " << toml_str(f.name) << "\n";
  if (!f.description.empty()) os << "description = " << toml_str(f.description) << "\n";
  if (!f.source.empty()) os << "source = " << toml_str(f.source) << "\n";
  level_toml(os, "intra", f.intra);
  level_toml(os, "inter", f.inter);
  return os.str();
}

void save_fabric(const Fabric& f, const std::string& path) {
  validate_fabric(f);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error("save_fabric: cannot create '" + tmp + "': " + std::strerror(errno));
    out << fabric_to_toml(f);
    out.close();
    if (!out) throw Error("save_fabric: cannot write '" + tmp + "'");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw Error("save_fabric: cannot rename '" + tmp + "' to '" + path + "'");
  }
}

}  // namespace gradsync::netmodel
