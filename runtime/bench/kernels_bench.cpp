// gradsync-kernels-bench — encode and decode throughput of every compressor on one rank,
// with a memcpy baseline in the same binary (Google Benchmark).
//
// Each case runs the 1-rank path of a compressor (runtime/compress/): the same functions
// reduce() calls between its collectives, without a communicator. bytes_per_second is the
// *fp32 input* bytes (n * 4) per second for every case, so all figures compare with memcpy
// of the same buffer. Sizes: 1, 16 and 64 MiB of fp32. What is timed:
//   memcpy            memcpy of the fp32 buffer (n * 4 bytes read, n * 4 written)
//   stream_add        y += x (add_inplace): read 2 arrays, write 1, the streams of
//                     onebit_encode
//   fp16/bf16_encode  x * (1/8) -> half              fp16/bf16_decode  half -> fp32
//   qsgd_encode       block norms + quantisation     qsgd_decode       one message -> fp32
//                     (levels=16, bucket=512)
//   onebit_encode     x = g + error; signs + scale;  onebit_decode     signs * scale -> fp32
//                     error = x - decoded (kept deferred: the memory holds x, g is only read)
//   topk_encode       x += error; top-k (1%);        topk_decode       zero + scatter-add of
//                     error = x - sparse(x)                            the k values
//   powersgd_encode   x += error; P = MQ; Gram-Schmidt; Q = M^T P  (rank 4, one square matrix)
//   powersgd_decode   M = P Q^T; error = input - M
//   powersgd_resnet50_{encode,decode}: the same over all ResNet-50 gradient tensors
//                     (models/zoo.hpp) as one bucket, rank 4, threads=1 (what calibrate
//                     --kernels fits);
//   powersgd_resnet50_encode+decode/threads:{1,2}: the whole step at threads=T (what
//                     scripts/powersgd-vs-torch.py compares with PyTorch's hook).
//   The encode cases put a fresh gradient into the bucket before each call, untimed
//   (the hook's timed call also gets a fresh clone made outside its timer).
// Before timing, every case checks its round trip once against the compressor's error
// bound and reports SkipWithError if it is wrong (a benchmark that cannot say it was right
// is not a benchmark).
//
// Example: gradsync-kernels-bench --benchmark_filter='fp16|memcpy' --benchmark_min_time=0.2
//
// Encoders against memcpy, 2026-12-02, the 2-core development VM (Intel AVX-512; its
// memory bandwidth was lower that day: memcpy 64 MiB 6.87 GB/s on 2026-12-01), medians of 3
// (GB/s, ratio to memcpy of the same run), in one quiet window (/work/quiet.sh,
// disturbed_seconds=0), with
// gradsync-kernels-bench --benchmark_filter='(memcpy|qsgd_encode|onebit_encode|topk_encode)/MiB:(16|64)'
//   --benchmark_min_time=1 --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
//                   16 MiB          64 MiB
//   memcpy          11.08           4.62
//   qsgd_encode      7.40 (0.67x)   3.98 (0.86x)   kernels/cpu_qsgd.cpp
//   onebit_encode   10.96 (0.99x)   4.09 (0.89x)   kernels/cpu_sign.cpp (one pass, deferred memory;
//                                                  0.44x / 0.41x with the two-pass encoder)
//   topk_encode      4.17 (0.38x)   2.67 (0.58x)   kernels/cpu_topk.cpp
//   stream_add      11.13 (0.98x)   4.96 (1.07x)   onebit_encode's streams, its floor (same window,
//                     --benchmark_filter='(memcpy|stream_add|onebit_encode)/MiB:(16|64)')
//
// PowerSGD on ResNet-50 (rank 4), 2026-12-02, same VM (shared; disturbed_seconds 15), with
// gradsync-kernels-bench --benchmark_filter=powersgd_resnet50 --benchmark_min_time=1:
//   encode 39.3 ms, decode 32.2 ms, encode+decode 71.8 ms at threads=1, 40.1 ms at threads=2
//   (before the fused kernels, encode+decode with the reset copy timed: 188.4 ms;
//   scripts/powersgd-vs-torch.py compares these with PyTorch's hook).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/model_bucket.hpp"
#include "compress/cast.hpp"
#include "compress/onebit.hpp"
#include "compress/powersgd.hpp"
#include "compress/qsgd.hpp"
#include "compress/topk.hpp"
#include "kernels/cpu_kernels.hpp"

