// gradsync/tests/netmodel/test_compress_payload.cpp — the cost model's compressor byte
// counts (netmodel/compress.hpp) against what the runtime's compressors report.
//
// Each runtime compressor (runtime/compress/) runs its real reduce() on one bucket over a
// "mirror" communicator: p ranks that all hold the same data, seen from rank 0 (all-gather
// and all-to-all copy this rank's block to every slot, the all-reduce sums p copies). No MPI
// is involved; the protocol, the message layout and the CompressStats it fills are the
// runtime's own. The model's BucketPlan must give the same payload bytes (compressed_bytes)
// and wire bytes (wire_bytes) for every shape, rank count and spec.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "algos/allreduce.hpp"
#include "comm/communicator.hpp"
#include "compress/compressor.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "netmodel/compress.hpp"

namespace gradsync {
namespace {

// p ranks with identical data, seen from rank 0.
class MirrorComm final : public Communicator {
 public:
  explicit MirrorComm(int p) : p_(p) {}
  int rank() const override { return 0; }
  int size() const override { return p_; }
  int local_rank() const override { return 0; }
  int local_size() const override { return p_; }
  int node_id() const override { return 0; }
  int node_count() const override { return 1; }
  std::string backend() const override { return "mirror"; }
  std::string hostname() const override { return "localhost"; }
  Request isend(const void*, std::size_t, int, int) override { throw Error("mirror: no point-to-point"); }
  Request irecv(void*, std::size_t, int, int) override { throw Error("mirror: no point-to-point"); }
  void allreduce(const void* s, void* r, std::size_t count, DType t, RedOp op) override {
    if (t != DType::F32) {  // casts: only the byte counts matter here
      std::memmove(r, s, count * dtype_size(t));
      return;
    }
    const float* in = static_cast<const float*>(s);
    float* out = static_cast<float*>(r);
    const float f = op == RedOp::Sum ? static_cast<float>(p_) : 1.f;
    for (std::size_t i = 0; i < count; ++i) out[i] = in[i] * f;
  }
  void reduce_scatter(const void*, void*, std::size_t, DType, RedOp) override { throw Error("mirror: unused"); }
  void allgather(const void* s, void* r, std::size_t count, DType t) override {
    const std::size_t b = count * dtype_size(t);
    for (int i = 0; i < p_; ++i) std::memmove(static_cast<char*>(r) + i * b, s, b);
  }
  void alltoall(const void* s, void* r, std::size_t count, DType t) override {
    // Every rank sends what rank 0 sends; block i of recv is block 0 (this rank's) of rank i's send.
    const std::size_t b = count * dtype_size(t);
    std::vector<char> mine(static_cast<const char*>(s), static_cast<const char*>(s) + b * p_);
    for (int i = 0; i < p_; ++i) std::memcpy(static_cast<char*>(r) + i * b, mine.data(), b);
  }
  void broadcast(void*, std::size_t, DType, int) override {}
  void barrier() override {}
  double max_double(double v) override { return v; }
  double sum_double(double v) override { return v * p_; }
  std::int64_t min_int64(std::int64_t v) override { return v; }
  std::int64_t max_int64(std::int64_t v) override { return v; }
  std::vector<std::string> allgather_strings(const std::string& s) override {
    return std::vector<std::string>(static_cast<std::size_t>(p_), s);
  }
  void broadcast_bytes(std::vector<char>&, int) override {}
  std::unique_ptr<Communicator> split(int, int) override { return std::make_unique<MirrorComm>(p_); }

 private:
  int p_;
};

// A ring-like all-reduce over the mirror (the model assumes 2(p-1)/p wire bytes).
class MirrorRing final : public AllreduceAlgorithm {
 public:
  explicit MirrorRing(Communicator& c) : c_(c) {}
  std::string name() const override { return "ring"; }
  void run(const void* s, void* r, std::size_t count, DType t, RedOp op) override { c_.allreduce(s, r, count, t, op); }

