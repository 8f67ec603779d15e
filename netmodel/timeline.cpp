// gradsync/netmodel/timeline.cpp — DDP bucketing and the step's event simulation.
#include "netmodel/timeline.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <queue>
#include <unordered_map>

#include "core/error.hpp"
#include "plan/buckets.hpp"

namespace gradsync::netmodel {

std::vector<Bucket> make_buckets(const std::vector<ReadyGrad>& grads, double bucket_mb, double first_bucket_mb) {
  GS_USAGE_CHECK(bucket_mb > 0, "option --bucket-mb must be > 0, got ", bucket_mb);
  GS_USAGE_CHECK(first_bucket_mb > 0, "option --first-bucket-mb must be > 0, got ", first_bucket_mb);
  // The reducer's own rule (plan::assign_buckets) takes forward order: grads are in ready
  // order, so ready position i is forward index N-1-i.
  const std::size_t nt = grads.size();
  std::vector<int64_t> forward_bytes(nt);
  for (std::size_t i = 0; i < nt; ++i) forward_bytes[nt - 1 - i] = grads[i].shape.numel * 4;
  const auto assignment = plan::assign_buckets(forward_bytes, plan::bucket_limit_bytes(bucket_mb),
                                               plan::bucket_limit_bytes(first_bucket_mb));
  std::vector<Bucket> out;
  out.reserve(assignment.size());
  for (const auto& members : assignment) {
    Bucket cur;
    for (std::size_t k : members) {
      const ReadyGrad& g = grads[nt - 1 - k];
      cur.tensors.push_back(g.shape);
      cur.grad_bytes += g.shape.numel * 4;
      cur.ready_s = std::max(cur.ready_s, g.ready_s);
    }
    out.push_back(std::move(cur));
  }
  return out;
}

namespace {

// Event of the simulation: a bucket becoming ready, or the comm stream becoming free.
struct Event {
  double t;
  int kind;  // 0 = bucket ready, 1 = comm stream free
  int bucket;
  bool operator>(const Event& o) const { return t > o.t || (t == o.t && kind > o.kind); }
};

}  // namespace

namespace {

// Token state of a shaped inter-node link (fabric.hpp): tokens at time t_s.
struct Tokens {
  double bytes = 0, t_s = 0;
};

// The shaped link's peak: the inter level with every bandwidth at peak_bw (the duplex
// factor, both-ways over one-way, kept).
Fabric peak_fabric(const Fabric& f) {
  Fabric p = f;
  p.inter = f.inter.at_bandwidth(f.inter.peak_bw_Bps);
  return p;
}

}  // namespace

double expected_max_std_normal(int p) {
  GS_CHECK(p >= 1, "expected_max_std_normal: p must be >= 1, got ", p);
  if (p == 1) return 0;
  // tune prices 1e5 configurations a second: each thread keeps the values it computed.
  thread_local std::unordered_map<int, double> known;
  if (auto it = known.find(p); it != known.end()) return it->second;
  // E[max] = integral of x p phi(x) Phi(x)^(p-1) dx; Simpson's rule on [-12, 12] (the
  // integrand is below 1e-30 outside it for any p this program meets).
  constexpr int n = 4800;
  constexpr double lo = -12, hi = 12, h = (hi - lo) / n;
  auto f = [p](double x) {
    const double phi = std::exp(-0.5 * x * x) / std::sqrt(2 * std::numbers::pi);
    const double cdf = 0.5 * std::erfc(-x / std::numbers::sqrt2);
    return x * p * phi * std::pow(cdf, p - 1);
  };
  double s = f(lo) + f(hi);
  for (int i = 1; i < n; ++i) s += (i % 2 ? 4 : 2) * f(lo + i * h);
  return known[p] = s * h / 3;
}

namespace {

// The ranks that share a set of cores, and those cores: the machine's (StepConfig::
// machine_ranks, machine_cores) where given, else the node's g ranks on the fabric's
// cores_per_node. share(): how much longer `threads` busy threads per rank take than on a
// core each (Level::cpu_share); 1 when the cores are unknown.
struct CoreShare {
  double ranks;
  int cores;
  double share(double threads) const {
    const double busy = ranks * threads;
    return cores > 0 && busy > cores ? busy / cores : 1.0;
  }
};

CoreShare core_share(const Fabric& fabric, double g, int machine_ranks, int machine_cores) {
  return {machine_ranks > 0 ? static_cast<double>(machine_ranks) : g,
          machine_cores > 0 ? machine_cores : fabric.cores_per_node()};
}

}  // namespace

double backward_contention(const Fabric& fabric, const NetConfig& net, double compute_threads, bool comm_preempts,
                           int machine_ranks, int machine_cores) {
  const Level& l = net.nodes > 1 ? fabric.inter : fabric.intra;
  if (l.contention != 1 || l.contention_alpha_s > 0 || compute_threads <= 0 || comm_preempts) return l.contention;
  // Not fitted: the CPU share. Inside backward each rank runs its compute threads and one
  // communication thread; alone, the communication thread only.
  const CoreShare c = core_share(fabric, std::max(1, net.ranks_per_node), machine_ranks, machine_cores);
  return c.share(compute_threads + 1) / c.share(1);
}

double codec_cpu_share(const Fabric& fabric, const NetConfig& net, const StepConfig& st, double threads_per_rank) {
  return std::ceil(core_share(fabric, std::max(1, net.ranks_per_node), st.machine_ranks, st.machine_cores)
                       .share(threads_per_rank));
}

double backward_slowdown_in_flight(const Fabric& fabric, double g, double c, bool comm_preempts, int machine_ranks,
                                   int machine_cores) {
  if (c <= 0) return 1.0;
  const CoreShare cs = core_share(fabric, g, machine_ranks, machine_cores);
  if (!comm_preempts) return cs.share(c + 1) / cs.share(c);
  if (cs.cores <= 0) return 1.0;
  const double alone = std::min(1.0, cs.cores / (cs.ranks * c));
  const double beside = std::min(1.0, std::max(0.0, cs.cores - cs.ranks) / (cs.ranks * c));
  return beside > 0 ? alone / beside : std::numeric_limits<double>::infinity();
}

StepResult simulate_step(const Workload& w, const std::vector<Bucket>& buckets, const Fabric& fabric,
                         const NetConfig& net, const StepConfig& st, int64_t samples_per_epoch, bool keep) {
  GS_USAGE_CHECK(net.nodes >= 1, "option --nodes must be >= 1, got ", net.nodes);
  GS_USAGE_CHECK(net.ranks_per_node >= 1, "option --ranks-per-node must be >= 1, got ", net.ranks_per_node);
  GS_USAGE_CHECK(st.batch_per_rank >= 1, "option --batch-per-rank must be >= 1, got ", st.batch_per_rank);
  GS_USAGE_CHECK(st.accumulate >= 1, "option --accumulate must be >= 1, got ", st.accumulate);
  GS_USAGE_CHECK(st.loader_workers >= 0, "option --loader-workers must be >= 0, got ", st.loader_workers);
  GS_USAGE_CHECK(st.data_time_s >= 0, "option --data-time-us must be >= 0");
  const Topology topo{net.nodes, net.ranks_per_node};
  const CollOptions copt32{net.chunk_bytes, net.channels};
  const double k = st.accumulate;
  // Micro-steps before the synchronized one: forward + backward without communication.
  const double bwd_nosync = std::isnan(w.backward_nosync_s) ? w.backward_s : w.backward_nosync_s;
  const double bwd_start = (k - 1) * (w.forward_s + bwd_nosync) + w.forward_s;
  const double bwd_end_alone = bwd_start + w.backward_s;
  const int nb = static_cast<int>(buckets.size());
  // E[max of p std normals]: how far the slowest of the ranks lies beyond their mean, per
  // sigma (0 for one rank); the step's, the codecs' and each bucket's waits scale with it.
  const double slowest = expected_max_std_normal(topo.ranks());
  // The slowest of the ranks ends the synchronous step (compute profile's rank_jitter).
  const double straggler = (w.rank_jitter > 0 ? slowest * w.rank_jitter *
                                                   (k * w.forward_s + (k - 1) * bwd_nosync + w.backward_s + w.optimizer_s)
                                             : 0.0) +
                           w.rank_wait_s;

  // A shaped inter-node link: collectives spend tokens (the bytes one rank sends, nccl-tests'
  // bus factor x size), which refill at the sustained rate.
  const bool shaped = net.nodes > 1 && fabric.inter.burst_bytes > 0;
  const Fabric peak = shaped ? peak_fabric(fabric) : Fabric{};
  const double burst = fabric.inter.burst_bytes, rate = fabric.inter.bw(kInf);
  // Contention with compute (fabric.hpp): a collective starting at t < bwd_end pays the
  // level's contention_us first; the part of its d seconds alone that falls inside backward
  // runs `slow` times slower: (bwd_end - t) / slow of its work before backward ends, the
  // rest at full speed.
  const double slow =
      backward_contention(fabric, net, st.compute_threads, st.comm_preempts_compute, st.machine_ranks, st.machine_cores);
  const double wake = (net.nodes > 1 ? fabric.inter : fabric.intra).contention_alpha_s;
  // Backward slowed by the buckets in flight (StepConfig::compute_shares_cpu): `cslow` times
  // its time alone while one is. bwd_end and the ready times below are the wall times of
  // backward's progress given the previous pass's communication intervals (`busy_iv`).
  const double g_node = std::max(1, net.ranks_per_node);
  const double cslow = st.compute_shares_cpu && st.overlap
                           ? backward_slowdown_in_flight(fabric, g_node, st.compute_threads, st.comm_preempts_compute,
                                                         st.machine_ranks, st.machine_cores)
                           : 1.0;
  std::vector<std::pair<double, double>> busy_iv;
  // The codecs' CPU share (StepConfig::machine_ranks, codec_beside_compute): alone, and for
  // the part of a codec phase inside backward.
  const double codec_share = codec_cpu_share(fabric, net, st);
  const double codec_share_in =
      st.overlap && st.codec_beside_compute && !st.comm_preempts_compute && st.compute_threads > 0
          ? std::max(codec_share, codec_cpu_share(fabric, net, st, 1 + st.compute_threads))
          : codec_share;
  auto wall = [&](double x) {  // backward progress x (seconds alone) -> wall time
    double t = bwd_start, done = 0;
    for (auto [s, e] : busy_iv) {
      s = std::max(s, t);
      if (e <= s) continue;
      if (done + (s - t) >= x) return t + (x - done);
      done += s - t;
      const double prog = (e - s) / cslow;
      if (done + prog >= x) return s + (x - done) * cslow;
      done += prog;
      t = e;
    }
    return t + (x - done);
  };
  double bwd_end = bwd_end_alone;
  // Work of d seconds alone with `busy` seconds of backward left: `inside` times slower
  // until backward ends, `outside` times after (the contention of collectives, the codecs'
  // CPU share).
  auto straddle = [](double busy, double d, double inside, double outside) {
    if (busy <= 0 || inside == outside) return d * outside;
    return d * inside <= busy ? d * inside : busy + (d - busy / inside) * outside;
  };
  auto contended = [&](double t, double d) {
    if (!st.overlap || t >= bwd_end || d <= 0) return d;
    return wake + straddle(bwd_end - t - wake, d, slow, 1.0);
  };
  auto collective = [&](const Phase& ph, double t, Tokens& tok) {
    CollOptions copt = copt32;
    copt.reduce_dtype = ph.dtype;
    copt.registered = net.registered_buckets && ph.in_bucket;
    const double sustained = collective_time(fabric, ph.op, net.algo, topo, ph.bytes, copt);
    const double x = busbw_factor(ph.op, topo.ranks()) * ph.bytes;
    if (!shaped || x <= 0) return sustained;
    tok.bytes = std::min(burst, tok.bytes + rate * std::max(0.0, t - tok.t_s));
    // The first `used` bytes go at the peak; the rest at the rate, which is also what the
    // bucket refills at: it ends empty unless the whole collective fitted.
    const double used = std::min(tok.bytes, x), f = used / x;
    const double at_peak = f * collective_time(peak, ph.op, net.algo, topo, ph.bytes, copt);
    const double d = at_peak + (1 - f) * sustained;
    tok.bytes = f < 1 ? 0.0 : std::min(burst, tok.bytes - used + rate * at_peak);
    tok.t_s = t + d;
    return d;
  };

  // One step from `tok` (tokens at the step's start); leaves the tokens after its last collective.
  auto pass = [&](Tokens& tok) {
    bwd_end = wall(w.backward_s);  // bwd_end_alone until a pass has recorded intervals
    StepResult r;
    r.forward_s = k * w.forward_s;
    r.backward_sync_s = w.backward_s + (bwd_end - bwd_end_alone);
    r.backward_s = (k - 1) * bwd_nosync + r.backward_sync_s;
    r.optimizer_s = w.optimizer_s;
    std::vector<std::pair<double, double>> iv;  // buckets in flight inside backward (only with cslow)
    auto ready_at = [&](int b) { return st.overlap ? wall(buckets[b].ready_s) : bwd_end; };
    // Event loop: buckets become ready (compute stream); the comm stream takes them in
    // bucket order, one at a time.
    std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events;
    for (int b = 0; b < nb; ++b) events.push({ready_at(b), 0, b});
    if (keep) r.buckets.resize(nb);
    std::vector<char> ready(nb, 0);
    int next = 0;  // next bucket the comm stream will take
    bool busy = false;
    double last_end = bwd_end;
    double codec_jitter = 0;  // sum over buckets of codec_sigma x the bucket's codec time
    while (!events.empty()) {
      const Event e = events.top();
      events.pop();
      if (e.kind == 0) ready[e.bucket] = 1;
      else busy = false;
      if (busy || next >= nb || !ready[next]) continue;
      // Start bucket `next` now: its phases (local work, then a collective) in order.
      const Bucket& bk = buckets[next];
      auto codec_time = [&](double t0, double d) { return straddle(bwd_end - t0, d, codec_share_in, codec_share); };
      double comm = 0, codec = 0, t = e.t, extra = 0, waited = 0;
      for (const Phase& ph : bk.plan.phases) {
        const double cd = codec_time(t, ph.compute_s);
        codec += cd;
        t += cd;
        const double priced = collective(ph, t, tok);
        const double alone = std::max(priced + ph.extra_s, ph.min_s);
        waited += alone - priced;
        const double c = contended(t, alone);
        extra += c - alone;
        comm += c;
        t += c;
      }
      codec += codec_time(t, bk.plan.tail_s);
      // The bucket's collective waits for the rank that encoded it last (Workload::codec_wait_s).
      const double codec_wait = codec > 0 ? slowest * (w.codec_wait_s + w.codec_wait_frac * codec) : 0.0;
      comm += codec_wait;
      const double start = e.t, end = start + codec + comm;
      codec_jitter += bk.plan.codec_sigma * codec;
      r.comm_total_s += codec + comm;
      r.bytes_sent += bk.plan.wire_bytes;
      if (keep) {
        BucketTiming& bt = r.buckets[next];
        bt.grad_bytes = bk.grad_bytes;
        bt.wire_bytes = bk.plan.wire_bytes;
        bt.ntensors = static_cast<int>(bk.tensors.size());
        bt.ready_s = ready_at(next);
        bt.start_s = start;
        bt.end_s = end;
        bt.comm_s = comm;
        bt.codec_s = codec;
        bt.contention_s = extra;
        bt.codec_wait_s = codec_wait;
      }
      // With the communication thread preempting compute, its contention (the wait for a
      // core, and the slower progress beside backward) is time in which compute holds the
      // core: backward stops only for the rest of the bucket's time. So is what a hook's
      // collective takes beyond the fabric's price (Phase::extra_s, min_s: the hook's
      // completion path, measured after backward; inside backward the hook's collectives
      // took the fabric's time): the bucket holds the core until its priced work is done.
      const double held = st.comm_preempts_compute ? std::min(start + extra, end) : start;
      const double held_end = st.comm_preempts_compute ? std::max(held, end - waited) : end;
      if (cslow > 1 && held < bwd_end) iv.emplace_back(held, std::min(held_end, bwd_end));
      last_end = end;
      busy = true;
      ++next;
      events.push({end, 1, -1});
    }
    r.comm_exposed_s = std::max(0.0, last_end - bwd_end);
    r.reducer_s = w.reducer_per_step_s + w.reducer_per_bucket_s * nb;
    // The wait for the slowest rank's codec (StepResult::straggler_s) on top of the compute's.
    r.straggler_s = straggler + (codec_jitter != 0 ? slowest * codec_jitter : 0.0);
    const double compute_part = bwd_end + r.comm_exposed_s + r.optimizer_s + r.reducer_s + r.straggler_s;

    // Data loading (per micro-step batch x data_time_s of work).
    const double load = k * static_cast<double>(st.batch_per_rank) * st.data_time_s;
    if (st.loader_workers == 0) r.data_s = load;
    else r.data_s = std::max(0.0, load / st.loader_workers - compute_part);
    r.data_s += w.data_s;
    // Shift the timings by the exposed data time at the start of the step.
    if (keep && r.data_s > 0)
      for (auto& bt : r.buckets) {
        bt.ready_s += r.data_s;
        bt.start_s += r.data_s;
        bt.end_s += r.data_s;
      }
    r.step_time_s = r.data_s + compute_part;
    busy_iv = iv;
    return r;
  };
  // Without cslow one pass; with it, passes until backward's end settles (the intervals
  // move the ready times, which move the intervals).
  auto run = [&](Tokens& tok) {
    busy_iv.clear();
    const Tokens tok0 = tok;
    StepResult r = pass(tok);
    for (int it = 0; cslow > 1 && it < 20; ++it) {
      const double before = bwd_end;
      tok = tok0;
      r = pass(tok);
      if (std::abs(bwd_end - before) <= 1e-9) break;
    }
    return r;
  };

  double b0 = burst;
  Tokens tok{b0, 0};
  StepResult r = run(tok);
  // Steady state of a shaped link: the tokens a step starts with are what the previous
  // step left plus the refill until it ended. Iterate (damped) to the fixed point: a full
  // bucket when the step's traffic is below rate x step time, else the balance point.
  for (int it = 0; shaped && it < 60; ++it) {
    const double left = std::min(burst, tok.bytes + rate * std::max(0.0, r.step_time_s - tok.t_s));
    if (std::abs(left - b0) <= 1e-6 * burst) break;
    b0 = it < 4 ? left : 0.5 * (b0 + left);
    tok = Tokens{b0, 0};
    r = run(tok);
  }
  const double global_batch = static_cast<double>(st.batch_per_rank) * topo.ranks() * k;
  r.steps_per_epoch = samples_per_epoch > 0 ? static_cast<int64_t>(std::ceil(samples_per_epoch / global_batch)) : 0;
  r.epoch_time_s = r.steps_per_epoch * r.step_time_s;
  return r;
}

}  // namespace gradsync::netmodel
