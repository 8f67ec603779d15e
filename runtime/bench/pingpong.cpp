// pingpong: rank 0 sends `size` bytes to rank 1, which sends them back; half the round
// trip is the one-way time the cost model calibrates alpha and beta from (size / half-RTT
// is the bandwidth). Raw bytes: -d does not apply, sizes go down to 0.
//
// --off-cache B: before every round trip both ranks write B bytes of their own and meet at a
// barrier, so the transfer finds its buffers out of cache.
//
// --busy-threads N: N threads per rank spin on the CPU through the whole sweep (busy.hpp).
//
// Checking: rank 0 sends a byte pattern, rank 1 echoes what it received; after the timed
// loop both ranks compare their receive buffers (filled with the pattern's complement
// beforehand) with the pattern.
//
// --device cuda: the buffers are on the GPU (pattern uploaded, result downloaded outside
// the loop); mpi moves them with host staging (HostStagedCommunicator: the copies are in
// the round trip), nccl with ncclSend/ncclRecv.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "bench/busy.hpp"
#include "bench/harness.hpp"
#include "bench/p2p_algos.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"

namespace gradsync::bench {

namespace {

std::uint8_t pattern(std::size_t i) { return static_cast<std::uint8_t>(i * 31 + 7); }

}  // namespace

std::vector<SizeResult> run_pingpong(const BenchOptions& o, Communicator& comm, const RowCallback& on_row,
                                     DeviceContext* device) {
  const int rank = comm.rank();
  const int peer = 1 - rank;
  const std::vector<std::int64_t> sizes = size_sweep(o);
  const std::size_t max_bytes = static_cast<std::size_t>(*std::max_element(sizes.begin(), sizes.end()));
  Buffer send(max_bytes), recv(max_bytes);
  auto* s = static_cast<std::uint8_t*>(send.data());
  auto* r = static_cast<std::uint8_t*>(recv.data());
  // What the transfers use: the host buffers, or device buffers through the device's
  // point-to-point communicator.
  Communicator& p2p = device ? device->p2p_comm(o.algo, comm) : comm;
  void* ds = device ? device->alloc(max_bytes) : send.data();
  void* dr = device ? device->alloc(max_bytes) : recv.data();
  Buffer flush;  // --off-cache
  if (o.off_cache_bytes > 0) flush = Buffer(static_cast<std::size_t>(o.off_cache_bytes));
  // --busy-threads: from the first warm-up to the end of the last size; stopped and joined
  // when this returns or throws.
  const BusyThreads busy(o.busy_threads);

  std::vector<SizeResult> rows;
  for (std::int64_t size : sizes) {
    const std::size_t bytes = static_cast<std::size_t>(size);
    GS_LOG(INFO) << "bench: pingpong " << bytes << " B";
    for (std::size_t i = 0; i < bytes; ++i) {
      s[i] = pattern(i);
      r[i] = static_cast<std::uint8_t>(~pattern(i));
    }
    if (device && bytes > 0) {
      device->upload(ds, s, bytes);
      device->upload(dr, r, bytes);
    }
    SizeResult row;
    row.size_bytes = row.count = size;
    row.algo_used = o.algo;
    PhaseResult& p = row.oop;
    p.time_us.resize(static_cast<std::size_t>(o.iters));
    comm.barrier();
    for (int it = 0; it < o.warmup + o.iters; ++it) {
      if (o.off_cache_bytes > 0) {  // both ranks evict, then start the round trip together
        evict_caches(flush, it);
        comm.barrier();
      }
      double half_rtt_us = 0;
      if (rank == 0) {
        const double t0 = now_s();
        p2p.send(ds, bytes, peer, kTagPingPong);
        p2p.recv(dr, bytes, peer, kTagPingPong);
        half_rtt_us = (now_s() - t0) * 1e6 / 2;
      } else {
        p2p.recv(dr, bytes, peer, kTagPingPong);
        p2p.send(dr, bytes, peer, kTagPingPong);  // echo what arrived
      }
      if (it >= o.warmup) p.time_us[static_cast<std::size_t>(it - o.warmup)] = half_rtt_us;
    }
    // Only rank 0 timed; share its values so every rank holds the same results.
    double sum = 0;
    for (double& t : p.time_us) {
      t = comm.max_double(t);
      sum += t;
    }
    p.time_us_avg = sum / o.iters;
    p.algbw_GBps = p.busbw_GBps = gbps(static_cast<double>(bytes), p.time_us_avg);
    if (device && bytes > 0) device->download(r, dr, bytes);
    if (o.check) {
      std::int64_t wrong = 0;
      for (std::size_t i = 0; i < bytes; ++i) wrong += r[i] != pattern(i) ? 1 : 0;
      p.nwrong = static_cast<std::int64_t>(std::llround(comm.sum_double(static_cast<double>(wrong))));
    }
    rows.push_back(row);
    on_row(rows.back());
  }
  return rows;
}

}  // namespace gradsync::bench