namespace gk = gradsync::kernels;
using namespace gradsync::compress_detail;
using gradsync::BucketView;
using gradsync::DType;

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// Gradient-like input (approximately normal, a sum of 4 uniforms), cached per size.
const std::vector<float>& input(std::size_t n) {
  static std::map<std::size_t, std::vector<float>> cache;
  auto [it, fresh] = cache.try_emplace(n);
  if (fresh) {
    it->second.resize(n);
    const gk::RngKey key = gk::rng_key(1, 2, 3, 4);
    for (std::size_t i = 0; i < n; ++i) {
      float s = 0;
      for (std::uint64_t j = 0; j < 4; ++j) s += gk::bits_to_unit(gk::rng_bits(key, 4 * i + j));
      it->second[i] = (s - 2.f) * 1.7320508f * 1e-3f;
    }
  }
  return it->second;
}

void set_bytes(benchmark::State& state, std::size_t n) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(n * 4));
  state.counters["MiB"] = static_cast<double>(n * 4) / static_cast<double>(kMiB);
}

std::size_t elems(const benchmark::State& state) { return static_cast<std::size_t>(state.range(0)) * kMiB / 4; }

// ---- memcpy ---------------------------------------------------------------------------------

void bm_memcpy(benchmark::State& state) {
  const std::size_t n = elems(state);
  const auto& x = input(n);
  std::vector<float> y(n);
  for (auto _ : state) {
    std::memcpy(y.data(), x.data(), n * 4);
    benchmark::ClobberMemory();
  }
  set_bytes(state, n);
}

// The streams of the one-pass error-feedback encoders (read two arrays, write one of them
// back): y += x. The floor of onebit_encode, which reads the gradient and the memory and
// writes the memory.
void bm_stream_add(benchmark::State& state) {
  const std::size_t n = elems(state);
  const auto& x = input(n);
  std::vector<float> y(n, 0.f);
  gk::add_inplace(y.data(), x.data(), n);
  if (std::memcmp(y.data(), x.data(), n * 4) != 0) return state.SkipWithError("stream_add wrong");
  for (auto _ : state) {
    gk::add_inplace(y.data(), x.data(), n);
    benchmark::ClobberMemory();
  }
  set_bytes(state, n);
}

// ---- casts -------------------------------------------------------------------------------------

