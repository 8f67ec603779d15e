// rabenseifner.cpp — Rabenseifner's all-reduce: recursive-halving reduce-scatter followed
// by a recursive-doubling allgather.
//
// Purpose: bandwidth-optimal like the ring (each rank moves about 2 n (p-1)/p bytes) with
//   only 2 lg p rounds instead of 2 (p-1): the usual choice for medium messages
//   (Thakur, Rabenseifner & Gropp 2005, "Optimization of Collective Communication
//   Operations in MPICH", section 4.4; MPICH's long-message all-reduce).
//
// Approach (p a power of two; the vector is cut into p blocks, block b for rank b):
//   reduce-scatter by recursive halving: rounds with distance mask = p/2, p/4, ..., 1. Both
//     partners hold the same window of blocks; each keeps the half selected by its own bit
//     `mask` (the lower half if the bit is 0), sends the other half to rank ^ mask, and adds
//     the half it receives. The window halves every round; after lg p rounds rank b holds
//     the full sum of block b.
//   allgather by recursive doubling: rounds with mask = 1, 2, ..., p/2; partners swap their
//     windows (adjacent, equal size), which doubles them, until everyone has every block.
//   Non-power-of-two p (the paper's pre/post step): with p' = largest power of two <= p
//     and rem = p - p', the even ranks among the first 2 rem send their whole vector to the
//     odd neighbour, which adds it and takes part as rank/2 (ranks >= 2 rem take part as
//     rank - rem); at the end each odd rank < 2 rem sends the result to its even neighbour.
//
// Key optimisations: no input copy (the first round reduces recv = send + incoming and sends
//   from the send buffer); Avg scales only the owned block; scratch reused across calls.
//   Between nodes each exchange moves in pieces of the transport's chunk (chunk.cpp: 32 KiB
//   below Open MPI's TCP eager limit), each received piece reduced as it lands: whole
//   halves above the eager limit stall on the rendezvous handshake. On one node whole
//   halves (choose_piece). Measured 2026-12-02 on
//   the 2-host 1 Gbit/s testbed (2 ranks, resnet18-cifar buckets of 2.7-10 MB in training):
//   whole halves 48-80 MB/s busbw against the ring's 103-120.
//
// Cost (n bytes, p a power of two):
//   T = 2 lg p alpha + 2 (p-1)/p n beta + (p-1)/p n gamma;
//   otherwise add 2 alpha + 2 n beta + n gamma for the pre/post step.
//
// Use case: medium messages (tens of KiB to a few MiB) and large ones on power-of-two rank
//   counts when the per-message latency is high.
#include <memory>
#include <string>

#include "algos/algorithms.hpp"
#include "algos/detail.hpp"
#include "core/log.hpp"
#include "core/reduce.hpp"

namespace gradsync {
namespace {

using algos::at;

class Rabenseifner final : public algos::PowerOfTwoExchanges {
 public:
  Rabenseifner(Communicator& comm, const AlgoOptions& opts) : PowerOfTwoExchanges(comm, opts) {}

  std::string name() const override { return "rabenseifner"; }

  void run(const void* sendbuf, void* recvbuf, std::size_t count, DType t, RedOp op) override {
    if (count == 0) return;
    const std::size_t esz = dtype_size(t);
    const std::size_t bytes = count * esz;
    if (p_ == 1) {
      algos::copy_if_out_of_place(sendbuf, recvbuf, bytes);
      return;
    }
    char* tmp = static_cast<char*>(scratch_.get(bytes));
    const void* mine = sendbuf;  // holds our partial sums of the current window

    // Pre-step: fold the first 2 rem ranks pairwise.
    mine = fold_.fold(comm_, sendbuf, recvbuf, tmp, count, t, algos::kTagRabFold);
    const int me = fold_.newrank(), pof2 = fold_.pof2();  // -1: this rank sat out

    if (me >= 0) {
      // Block b of the p' blocks is elements [block(b), block(b+1)).
      auto block = [&](int b) {
        return algos::balanced_part(count, static_cast<std::size_t>(pof2), static_cast<std::size_t>(b)).offset;
      };
      auto blocks_end = [&](int b) { return b == pof2 ? count : block(b); };

      // Reduce-scatter by recursive halving: our window [lo, hi) of blocks halves each round.
      int lo = 0, hi = pof2;
      for (int mask = pof2 / 2; mask > 0; mask >>= 1) {
        const int dst = fold_.real_rank(me ^ mask);
        const int mid = lo + (hi - lo) / 2;
        const bool upper = (me & mask) != 0;
        const int keep_lo = upper ? mid : lo, keep_hi = upper ? hi : mid;
        const int give_lo = upper ? lo : mid, give_hi = upper ? mid : hi;
        const std::size_t keep_off = block(keep_lo), keep_n = blocks_end(keep_hi) - keep_off;
        const std::size_t give_off = block(give_lo), give_n = blocks_end(give_hi) - give_off;
        GS_LOG(TRACE) << "rabenseifner: halving mask " << mask << " with rank " << dst << ", keep blocks [" << keep_lo
                      << "," << keep_hi << ")";
        char* out = at(recvbuf, keep_off, esz);
        const char* acc = at(mine, keep_off, esz);
        pieces_.run(comm_, at(mine, give_off, esz), give_n * esz, dst, tmp, keep_n * esz, dst, algos::kTagRabHalving,
                    chunk_.bytes, esz, [&](std::size_t off, std::size_t len) {
                      reduce_out(out + off, acc + off, tmp + off, len / esz, t);
                    });
        mine = recvbuf;
        lo = keep_lo;
        hi = keep_hi;
      }
      // Now lo == me: block me is complete here.
      if (op == RedOp::Avg)
        scale_inplace(at(recvbuf, block(lo), esz), blocks_end(hi) - block(lo), t, 1.0f / static_cast<float>(p_));

      // Allgather by recursive doubling: swap windows with the partner; ours doubles.
      for (int mask = 1; mask < pof2; mask <<= 1) {
        const int dst = fold_.real_rank(me ^ mask);
        const int width = hi - lo;
        const bool upper = (me & mask) != 0;
        const int peer_lo = upper ? lo - width : hi, peer_hi = peer_lo + width;
        const std::size_t my_off = block(lo), my_n = blocks_end(hi) - my_off;
        const std::size_t peer_off = block(peer_lo), peer_n = blocks_end(peer_hi) - peer_off;
        GS_LOG(TRACE) << "rabenseifner: doubling mask " << mask << " with rank " << dst;
        pieces_.run(comm_, at(recvbuf, my_off, esz), my_n * esz, dst, at(recvbuf, peer_off, esz), peer_n * esz, dst,
                    algos::kTagRabDoubling, chunk_.bytes);
        lo = upper ? peer_lo : lo;
        hi = upper ? hi : peer_hi;
      }
    }

    // Post-step: the result goes back to the ranks that sat out.
    fold_.unfold(comm_, recvbuf, bytes, algos::kTagRabUnfold);
  }
};

}  // namespace

std::unique_ptr<AllreduceAlgorithm> algos::make_rabenseifner(Communicator& comm, const AlgoOptions& opts) {
  check_options(opts);
  return std::make_unique<Rabenseifner>(comm, opts);
}

}  // namespace gradsync
