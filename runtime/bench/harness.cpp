#include "bench/harness.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>

#include "bench/busy.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"
#include "core/units.hpp"

namespace gradsync::bench {

// ---- buffers ---------------------------------------------------------------------------------

namespace {
// Whole cache lines, at least one.
std::size_t padded(std::size_t bytes) { return std::max<std::size_t>(64, (bytes + 63) / 64 * 64); }
}  // namespace

Buffer::Buffer(std::size_t bytes) : bytes_(bytes) {
  const std::size_t alloc = padded(bytes);
  void* p = ::operator new[](alloc, std::align_val_t{64}, std::nothrow);
  if (!p)
    throw Error(where() + ": cannot allocate a benchmark buffer of " + format_bytes(static_cast<double>(bytes)) +
                " (lower -e)");
  ptr_.reset(static_cast<std::byte*>(p));
}

Buffer::Buffer(Communicator& comm, std::size_t bytes) : bytes_(bytes) {
  shared_ = SharedBuffer::allocate(comm, padded(bytes));
  GS_CHECK(shared_ != nullptr, "--buffers shared: the ranks do not share one node's memory");
}

void Buffer::Free::operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{64}); }

void evict_caches(Buffer& flush, int iteration) {
  auto* p = static_cast<volatile unsigned char*>(flush.data());
  const auto v = static_cast<unsigned char>(iteration);
  for (std::size_t i = 0; i < flush.bytes(); i += 64) p[i] = v;
}

namespace {

constexpr float kSentinel = -1.0f;  // never an input or a result: every value is >= 0

// buf[i] = value(i) for i < n, rounded to `t`.
template <typename F>
void fill(void* buf, std::size_t n, DType t, F&& value) {
  switch (t) {
    case DType::F32: {
      auto* p = static_cast<float*>(buf);
      for (std::size_t i = 0; i < n; ++i) p[i] = value(i);
      break;
    }
    case DType::F16: {
      auto* p = static_cast<std::uint16_t*>(buf);
      for (std::size_t i = 0; i < n; ++i) p[i] = f32_to_f16(value(i));
      break;
    }
    case DType::BF16: {
      auto* p = static_cast<std::uint16_t*>(buf);
      for (std::size_t i = 0; i < n; ++i) p[i] = f32_to_bf16(value(i));
      break;
    }
  }
}

// Elements of buf that differ from want(i): exactly, or by more than rel * |want| when
// rel > 0. NaN is always wrong.
template <typename F>
std::int64_t count_wrong(const void* buf, std::size_t n, DType t, F&& want, double rel) {
  std::int64_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const float got = load_as_f32(buf, i, t), w = want(i);
    if (got == w) continue;
    if (rel > 0 && std::fabs(static_cast<double>(got) - w) <= rel * std::fabs(static_cast<double>(w))) continue;
    if (wrong == 0) {
      GS_LOG(WARN) << "first wrong element at index " << i << ": got " << got << ", expected " << w;
    }
    ++wrong;
  }
  return wrong;
}

// Relative tolerance for results that involve rounding (avg): two units in the last place.
// NCCL's ncclAvg multiplies every input by 1/n before summing (n + 1 roundings instead of
// one), so nccl gets n + 1 units.
double tolerance(const Collective& coll, const BenchOptions& o, int nranks) {
  if (!coll.has_redop() || o.redop != RedOp::Avg) return 0;
  const int mantissa = o.dtype == DType::F32 ? 23 : o.dtype == DType::F16 ? 10 : 7;
  const double ulps = o.algo == "nccl" ? std::max(2.0, nranks + 1.0) : 2.0;
  return ulps * std::ldexp(1.0, -mantissa);
}

class Harness {
 public:
  Harness(const BenchOptions& o, Communicator& comm, Collective& coll, DeviceContext* device)
      : o_(o), comm_(comm), coll_(coll), dev_(device), esz_(dtype_size(o.dtype)),
        rel_tol_(tolerance(coll, o, comm.size())) {
    // One set of buffers for the largest size, as nccl-tests: no allocation in the sweep.
    std::size_t send = 0, recv = 0;
    for (std::int64_t bytes : size_sweep(o)) {
      const Layout l = coll.layout(static_cast<std::size_t>(bytes) / esz_);
      send = std::max(send, l.send_count);
      recv = std::max(recv, l.recv_count);
    }
    // Shared: main() chose it only for host buffers on one node.
    const bool shared = o.buffers == "shared";
    auto buffer = [&](std::size_t bytes) { return shared ? Buffer(comm, bytes) : Buffer(bytes); };
    send_ = buffer(send * esz_);
    recv_ = buffer(recv * esz_);
    inplace_ = buffer(std::max(send, recv) * esz_);
    if (dev_) {
      dsend_ = dev_->alloc(send * esz_);
      drecv_ = dev_->alloc(recv * esz_);
      dinplace_ = dev_->alloc(std::max(send, recv) * esz_);
    } else {
      dsend_ = send_.data();
      drecv_ = recv_.data();
      dinplace_ = inplace_.data();
    }
    coll.reserve(send, recv);
    if (o.off_cache_bytes > 0) flush_ = Buffer(static_cast<std::size_t>(o.off_cache_bytes));
  }

