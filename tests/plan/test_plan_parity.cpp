// gradsync/tests/plan/test_plan_parity.cpp — runtime and model agree on every shared decision.
//
// The runtime side is the runtime's own objects (the algorithm registry, AutoAllreduce with
// its sub-algorithms, the compressor registry, the Reducer's bucket layout) built over a
// "shape" communicator: rank 0 of N nodes x G ranks, node-major, that answers the shape
// queries and the collective set-up calls the constructors make, and refuses all traffic.
// The model side is netmodel's public API. Both must equal runtime/plan/ and each other:
//   * algorithm names, and auto (and mpi) for 1..8 nodes x 1..8 ranks per node, 8 B..1 GiB;
//   * compressor names and which specs are accepted;
//   * bucket layouts for every zoo model at several (bucket, first bucket) limits;
//   * the DDP layouts at 25/1 MiB of resnet50, bert-base, vgg16 and gpt2, pinned.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "algos/allreduce.hpp"
#include "comm/communicator.hpp"
#include "compress/compressor.hpp"
#include "core/error.hpp"
#include "models/zoo.hpp"
#include "netmodel/collectives.hpp"
#include "netmodel/compress.hpp"
#include "netmodel/predict.hpp"
#include "netmodel/timeline.hpp"
#include "plan/algos.hpp"
#include "plan/buckets.hpp"
#include "plan/compress.hpp"
#include "plan/precision.hpp"
#include "train/reducer.hpp"

namespace gradsync {
namespace {

// Rank 0 of `nodes` x `g` ranks. Sub-communicators: hier splits by node first (this rank's
// node: 1 x g) and then by local rank (one per node: nodes x 1); split() hands those out in
// that order. `uneven`: nodes differ in size (min/max of local_size disagree), as hier checks.
class ShapeComm final : public Communicator {
 public:
  ShapeComm(int nodes, int g, bool uneven = false) : nodes_(nodes), g_(g), uneven_(uneven) {}
  int rank() const override { return 0; }
  int size() const override { return nodes_ * g_; }
  int local_rank() const override { return 0; }
  int local_size() const override { return g_; }
  int node_id() const override { return 0; }
  int node_count() const override { return nodes_; }
  std::string backend() const override { return "shape"; }
  std::string hostname() const override { return "localhost"; }
  Request isend(const void*, std::size_t, int, int) override { throw Error("shape: no traffic"); }
  Request irecv(void*, std::size_t, int, int) override { throw Error("shape: no traffic"); }
  void allreduce(const void*, void*, std::size_t, DType, RedOp) override { throw Error("shape: no traffic"); }
  void reduce_scatter(const void*, void*, std::size_t, DType, RedOp) override { throw Error("shape: no traffic"); }
  void allgather(const void*, void*, std::size_t, DType) override { throw Error("shape: no traffic"); }
  void alltoall(const void*, void*, std::size_t, DType) override { throw Error("shape: no traffic"); }
  void broadcast(void*, std::size_t, DType, int) override { throw Error("shape: no traffic"); }
  void barrier() override {}
  double max_double(double v) override { return v; }
  double sum_double(double v) override { return v * size(); }
  std::int64_t min_int64(std::int64_t v) override { return uneven_ ? v - 1 : v; }
  std::int64_t max_int64(std::int64_t v) override { return v; }
  std::vector<std::string> allgather_strings(const std::string& s) override {
    return std::vector<std::string>(static_cast<std::size_t>(size()), s);
  }
  void broadcast_bytes(std::vector<char>&, int) override {}
  // Open MPI's transports: shared memory on this rank's node (ranks 0..g-1), TCP with its
  // default eager limit to the others.
  PeerLink link_to(int peer) const override {
    if (peer / g_ == 0) return {PeerLink::Kind::SharedMemory, "sm", 4096};
    return {PeerLink::Kind::Network, "tcp", plan::kTcpEagerLimitBytes};
  }
  std::unique_ptr<Communicator> split(int, int) override {
    return ++splits_ == 1 ? std::make_unique<ShapeComm>(1, g_) : std::make_unique<ShapeComm>(nodes_, 1);
  }