 private:
  Communicator& c_;
};

struct Shape {
  std::vector<std::int64_t> dims;
  std::int64_t numel() const {
    return std::accumulate(dims.begin(), dims.end(), std::int64_t{1}, std::multiplies<>());
  }
};

// Runs the runtime compressor on a bucket of these tensors at step `step`.
CompressStats runtime_stats(const std::string& spec, const std::vector<Shape>& shapes, int p, std::int64_t step) {
  MirrorComm comm(p);
  MirrorRing ring(comm);
  auto c = make_compressor(spec, 7, 0);
  BucketView b;
  b.index = 0;
  std::size_t off = 0;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    TensorView t;
    t.name = std::string("t").append(std::to_string(i));
    t.shape = shapes[i].dims;
    t.offset = off;
    t.count = static_cast<std::size_t>(shapes[i].numel());
    off += t.count;
    b.tensors.push_back(t);
  }
  std::vector<float> data(off);
  for (std::size_t i = 0; i < off; ++i) data[i] = 1e-3f * static_cast<float>((i * 7919) % 1000) - 0.5e-3f;
  b.data = data.data();
  b.count = off;
  CompressStats st;
  c->reduce(comm, ring, b, step, st);
  return st;
}

netmodel::BucketPlan model_plan(const std::string& spec, const std::vector<Shape>& shapes, int p) {
  std::vector<netmodel::GradShape> g;
  for (const auto& s : shapes) {
    netmodel::GradShape x;
    x.numel = s.numel();
    x.rows = s.dims.empty() ? 1 : s.dims[0];
    x.ndim = static_cast<int>(s.dims.size());
    g.push_back(x);
  }
  return netmodel::Compressor(spec).plan(g, 4, p, netmodel::DeviceRates{});
}

const std::vector<std::vector<Shape>>& buckets() {
  static const std::vector<std::vector<Shape>> b = {
      {{{1000}}},                                        // one bias
      {{{64, 3, 3, 3}}, {{64}}},                         // a first conv layer + bias
      {{{512, 256, 3, 3}}, {{512}}, {{256, 128}}},       // a big conv, bias, fc
      {{{10, 512}}, {{10}}, {{3}}, {{7, 1}}},            // rank capped by rows (n = 10 > r?), odd sizes
      {{{1001}}, {{33, 17}}},                            // not multiples of 32 / 8 / 4
      {{{2, 3}}},                                        // tiny: nothing compressible
  };
  return b;
}

void check(const std::string& spec, int p, std::int64_t step = 100) {
  for (std::size_t i = 0; i < buckets().size(); ++i) {
    const auto& shapes = buckets()[i];
    const CompressStats st = runtime_stats(spec, shapes, p, step);
    const netmodel::BucketPlan plan = model_plan(spec, shapes, p);
    EXPECT_DOUBLE_EQ(plan.payload_bytes, static_cast<double>(st.compressed_bytes))
        << spec << " p=" << p << " bucket " << i;
    EXPECT_DOUBLE_EQ(plan.wire_bytes, static_cast<double>(st.wire_bytes)) << spec << " p=" << p << " bucket " << i;
  }
}

TEST(CompressPayload, MatchesRuntime) {
  for (int p : {2, 3, 4, 8}) {
    check("none", p);
    check("fp16", p);
    check("bf16", p);
    check("powersgd:rank=4", p);
    check("powersgd:rank=1,min_rate=1", p);
    check("powersgd:rank=16", p);
    check("qsgd:levels=16", p);
    check("qsgd:levels=127,bucket=100", p);
    check("onebit", p);
    check("sign", p);
    check("topk:ratio=0.01", p);
    check("topk:ratio=0.3", p);
  }
}

TEST(CompressPayload, SpecsTheRuntimeRefusesAreRefused) {
  for (const char* bad : {"qsgd", "qsgd:levels=128", "powersgd", "topk", "zip"}) {
    EXPECT_THROW(make_compressor(bad, 0, 0), UsageError) << bad;
    EXPECT_THROW(netmodel::Compressor{bad}, UsageError) << bad;
  }
}

}  // namespace
}  // namespace gradsync