  SizeResult run_size(std::int64_t bytes) {
    const Layout l = coll_.layout(static_cast<std::size_t>(bytes) / esz_);
    SizeResult r;
    r.size_bytes = static_cast<std::int64_t>(l.bytes(esz_));
    r.count = static_cast<std::int64_t>(l.param_count);
    r.algo_used = coll_.algo_used(l.bytes(esz_));
    GS_LOG(INFO) << "bench: size " << r.size_bytes << " B, count " << r.count << ", algo " << r.algo_used;

    auto input = [&](std::size_t i) { return coll_.input(i); };
    auto expected = [&](std::size_t i) { return coll_.expected(i, l); };
    auto sentinel = [](std::size_t) { return kSentinel; };

    // Out of place.
    if (coll_.has_input()) fill(send_.data(), l.send_count, o_.dtype, input);
    else fill(send_.data(), l.send_count, o_.dtype, sentinel);
    fill(recv_.data(), l.recv_count, o_.dtype, sentinel);
    to_run(dsend_, send_.data(), l.send_count);
    to_run(drecv_, recv_.data(), l.recv_count);
    r.oop = time_calls(l, r.size_bytes, false);
    from_run(recv_.data(), drecv_, l.recv_count);
    from_run(send_.data(), dsend_, l.send_count);
    if (o_.check) {
      std::int64_t wrong = count_wrong(recv_.data(), l.recv_count, o_.dtype, expected, rel_tol_);
      if (coll_.has_input()) wrong += count_wrong(send_.data(), l.send_count, o_.dtype, input, 0);
      r.oop.nwrong = sum_over_ranks(wrong);
    }

    // In place: the input is copied in before every call (time_calls).
    const std::size_t ip_count = std::max(l.send_count, l.recv_count);
    fill(inplace_.data(), ip_count, o_.dtype, sentinel);
    to_run(dinplace_, inplace_.data(), ip_count);
    r.ip = time_calls(l, r.size_bytes, true);
    from_run(inplace_.data(), dinplace_, ip_count);
    if (o_.check) {
      const char* result = static_cast<const char*>(inplace_.data()) + l.ip_recv_offset * esz_;
      r.ip.nwrong = sum_over_ranks(count_wrong(result, l.recv_count, o_.dtype, expected, rel_tol_));
    }
    return r;
  }

 private:
  PhaseResult time_calls(const Layout& l, std::int64_t size_bytes, bool in_place) {
    PhaseResult p;
    p.time_us.resize(static_cast<std::size_t>(o_.iters));
    char* ip = static_cast<char*>(dinplace_);
    for (int it = 0; it < o_.warmup + o_.iters; ++it) {
      if (in_place && coll_.has_input() && l.send_count > 0) {
        if (dev_) dev_->copy(ip + l.ip_send_offset * esz_, dsend_, l.send_count * esz_);
        else std::memcpy(ip + l.ip_send_offset * esz_, send_.data(), l.send_count * esz_);
      }
      if (o_.off_cache_bytes > 0) evict_caches(flush_, it);
      comm_.barrier();
      // A device call returns once its GPU work has completed (NCCL: waited for with an
      // event; staging: synchronous copies), so the host clock covers all of it.
      const double t0 = now_s();
      if (in_place) coll_.run_in_place(ip, l);
      else coll_.run(dsend_, drecv_, l);
      const double dt = now_s() - t0;
      if (it >= o_.warmup) p.time_us[static_cast<std::size_t>(it - o_.warmup)] = dt * 1e6;
    }
    // The iteration took as long as its slowest rank.
    double sum = 0;
    for (double& t : p.time_us) {
      t = comm_.max_double(t);
      sum += t;
    }
    p.time_us_avg = sum / o_.iters;
    p.algbw_GBps = gbps(static_cast<double>(size_bytes), p.time_us_avg);
    p.busbw_GBps = p.algbw_GBps * coll_.bus_factor();
    return p;
  }

  // Host <-> the buffers the calls use (no-ops for host buffers).
  void to_run(void* run_buf, const void* host, std::size_t count) {
    if (dev_ && count > 0) dev_->upload(run_buf, host, count * esz_);
  }
  void from_run(void* host, const void* run_buf, std::size_t count) {
    if (dev_ && count > 0) dev_->download(host, run_buf, count * esz_);
  }

  std::int64_t sum_over_ranks(std::int64_t v) {
    return static_cast<std::int64_t>(std::llround(comm_.sum_double(static_cast<double>(v))));
  }

  const BenchOptions& o_;
  Communicator& comm_;
  Collective& coll_;
  DeviceContext* dev_;
  const std::size_t esz_;
  const double rel_tol_;
  Buffer send_, recv_, inplace_;        // host: filled and checked here
  Buffer flush_;                        // --off-cache
  void* dsend_ = nullptr;               // what the calls get: the host buffers, or the
  void* drecv_ = nullptr;               // device buffers of the same sizes
  void* dinplace_ = nullptr;
};

}  // namespace

std::vector<SizeResult> run_collective(const BenchOptions& o, Communicator& comm, Collective& coll,
                                       const RowCallback& on_row, DeviceContext* device) {
  Harness h(o, comm, coll, device);
  // --busy-threads: from the first warm-up to the end of the last size; stopped and joined
  // when this returns or throws.
  const BusyThreads busy(o.busy_threads);
  std::vector<SizeResult> rows;
  for (std::int64_t bytes : size_sweep(o)) {
    rows.push_back(h.run_size(bytes));
    on_row(rows.back());
  }
  return rows;
}

}  // namespace gradsync::bench
