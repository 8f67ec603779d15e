// tune.cpp — exhaustive search of the runtime's knobs with the step model.
//
// Purpose: turn the seed article's tuning advice (bucket size, algorithm, buffer size,
//   sockets per peer, compression, precision, interface) into a recommendation for one
//   cluster, with the numbers a user can check against a run.
//
// Approach: the cross product of the TuneSpace's axes, pruned where a knob cannot change
//   the answer (chunk and channels only for the pipelined algorithms ring, hier, tree and
//   auto; shm takes the chunk as its round size, but not channels; rd and rabenseifner send
//   their exchanges in pieces of the chunk, which the model prices as whole messages, so
//   their chunk stays the runtime's transport-aware default), each candidate
//   predicted by the same Predictor as `predict` (workload, bucket layout and fabric cached,
//   so a candidate costs one event loop over the buckets). Candidates are ranked by step
//   time; ties keep the order of the space (the simpler setting first: the space lists
//   defaults first). The list of alternatives shows a configuration once where only its
//   chunk, channels, algorithm or first-bucket cap differ and the prediction does not
//   (same_algos, same_first_bucket_mb).
//   What bounds the winner: its step is split into compute (forward + backward +
//   optimizer), data loading, and exposed communication; the exposed part is divided into
//   latency, bandwidth and codec in the proportion of the winner's communication time
//   (latency: the same collectives at 4 bytes; codec: encode/decode/casts and the buckets'
//   waits for the slowest rank's codec; bandwidth: the rest). The largest of the five is the bound.
//
// Cost: (candidates) x (one step simulation, ~buckets events); 1e5 candidates of ResNet-50
//   in about a second on one core (gradsync-model tune prints its own count and time).
//
// Use case: `gradsync-model tune`, and `gradsync-train --tune FABRIC`, which applies
//   train_args() of the winner.
#include "netmodel/tune.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/error.hpp"
#include "core/units.hpp"
#include "netmodel/collectives.hpp"
#include "plan/algos.hpp"