void bm_cast(benchmark::State& state, DType t, bool encode) {
  const std::size_t n = elems(state);
  const auto& x = input(n);
  CastCompressor c(t);
  std::vector<std::uint16_t> h(n);
  std::vector<float> y(n);
  c.encode(x.data(), n, 0.125f, h.data());
  c.decode(h.data(), n, y.data());
  const float rel = t == DType::F16 ? 0x1p-11f : 0x1p-8f;
  for (std::size_t i = 0; i < n; ++i)
    if (std::fabs(y[i] - 0.125f * x[i]) > rel * std::fabs(0.125f * x[i]) + 1e-7f)
      return state.SkipWithError("cast round trip out of bounds");
  for (auto _ : state) {
    if (encode)
      c.encode(x.data(), n, 0.125f, h.data());
    else
      c.decode(h.data(), n, y.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, n);
}

// ---- QSGD ----------------------------------------------------------------------------------------

void bm_qsgd(benchmark::State& state, bool encode) {
  const std::size_t n = elems(state);
  const auto& x = input(n);
  QsgdCompressor q(16, 512, 7, 0);
  std::vector<std::uint8_t> msg(q.message_bytes(n));
  std::vector<float> y(n);
  q.encode(x.data(), n, q.key(0, 0), msg.data());
  q.decode(msg.data(), n, y.data(), false);
  const float* norms = reinterpret_cast<const float*>(msg.data() + (msg.size() - gk::qsgd_num_blocks(n, 512) * 4));
  for (std::size_t i = 0; i < n; ++i)
    if (!(std::fabs(y[i] - x[i]) <= norms[i / 512] / 16 * 1.0001f))
      return state.SkipWithError("qsgd error above one level");
  std::int64_t step = 0;
  for (auto _ : state) {
    if (encode)
      q.encode(x.data(), n, q.key(step++, 0), msg.data());
    else
      q.decode(msg.data(), n, y.data(), false);
    benchmark::ClobberMemory();
  }
  set_bytes(state, n);
}

// ---- onebit ---------------------------------------------------------------------------------------

void bm_onebit(benchmark::State& state, bool encode) {
  const std::size_t n = elems(state);
  const auto& g = input(n);
  const OnebitCompressor::Layout lay(n, 1);
  std::vector<float> last(n, 0.f), y(n);  // the deferred worker memory: last x = g + e
  std::vector<std::uint8_t> signs(lay.chunk_bytes());
  float scale = 0;
  const auto hk = gradsync::make_host_bucket_kernels();  // the compressor's host path
  OnebitCompressor::worker_compress(*hk, g.data(), lay, last.data(), signs.data(), &scale);  // x = g + e; ...
  OnebitCompressor::decode_chunk(*hk, signs.data(), &scale, lay, 0, y.data());
  for (std::size_t i = 0; i < n; ++i)
    if (std::fabs(y[i]) != scale || (last[i] >= 0) != (y[i] > 0)) return state.SkipWithError("onebit decode wrong");
  for (auto _ : state) {
    if (encode) {
      OnebitCompressor::worker_compress(*hk, g.data(), lay, last.data(), signs.data(), &scale);  // x = g + e; ...
    } else {
      OnebitCompressor::decode_chunk(*hk, signs.data(), &scale, lay, 0, y.data());
    }
    benchmark::ClobberMemory();
  }
  set_bytes(state, n);
}

// ---- top-k -------------------------------------------------------------------------------------------

void bm_topk(benchmark::State& state, bool encode) {
  const std::size_t n = elems(state);
  const auto& x0 = input(n);
  std::vector<float> x = x0, memory(n, 0.f), y(n);
  const std::size_t k = TopkCompressor::k_for(0.01, n);
  std::vector<std::int32_t> idx(k);
  std::vector<float> vals(k);
  TopkCompressor::encode(x.data(), n, k, memory.data(), idx.data(), vals.data());
  float kth = INFINITY;
  for (float v : vals) kth = std::min(kth, std::fabs(v));
  std::size_t above = 0;
  for (float v : x0) above += std::fabs(v) > kth;
  if (above >= k) return state.SkipWithError("topk missed a larger element");
  for (auto _ : state) {
    if (encode) {
      state.PauseTiming();
      std::memcpy(x.data(), x0.data(), n * 4);  // a fresh gradient each step
      state.ResumeTiming();
      TopkCompressor::encode(x.data(), n, k, memory.data(), idx.data(), vals.data());
    } else {
      std::fill(y.begin(), y.end(), 0.f);
      TopkCompressor::decode(idx.data(), vals.data(), k, 1.f, y.data());
    }
    benchmark::ClobberMemory();
  }
  set_bytes(state, n);
}

// ---- PowerSGD -------------------------------------------------------------------------------------------

// One bucket over a contiguous buffer.
struct PowerSgdCase {
  std::vector<float> data, fresh;
  BucketView bucket;
  std::unique_ptr<PowerSgdCompressor> c;

  // `tensors` packed from offset 0 (bench/model_bucket.hpp).
  void init(std::vector<gradsync::TensorView> tensors, int rank, int threads = 1) {
    const std::size_t count = gradsync::bench::bucket_elements(tensors);
    fresh = input(count);
    data = fresh;
    bucket.index = 0;
    bucket.count = count;
    bucket.tensors = std::move(tensors);
    bucket.data = data.data();
    PowerSgdOptions o;
    o.rank = rank;
    o.start = 0;
    o.threads = threads;
    c = std::make_unique<PowerSgdCompressor>(o, 1);
  }
  // A fresh gradient in the bucket (error feedback and decode overwrite it); not timed, as
  // powersgd-vs-torch.py's hook call gets a fresh clone outside its timer.
  void reset() { std::memcpy(data.data(), fresh.data(), data.size() * 4); }
  void reset(benchmark::State& state) {
    state.PauseTiming();
    reset();
    state.ResumeTiming();
  }
  void encode() {
    c->compute_p(bucket, 1);
    c->compute_q(bucket);
  }
  void decode() { c->decompress(bucket, 1); }
  bool sane() {
    reset();
    encode();
    decode();
    for (float v : data)
      if (!std::isfinite(v)) return false;
    return true;
  }
};

void bm_powersgd_square(benchmark::State& state, bool encode) {
  const std::size_t n = elems(state);
  const auto side = static_cast<std::int64_t>(std::llround(std::sqrt(static_cast<double>(n))));
  PowerSgdCase pc;
  pc.init({{"w", {side, side}, 0, static_cast<std::size_t>(side * side)}}, 4);
  if (!pc.sane()) return state.SkipWithError("powersgd produced non-finite values");
  for (auto _ : state) {
    if (encode) {
      pc.reset(state);
      pc.encode();
    } else {
      pc.decode();
    }
    benchmark::ClobberMemory();
  }
  set_bytes(state, pc.data.size());
  state.counters["matrix"] = static_cast<double>(side);
}

// which: 0 encode, 1 decode, 2 both (its argument is the spec's threads=T; the others run one thread).
void bm_powersgd_resnet50(benchmark::State& state, int which) {
  const int threads = which == 2 ? static_cast<int>(state.range(0)) : 1;
  PowerSgdCase pc;
  pc.init(gradsync::bench::model_bucket_tensors("resnet50"), 4, threads);  // backward's order
  if (!pc.sane()) return state.SkipWithError("powersgd produced non-finite values");
  const auto& plan = pc.c->plan(0);
  for (auto _ : state) {
    if (which != 1) {
      pc.reset(state);
      pc.encode();
    }
    if (which != 0) pc.decode();
    benchmark::ClobberMemory();
  }
  set_bytes(state, pc.data.size());
  state.counters["matrices"] = static_cast<double>(plan.matrices.size());
  state.counters["threads"] = threads;
  state.counters["ratio"] =
      static_cast<double>(pc.data.size()) / static_cast<double>(plan.p_size + plan.q_size + plan.plain_size);
}

void sizes(benchmark::internal::Benchmark* b) {
  for (int mib : {1, 16, 64}) b->Arg(mib);
  b->ArgName("MiB")->Unit(benchmark::kMillisecond)->UseRealTime();
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::AddCustomContext("gradsync_isa", gk::isa_name(gk::cpu_isa()));
  benchmark::AddCustomContext("gradsync_cpu_features", gk::cpu_features());
  benchmark::AddCustomContext("bytes_per_second", "fp32 input bytes (n * 4) per second");

  sizes(benchmark::RegisterBenchmark("memcpy", bm_memcpy));
  sizes(benchmark::RegisterBenchmark("stream_add", bm_stream_add));
  for (const auto& [name, t] : {std::pair{"fp16", DType::F16}, std::pair{"bf16", DType::BF16}}) {
    const DType type = t;
    sizes(benchmark::RegisterBenchmark((std::string(name) + "_encode").c_str(),
                                       [type](benchmark::State& s) { bm_cast(s, type, true); }));
    sizes(benchmark::RegisterBenchmark((std::string(name) + "_decode").c_str(),
                                       [type](benchmark::State& s) { bm_cast(s, type, false); }));
  }
  for (bool enc : {true, false}) {
    const std::string suffix = enc ? "_encode" : "_decode";
    sizes(benchmark::RegisterBenchmark(("qsgd" + suffix).c_str(), [enc](benchmark::State& s) { bm_qsgd(s, enc); }));
    sizes(benchmark::RegisterBenchmark(("onebit" + suffix).c_str(), [enc](benchmark::State& s) { bm_onebit(s, enc); }));
    sizes(benchmark::RegisterBenchmark(("topk" + suffix).c_str(), [enc](benchmark::State& s) { bm_topk(s, enc); }));
    sizes(benchmark::RegisterBenchmark(("powersgd" + suffix).c_str(),
                                       [enc](benchmark::State& s) { bm_powersgd_square(s, enc); }));
  }
  const char* rn[] = {"powersgd_resnet50_encode", "powersgd_resnet50_decode", "powersgd_resnet50_encode+decode"};
  // encode and decode alone at one thread (the names calibrate --kernels reads); the step
  // at threads=1 and 2 (powersgd_resnet50_encode+decode/threads:T).
  for (int w = 0; w < 3; ++w) {
    auto* b = benchmark::RegisterBenchmark(rn[w], [w](benchmark::State& s) { bm_powersgd_resnet50(s, w); })
                  ->Unit(benchmark::kMillisecond)
                  ->UseRealTime();
    if (w == 2) b->Arg(1)->Arg(2)->ArgName("threads");
  }

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