 private:
  int nodes_, g_;
  bool uneven_;
  int splits_ = 0;
};

std::vector<std::uint64_t> test_sizes() {
  std::vector<std::uint64_t> v;
  for (std::uint64_t b = 8; b <= (std::uint64_t{1} << 30); b *= 2) v.insert(v.end(), {b - 1, b, b + 1});
  for (std::uint64_t b : {plan::kAutoSmallBytes, plan::kAutoMediumBytes, plan::kMpiRdBytes})
    v.insert(v.end(), {b - 1, b, b + 1});
  return v;
}

// ---- algorithm names and rules ---------------------------------------------------------------

TEST(PlanParity, AlgorithmNames) {
  EXPECT_EQ(allreduce_names(), plan::allreduce_names());  // runtime registry (checks its factories)
  const auto& model = netmodel::algo_names();
  ASSERT_GE(model.size(), plan::allreduce_names().size());
  for (std::size_t i = 0; i < plan::allreduce_names().size(); ++i) EXPECT_EQ(model[i], plan::allreduce_names()[i]);
  for (const auto& n : plan::allreduce_names()) {
    EXPECT_NO_THROW(check_allreduce_name(n)) << n;
    EXPECT_NO_THROW(netmodel::check_algo_name(n)) << n;
  }
  EXPECT_THROW(check_allreduce_name("butterfly"), UsageError);
  EXPECT_THROW(netmodel::check_algo_name("butterfly"), UsageError);
}

TEST(PlanParity, AutoOnEveryShapeAndSize) {
  const auto sizes = test_sizes();
  for (int nodes = 1; nodes <= 8; ++nodes) {
    for (int g = 1; g <= 8; ++g) {
      ShapeComm comm(nodes, g);
      auto runtime_auto = make_allreduce("auto", comm, AlgoOptions{});
      const netmodel::Topology topo{nodes, g};
      for (std::uint64_t b : sizes) {
        // ShapeComm has no shared window, so the runtime's auto takes the rule without shm;
        // the model assumes the window a real one-node job gets (runtime/algos/shm.cpp).
        const std::string rule = plan::auto_allreduce(b, plan::Shape{nodes, g, true, false});
        ASSERT_EQ(runtime_auto->chosen(b), rule) << nodes << "x" << g << " " << b << " B";
        const std::string model_rule = plan::auto_allreduce(b, plan::Shape{nodes, g, true, true});
        ASSERT_EQ(model_rule == std::string("shm") || model_rule == std::string("mpi"), nodes == 1 && g > 1)
            << nodes << "x" << g << " " << b << " B";
        ASSERT_EQ(netmodel::resolve_algo("auto", netmodel::Op::Allreduce, static_cast<double>(b), topo),
                  model_rule == std::string("mpi") ? plan::mpi_allreduce(b) : model_rule)
            << nodes << "x" << g << " " << b << " B";
        ASSERT_EQ(netmodel::resolve_algo("mpi", netmodel::Op::Allreduce, static_cast<double>(b), topo),
                  plan::mpi_allreduce(b));
      }
    }
  }
}

TEST(PlanParity, AutoRuleByHand) {
  const plan::Shape one{1, 8, true}, flat{4, 1, true}, multi{2, 4, true}, uneven{2, 4, false};
  EXPECT_STREQ(plan::auto_allreduce(64 << 10, multi), "rd");
  EXPECT_STREQ(plan::auto_allreduce((64 << 10) + 1, multi), "hier");
  EXPECT_STREQ(plan::auto_allreduce(1 << 30, multi), "hier");
  for (const auto& s : {one, flat, uneven}) {
    EXPECT_STREQ(plan::auto_allreduce((64 << 10) + 1, s), "rabenseifner");
    EXPECT_STREQ(plan::auto_allreduce(1 << 20, s), "rabenseifner");
    EXPECT_STREQ(plan::auto_allreduce((1 << 20) + 1, s), "ring");
  }
  EXPECT_STREQ(plan::mpi_allreduce(9999), "rd");
  EXPECT_STREQ(plan::mpi_allreduce(10000), "ring");
  // One node with a shared window: Open MPI's own up to 64 KiB, the shm algorithm above;
  // a single rank or several nodes never take it.
  const plan::Shape one_shm{1, 8, true, true};
  EXPECT_STREQ(plan::auto_allreduce(8, one_shm), "mpi");
  EXPECT_STREQ(plan::auto_allreduce(64 << 10, one_shm), "mpi");
  EXPECT_STREQ(plan::auto_allreduce((64 << 10) + 1, one_shm), "shm");
  EXPECT_STREQ(plan::auto_allreduce(1 << 30, one_shm), "shm");
  EXPECT_STREQ(plan::auto_allreduce(1 << 30, plan::Shape{1, 1, true, true}), "ring");
  EXPECT_STREQ(plan::auto_allreduce(1 << 30, plan::Shape{2, 4, true, true}), "hier");
  EXPECT_EQ(plan::resolve_allreduce("auto", 8, one_shm), "rd");       // Open MPI's choice at 8 B
  EXPECT_EQ(plan::resolve_allreduce("auto", 1 << 20, one_shm), "shm");
}

TEST(PlanParity, AutoOnUnevenNodesNeverPicksHier) {
  // hier falls back to the ring when nodes differ in size; auto then follows the flat rule.
  ShapeComm comm(3, 4, /*uneven=*/true);
  auto runtime_auto = make_allreduce("auto", comm, AlgoOptions{});
  for (std::uint64_t b : test_sizes())
    EXPECT_EQ(runtime_auto->chosen(b), plan::auto_allreduce(b, plan::Shape{3, 4, false})) << b;
}

// ---- compressors -------------------------------------------------------------------------------

// The pipelining rules both sides read: the chunk below a transport's eager limit, the
// default chunk per placement (runtime: algos::choose_chunk; model: tune's default), and
// the chunks kept in flight (runtime: the ring's slots; model: the chunk alphas they share).
TEST(PlanParity, ChunkEachAlgorithmRunsWith) {
  // The runtime's algorithms report the chunk they pipeline in (gradsync-train's
  // chunk_bytes_used); the model prices plan::chunk_used for the same name, shape and option.
  for (int nodes = 1; nodes <= 4; ++nodes) {
    for (int g = 1; g <= 4; ++g) {
      if (nodes * g < 2) continue;
      for (std::size_t given : {std::size_t{0}, std::size_t{64} << 10, std::size_t{1} << 20}) {
        for (const auto& name : plan::allreduce_names()) {
          ShapeComm comm(nodes, g);
          AlgoOptions o;
          o.chunk_bytes = given;
          const auto algo = make_allreduce(name, comm, o);
          EXPECT_EQ(algo->chunk().bytes, plan::chunk_used(name, nodes, given))
              << name << " on " << nodes << " x " << g << ", --chunk-bytes " << given;
        }
      }
    }
  }
  EXPECT_EQ(plan::chunk_used("ring", 2, 0), 32u << 10);
  EXPECT_EQ(plan::chunk_used("rd", 1, 0), 0u);
  EXPECT_EQ(plan::chunk_used("mpi", 2, 64 << 10), 0u);
  EXPECT_EQ(plan::chunk_used("nccl", 2, 0), 0u);  // a model-only name: what is given
  EXPECT_EQ(plan::chunk_used("dbtree", 2, 1 << 20), 1u << 20);
}

TEST(PlanParity, ChunkAndPipelineRules) {
  EXPECT_EQ(plan::chunk_below_eager_limit(64 << 10), 32u << 10);  // Open MPI's TCP default
  EXPECT_EQ(plan::chunk_below_eager_limit(1 << 20), 512u << 10);
  EXPECT_EQ(plan::chunk_below_eager_limit(4 << 10), 2u << 10);
  EXPECT_EQ(plan::chunk_below_eager_limit(0), 256u);  // never below the header reserve's room
  EXPECT_EQ(plan::default_chunk_bytes(1), 4u << 20);
  EXPECT_EQ(plan::default_chunk_bytes(2), 32u << 10);
  EXPECT_EQ(plan::default_chunk_bytes(64), 32u << 10);
  EXPECT_EQ(plan::pipeline_slots(4 << 20), plan::kPipelineSlots);
  EXPECT_EQ(plan::pipeline_slots(256 << 10), 4u);
  EXPECT_EQ(plan::pipeline_slots(32 << 10), 32u);  // 1 MiB of 32 KiB chunks
  EXPECT_EQ(plan::pipeline_slots(1024), plan::kMaxPipelineSlots);
  EXPECT_EQ(plan::pipeline_slots(0), plan::kMaxPipelineSlots);
  // The model's chunked ring pays the alphas the runtime's window leaves: with alpha only
  // (infinite bandwidth) a 2-rank ring step of k chunks costs (1 + (k-1)/W) alpha.
  netmodel::Fabric f;
  f.name = "alpha-only";
  f.intra.alpha_s = 1e-3;
  f.intra.bw_Bps = 1e30;
  f.inter = f.intra;
  netmodel::CollOptions o;
  o.chunk_bytes = 32 << 10;
  const double n = 2.0 * 64 * (32 << 10);  // 64 chunks per step on 2 ranks
  const double t = netmodel::collective_time(f, netmodel::Op::Allreduce, "ring", netmodel::Topology{2, 1}, n, o);
  EXPECT_NEAR(t, 2 * (1 + 63.0 / 32) * 1e-3, 1e-9);
}

TEST(PlanParity, CompressorNamesAndSpecs) {
  EXPECT_EQ(compressor_names(), plan::compressor_names());
  const std::vector<std::string> good = {"none", "fp16", "bf16", "onebit", "sign", "powersgd:rank=1",
                                         "powersgd:rank=4,start=2,min_rate=1.5,warm_start=0,error_feedback=0",
                                         "powersgd:rank=4,threads=2",
                                         "qsgd:levels=127,bucket=1", "qsgd:levels=1", "topk:ratio=1",
                                         "topk:ratio=0.001"};
  const std::vector<std::string> bad = {"zip", "fp16:x=1", "powersgd", "powersgd:rank=0", "powersgd:rank=1025",
                                        "powersgd:rank=2,start=-1", "powersgd:rank=2,warm_start=2",
                                        "powersgd:rank=2,min_rate=0", "powersgd:rank=2,threads=0", "qsgd",
                                        "qsgd:levels=128",
                                        "qsgd:levels=4,bucket=0", "topk", "topk:ratio=0", "topk:ratio=1.5",
                                        "onebit:levels=2", "none:"};
  for (const auto& s : good) {
    EXPECT_NO_THROW(plan::parse_compressor(s)) << s;
    EXPECT_NO_THROW(check_compressor_spec(s)) << s;
    EXPECT_NO_THROW(netmodel::Compressor{s}) << s;
  }
  for (const auto& s : bad) {
    EXPECT_THROW(plan::parse_compressor(s), UsageError) << s;
    EXPECT_THROW(check_compressor_spec(s), UsageError) << s;
    EXPECT_THROW(netmodel::Compressor{s}, UsageError) << s;
  }
  EXPECT_EQ(netmodel::Compressor("sign").name(), "onebit");
  EXPECT_EQ(make_compressor("sign", 0, 0)->spec(), "onebit");
}

TEST(PlanParity, PowerSgdRankRule) {
  // torch's _should_compress: (n + m) r min_rate < n m.
  EXPECT_EQ(plan::powersgd_rank(64, 64, 4, 2), 4);    // 128*4*2 = 1024 < 4096
  EXPECT_EQ(plan::powersgd_rank(4, 4, 4, 2), 0);      // r = 4: 64 >= 16
  EXPECT_EQ(plan::powersgd_rank(16, 16, 4, 2), 0);    // 256 >= 256: not strictly smaller
  EXPECT_EQ(plan::powersgd_rank(17, 16, 4, 2), 4);    // 264 < 272
  EXPECT_EQ(plan::powersgd_rank(1000, 3, 8, 1), 0);   // r = 3: 3009 >= 3000
  EXPECT_EQ(plan::powersgd_rank(0, 3, 8, 1), 0);
}

TEST(PlanParity, PrecisionSizes) {
  EXPECT_EQ(plan::precision_bytes("fp32"), 4);
  EXPECT_EQ(plan::precision_bytes("fp16"), 2);
  EXPECT_EQ(plan::precision_bytes("bf16"), 2);
  for (const char* p : {"fp32", "fp16", "bf16"}) EXPECT_EQ(netmodel::precision_bytes(p), plan::precision_bytes(p));
  EXPECT_THROW(plan::precision_bytes("fp8"), UsageError);
  EXPECT_THROW(netmodel::precision_bytes("fp8"), UsageError);
}

// ---- buckets -------------------------------------------------------------------------------------

// The runtime's layout: the real Reducer over the shape communicator (no traffic at build).
std::vector<std::int64_t> runtime_bucket_bytes(const models::ModelSpec& m, double bucket_mb, double first_mb) {
  ShapeComm comm(1, 1);
  auto algo = make_allreduce("ring", comm, AlgoOptions{});
  auto comp = make_compressor("none", 0, 0);
  train::ReducerOptions o;
  o.bucket_bytes = plan::bucket_limit_bytes(bucket_mb);
  o.first_bucket_bytes = plan::bucket_limit_bytes(first_mb);
  train::Reducer r(comm, *algo, *comp, m.tensors(), o);
  return r.bucket_bytes();
}

std::vector<std::int64_t> model_bucket_bytes(const std::string& model, double bucket_mb, double first_mb) {
  netmodel::Predictor pred;
  netmodel::PredictConfig c;
  c.model = model;
  std::vector<std::int64_t> out;
  for (const auto& b : netmodel::make_buckets(pred.workload(c).grads, bucket_mb, first_mb)) out.push_back(b.grad_bytes);
  return out;
}

// The shared rule's bytes per bucket (what both sides call), for the limits the real
// Reducer is not built at (it allocates the whole model's gradients each time).
std::vector<std::int64_t> plan_bucket_bytes(const models::ModelSpec& m, double bucket_mb, double first_mb) {
  std::vector<std::int64_t> bytes;
  for (const auto& t : m.tensors()) bytes.push_back(t.numel() * 4);
  std::vector<std::int64_t> out;
  for (const auto& b : plan::assign_buckets(bytes, plan::bucket_limit_bytes(bucket_mb), plan::bucket_limit_bytes(first_mb))) {
    std::int64_t s = 0;
    for (std::size_t i : b) s += bytes[i];
    out.push_back(s);
  }
  return out;
}

TEST(PlanParity, BucketsOfEveryZooModel) {
  for (const auto& name : models::zoo_names()) {
    const auto m = models::zoo_model(name);
    // The runtime's real Reducer at the defaults, the model at every limit pair.
    const auto rt = runtime_bucket_bytes(m, 25, 1);
    EXPECT_EQ(rt, model_bucket_bytes(name, 25, 1)) << name;
    EXPECT_EQ(std::accumulate(rt.begin(), rt.end(), std::int64_t{0}), m.grad_bytes()) << name;
    for (const auto& [cap, first] : std::vector<std::pair<double, double>>{{1, 1}, {100, 5}, {4, 0.5}, {0.01, 0.01}}) {
      const auto want = plan_bucket_bytes(m, cap, first);
      EXPECT_EQ(model_bucket_bytes(name, cap, first), want) << name << " " << cap << "/" << first << " MiB";
      EXPECT_EQ(std::accumulate(want.begin(), want.end(), std::int64_t{0}), m.grad_bytes()) << name;
    }
  }
}

// PyTorch DDP's layout after its first-iteration rebuild: _compute_bucket_assignment_by_size
// over the parameters in gradient-ready order with limits [1 MiB, 25 MiB] (same walk, same
// `>=` test, no re-sort when tensor indices are given). Bytes per bucket, in launch order.
// Checked 2026-12-01 against torch.distributed._compute_bucket_assignment_by_size itself
// (meta tensors of the shapes gradsync-train records under /model, in reverse order,
// limits [1 MiB, 25 MiB]): the same four layouts.
TEST(PlanParity, DdpLayoutsAt25And1MiB) {
  const std::vector<std::pair<std::string, std::vector<std::int64_t>>> pinned = {
      {"resnet50", {8196000, 31502336, 26255360, 26550272, 9724160}},
      // pooler (3,072 + 2,359,296 B) crosses 1 MiB; then one encoder layer (28,351,488 B)
      // per bucket; the embeddings last.
      {"bert-base",
       {2362368, 28351488, 28351488, 28351488, 28351488, 28351488, 28351488, 28351488, 28351488, 28351488,
        28351488, 28351488, 28351488, 95348736}},
      // classifier.6 (16,384,000 + 4,000 B) first; classifier.3 (67 MB) alone, classifier.0 (411 MB) alone.
      {"vgg16", {16388000, 67125248, 411058176, 28317696, 28319744, 2221312}},
      {"gpt2",
       {9446400, 28351488, 28351488, 28351488, 28351488, 28351488, 28351488, 28351488, 28351488, 28351488,
        28351488, 28351488, 176446464}},
  };
  for (const auto& [name, want] : pinned) {
    EXPECT_EQ(plan_bucket_bytes(models::zoo_model(name), 25, 1), want) << name;
    EXPECT_EQ(model_bucket_bytes(name, 25, 1), want) << name;
  }
}

}  // namespace
}  // namespace gradsync