namespace gradsync::netmodel {

namespace {

bool pipelined(const std::string& algo) { return algo == "ring" || algo == "hier" || algo == "tree" || algo == "auto"; }
bool takes_chunk(const std::string& algo) { return pipelined(algo) || algo == "shm"; }

// The runtime's transport-aware chunk for Open MPI over TCP (plan/algos.hpp, the rule
// runtime/algos/chunk.cpp applies).
double runtime_chunk(int nodes) { return static_cast<double>(plan::chunk_used("ring", nodes, 0)); }

TuneEntry entry(const PredictConfig& c, const StepResult& r) {
  return TuneEntry{c, r.step_time_s, r.epoch_time_s, r.comm_exposed_s, {}, {}};
}

TuneBound explain(const PredictConfig& c, Predictor& predictor) {
  const StepResult r = predictor.predict(c, true);
  TuneBound b;
  b.compute_s = r.forward_s + r.backward_s + r.optimizer_s;  // the step's: every micro-step's
  b.data_s = r.data_s;
  b.comm_total_s = r.comm_total_s;
  b.comm_exposed_s = r.comm_exposed_s;
  double codec = 0, comm = 0, latency = 0;
  const Fabric& f = predictor.fabric(c.fabric, c.intra);
  const Topology topo{c.nodes, c.ranks_per_node};
  CollOptions co;
  co.chunk_bytes = c.chunk_bytes;
  co.channels = c.channels;
  const double alpha_only = collective_time(f, Op::Allreduce, c.algo, topo, 4, co);
  for (const auto& bt : r.buckets) {
    const double collectives = bt.comm_s - bt.codec_wait_s;  // the wait is the codec's
    codec += bt.codec_s + bt.codec_wait_s;
    comm += collectives;
    latency += std::min(collectives, alpha_only);
  }
  const double total = codec + comm;
  if (total > 0) {
    b.codec_s = r.comm_exposed_s * codec / total;
    b.latency_s = r.comm_exposed_s * latency / total;
    b.bandwidth_s = r.comm_exposed_s * (comm - latency) / total;
  }
  const std::pair<const char*, double> parts[] = {{"compute", b.compute_s},     {"data", b.data_s},
                                                  {"latency", b.latency_s},     {"bandwidth", b.bandwidth_s},
                                                  {"codec", b.codec_s}};
  double best = -1;
  for (const auto& [name, v] : parts)
    if (v > best) {
      best = v;
      b.name = name;
    }
  return b;
}

Json entry_json(const TuneEntry& e) {
  const PredictConfig& c = e.config;
  Json j = Json::object();
  j.set("fabric", c.fabric).set("bucket_mb", c.bucket_mb).set("first_bucket_mb", c.first_bucket_mb);
  j.set("algo", c.algo).set("chunk_bytes", c.chunk_bytes).set("channels", c.channels);
  j.set("compress", c.compress).set("precision", c.precision);
  j.set("step_time_s", e.step_time_s).set("epoch_time_s", e.epoch_time_s).set("comm_exposed_s", e.comm_exposed_s);
  j.set("train_args", train_args(c));
  Json same = Json::array();
  for (const auto& a : e.same_algos) same.push(a);
  j.set("same_algos", same);
  Json first = Json::array();
  for (double f : e.same_first_bucket_mb) first.push(f);
  j.set("same_first_bucket_mb", first);
  return j;
}

}  // namespace

TuneSpace default_tune_space(int nodes, int ranks_per_node) {
  TuneSpace s;
  s.bucket_mb = {25, 1, 2, 5, 10, 50, 100};
  s.first_bucket_mb = {1, 0.25, 0.5, 2, 5};
  s.algo = {"ring", "auto", "mpi", "rabenseifner", "rd", "tree"};
  if (nodes == 1 && ranks_per_node > 1) s.algo.push_back("shm");
  if (nodes > 1 && ranks_per_node > 1) s.algo.push_back("hier");
  s.chunk_bytes = {runtime_chunk(nodes), 16.0 * 1024, 64.0 * 1024, 256.0 * 1024, 1024.0 * 1024};
  s.chunk_bytes.push_back(runtime_chunk(nodes > 1 ? 1 : 2));  // the other placement's default
  s.channels = {1, 2, 4};
  s.compress = {"none",       "fp16",       "bf16",   "powersgd:rank=1", "powersgd:rank=4",
                "qsgd:levels=16", "qsgd:levels=4", "onebit", "topk:ratio=0.01"};
  s.precision = {"fp32", "bf16", "fp16"};
  return s;
}

void apply_tune_axes(const std::vector<Axis>& given, PredictConfig& base, TuneSpace& space) {
  // The cluster first: the default space depends on it.
  for (const auto& a : given) {
    const bool knob = a.name == "bucket-mb" || a.name == "first-bucket-mb" || a.name == "algo" ||
                      a.name == "chunk-bytes" || a.name == "channels" || a.name == "compress" ||
                      a.name == "precision" || a.name == "fabric";
    if (knob) continue;
    GS_USAGE_CHECK(a.size() == 1, "option --", a.name, ": tune takes one value (only the knobs take lists)");
    apply_axis(a, 0, base);
  }
  space = default_tune_space(base.nodes, base.ranks_per_node);
  for (const auto& a : given) {
    if (a.name == "bucket-mb") space.bucket_mb = a.numbers;
    else if (a.name == "first-bucket-mb") space.first_bucket_mb = a.numbers;
    else if (a.name == "chunk-bytes") space.chunk_bytes = a.numbers;
    else if (a.name == "channels") {
      space.channels.clear();
      for (double v : a.numbers) {
        GS_USAGE_CHECK(v >= 1 && v == static_cast<int>(v), "option --channels: must be integers >= 1");
        space.channels.push_back(static_cast<int>(v));
      }
    } else if (a.name == "algo") space.algo = a.strings;
    else if (a.name == "precision") space.precision = a.strings;
    else if (a.name == "fabric") space.fabric = a.strings;
    else if (a.name == "compress") space.compress = a.strings;
  }
  for (const auto& a : space.algo) check_algo_name(a);
  if (!space.fabric.empty()) base.fabric = space.fabric.front();
}

PredictConfig runtime_default_config(const PredictConfig& base) {
  PredictConfig c = base;
  c.bucket_mb = 25;
  c.first_bucket_mb = 1;
  c.algo = "auto";
  c.chunk_bytes = runtime_chunk(base.nodes);
  c.channels = 1;
  c.compress = "none";
  c.precision = "fp32";
  return c;
}

TuneReport tune(const PredictConfig& base, const TuneSpace& space, Predictor& predictor, std::size_t top_n) {
  const auto t0 = std::chrono::steady_clock::now();
  GS_USAGE_CHECK(!space.bucket_mb.empty() && !space.first_bucket_mb.empty() && !space.algo.empty() &&
                     !space.chunk_bytes.empty() && !space.channels.empty() && !space.compress.empty() &&
                     !space.precision.empty(),
                 "tune: every knob needs at least one value");
  for (const auto& a : space.algo) check_algo_name(a);
  const std::vector<std::string> fabrics = space.fabric.empty() ? std::vector<std::string>{base.fabric} : space.fabric;

  TuneReport rep;
  std::vector<TuneEntry> all;
  PredictConfig c = base;
  for (const auto& fab : fabrics) {
    c.fabric = fab;
    for (const auto& prec : space.precision) {
      c.precision = prec;
      for (const auto& comp : space.compress) {
        c.compress = comp;
        for (double bmb : space.bucket_mb) {
          c.bucket_mb = bmb;
          for (double fmb : space.first_bucket_mb) {
            c.first_bucket_mb = fmb;
            for (const auto& algo : space.algo) {
              c.algo = algo;
              const std::size_t nchunk = takes_chunk(algo) ? space.chunk_bytes.size() : 1;
              const std::size_t nchan = pipelined(algo) ? space.channels.size() : 1;
              for (std::size_t ci = 0; ci < nchunk; ++ci) {
                // An algorithm that takes no chunk runs with the runtime's own (rd and
                // rabenseifner: pieces between nodes; mpi: whole), which its compressors'
                // all-gathers use too (plan::chunk_used).
                // A fixed `--chunk-bytes auto` is the runtime's own too; both are written out
                // in bytes (chunk_priced).
                c.chunk_bytes = takes_chunk(algo) ? space.chunk_bytes[ci] : kAutoChunk;
                if (c.chunk_bytes == kAutoChunk) c.chunk_bytes = chunk_priced(c);
                for (std::size_t hi = 0; hi < nchan; ++hi) {
                  c.channels = space.channels[hi];
                  all.push_back(entry(c, predictor.predict(c, false)));
                }
              }
            }
          }
        }
      }
    }
  }
  rep.evaluated = all.size();
  rep.fabrics_searched = fabrics.size();
  std::stable_sort(all.begin(), all.end(),
                   [](const TuneEntry& a, const TuneEntry& b) { return a.step_time_s < b.step_time_s; });
  rep.best = all.front();
  // Alternatives that differ only in knobs that change nothing (a chunk or channel count,
  // the algorithm, or the first bucket's cap, the model predicts no difference for) are one
  // alternative: keep the first of them; another algorithm or first-bucket cap among them
  // that alone makes the difference is listed with it (same_algos, same_first_bucket_mb).
  // Without this, a compressor that sends no all-reduce filled the list with one
  // configuration under each algorithm (topk on 3 hosts: five lines of 35.443 ms), and
  // ResNet-50 on 4 nodes with PowerSGD with one per first-bucket cap (five of 11.040 ms).
  auto same_but_inert_knobs = [](const TuneEntry& a, const TuneEntry& b) {
    const PredictConfig &x = a.config, &y = b.config;
    return x.fabric == y.fabric && x.bucket_mb == y.bucket_mb && x.compress == y.compress &&
           x.precision == y.precision && std::abs(a.step_time_s - b.step_time_s) <= 1e-9 * std::max(a.step_time_s, 1e-12);
  };
  auto add_once = [](auto& list, const auto& v) {
    if (std::find(list.begin(), list.end(), v) == list.end()) list.push_back(v);
  };
  for (const auto& e : all) {
    TuneEntry* same = nullptr;
    for (auto& t : rep.top)
      if (same_but_inert_knobs(t, e)) same = &t;
    if (same == nullptr) {
      if (rep.top.size() >= top_n) break;
      rep.top.push_back(e);
      continue;
    }
    const bool other_algo = e.config.algo != same->config.algo;
    const bool other_first = e.config.first_bucket_mb != same->config.first_bucket_mb;
    if (other_algo && !other_first) add_once(same->same_algos, e.config.algo);
    if (other_first && !other_algo) add_once(same->same_first_bucket_mb, e.config.first_bucket_mb);
  }
  for (auto& t : rep.top) std::sort(t.same_first_bucket_mb.begin(), t.same_first_bucket_mb.end());
  for (const auto& comp : space.compress) {
    for (const auto& e : all)
      if (e.config.compress == comp) {
        rep.best_per_compressor.push_back(e);
        break;
      }
  }
  PredictConfig d = runtime_default_config(base);
  d.fabric = fabrics.front();
  rep.base = entry(d, predictor.predict(d, false));
  rep.bound = explain(rep.best.config, predictor);
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

std::string train_args(const PredictConfig& c) {
  std::ostringstream o;
  o << "--bucket-mb " << c.bucket_mb << " --first-bucket-mb " << c.first_bucket_mb << " --algo " << c.algo;
  if (takes_chunk(c.algo)) o << " --chunk-bytes " << static_cast<long long>(c.chunk_bytes);
  if (pipelined(c.algo)) o << " --channels " << c.channels;
  o << " --compress " << c.compress << " --precision " << c.precision;
  return o.str();
}

Json tune_json(const TuneReport& r) {
  Json j = Json::object();
  j.set("recommended", entry_json(r.best)).set("default", entry_json(r.base));
  j.set("predicted_gain_pct", r.base.step_time_s > 0 ? 100 * (1 - r.best.step_time_s / r.base.step_time_s) : 0.0);
  Json top = Json::array();
  for (const auto& e : r.top) top.push(entry_json(e));
  j.set("top", top);
  Json per = Json::array();
  for (const auto& e : r.best_per_compressor) per.push(entry_json(e));
  j.set("best_per_compressor", per);
  Json b = Json::object();
  b.set("name", r.bound.name).set("compute_s", r.bound.compute_s).set("data_s", r.bound.data_s);
  b.set("latency_s", r.bound.latency_s).set("bandwidth_s", r.bound.bandwidth_s).set("codec_s", r.bound.codec_s);
  b.set("comm_total_s", r.bound.comm_total_s).set("comm_exposed_s", r.bound.comm_exposed_s);
  j.set("bound", b);
  j.set("machine_ranks", r.best.config.machine_ranks).set("machine_cores", r.best.config.machine_cores);
  j.set("fabrics_searched", static_cast<long long>(r.fabrics_searched));
  j.set("evaluated", static_cast<long long>(r.evaluated)).set("seconds", r.seconds);
  return j;
}

std::string tune_text(const TuneReport& r) {
  std::ostringstream o;
  char line[512];
  const PredictConfig& c = r.best.config;
  std::snprintf(line, sizeof line, "gradsync-model tune: %s on %s, %d nodes x %d ranks, batch %lld/rank: %zu candidates in %.2f s\n",
                c.model.c_str(), c.fabric.c_str(), c.nodes, c.ranks_per_node, static_cast<long long>(c.batch_per_rank),
                r.evaluated, r.seconds);
  o << line;
  if (c.machine_ranks > 0) {
    std::snprintf(line, sizeof line, "  machine: %d ranks share %d cores (codecs priced at their share of them)\n",
                  c.machine_ranks, c.machine_cores);
    o << line;
  }
  o << "recommended: " << train_args(c) << "\n";
  if (r.fabrics_searched > 1) o << "  interface (fabric): " << c.fabric << " of " << r.fabrics_searched << " offered\n";
  std::snprintf(line, sizeof line, "  predicted step %.3f ms, epoch %.2f s (default: step %.3f ms, epoch %.2f s; %+.1f%%)\n",
                r.best.step_time_s * 1e3, r.best.epoch_time_s, r.base.step_time_s * 1e3, r.base.epoch_time_s,
                r.base.step_time_s > 0 ? -100 * (1 - r.best.step_time_s / r.base.step_time_s) : 0.0);
  o << line;
  o << "default:     " << train_args(r.base.config) << "\n";
  const TuneBound& b = r.bound;
  std::snprintf(line, sizeof line,
                "bound: %s (compute %.3f ms, data %.3f ms, exposed comm %.3f ms = latency %.3f + bandwidth %.3f + "
                "codec %.3f; %.3f ms of communication in all)\n",
                b.name.c_str(), b.compute_s * 1e3, b.data_s * 1e3, b.comm_exposed_s * 1e3, b.latency_s * 1e3,
                b.bandwidth_s * 1e3, b.codec_s * 1e3, b.comm_total_s * 1e3);
  o << line;
  o << "top alternatives:\n";
  auto list = [&o](const auto& v) {
    for (std::size_t i = 0; i < v.size(); ++i) o << (i ? ", " : " ") << v[i];
  };
  for (const auto& e : r.top) {
    std::snprintf(line, sizeof line, "  %10.3f ms  %s%s%s", e.step_time_s * 1e3, train_args(e.config).c_str(),
                  e.config.fabric != c.fabric ? "  on " : "", e.config.fabric != c.fabric ? e.config.fabric.c_str() : "");
    o << line;
    if (!e.same_algos.empty() || !e.same_first_bucket_mb.empty()) {
      o << "  (predicted the same with";
      if (!e.same_algos.empty()) {
        o << " --algo";
        list(e.same_algos);
      }
      if (!e.same_first_bucket_mb.empty()) {
        o << (e.same_algos.empty() ? "" : ";") << " --first-bucket-mb";
        list(e.same_first_bucket_mb);
      }
      o << ")";
    }
    o << "\n";
  }
  o << "best per compressor:\n";
  for (const auto& e : r.best_per_compressor) {
    std::snprintf(line, sizeof line, "  %-18s %10.3f ms  %s\n", e.config.compress.c_str(), e.step_time_s * 1e3,
                  train_args(e.config).c_str());
    o << line;
  }
  return o.str();
}

}  // namespace gradsync::netmodel
