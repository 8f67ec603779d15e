// rd.cpp — recursive-doubling all-reduce (full-vector exchange).
//
// Purpose: the latency-optimal all-reduce for small messages: lg p rounds, each one
//   message per rank (Thakur, Rabenseifner & Gropp 2005, section 4.4; MPICH's choice for
//   short all-reduces).
//
// Approach: with p a power of two, in round i (mask = 2^i) every rank exchanges its whole
//   current vector with rank ^ mask and adds what it received; after lg p rounds all hold
//   the sum. Both partners add the same two operands (addition is commutative in IEEE), so
//   all ranks end with identical bits.
//   Non-power-of-two p: let p' be the largest power of two <= p and rem = p - p'. Among the
//   first 2 rem ranks, each even rank first folds its vector into its odd neighbour and
//   sits out; the odd ones (new rank = rank/2) and ranks >= 2 rem (new rank = rank - rem)
//   run the power-of-two algorithm; finally every odd rank < 2 rem sends the result back
//   to its even neighbour.
//
// Key optimisations: no input copy: the first reduction writes recv = send + incoming, and
//   the first message goes straight from the send buffer; one scratch vector reused
//   across calls.
//
// Cost (n bytes): lg p' (alpha + n beta + n gamma), plus 2 (alpha + n beta) + n gamma when
//   p is not a power of two.
//
// Use case: small messages (up to tens of KiB), where the number of rounds, not bytes,
//   dominates; "auto" picks it there.
#include <memory>
#include <string>

#include "algos/algorithms.hpp"
#include "algos/detail.hpp"
#include "core/log.hpp"
#include "core/reduce.hpp"

namespace gradsync {
namespace {

class RecursiveDoubling final : public algos::PowerOfTwoExchanges {
 public:
  RecursiveDoubling(Communicator& comm, const AlgoOptions& opts) : PowerOfTwoExchanges(comm, opts) {}

  std::string name() const override { return "rd"; }

  void run(const void* sendbuf, void* recvbuf, std::size_t count, DType t, RedOp op) override {
    if (count == 0) return;
    const std::size_t esz = dtype_size(t);
    const std::size_t bytes = count * esz;
    if (p_ == 1) {
      algos::copy_if_out_of_place(sendbuf, recvbuf, bytes);
      return;
    }
    void* tmp = scratch_.get(bytes);
    const void* mine = sendbuf;  // our current partial sum: the input until the first reduction

    // Fold: even ranks among the first 2 rem hand their vector to the odd neighbour.
    mine = fold_.fold(comm_, sendbuf, recvbuf, tmp, count, t, algos::kTagRdFold);
    const int me = fold_.newrank(), pof2 = fold_.pof2();  // -1: this rank sat out

    // lg p' rounds of full-vector exchange with the partner at distance mask.
    if (me >= 0) {
      for (int mask = 1; mask < pof2; mask <<= 1) {
        const int dst = fold_.real_rank(me ^ mask);
        GS_LOG(TRACE) << "rd: round mask " << mask << " with rank " << dst;
        char* out = static_cast<char*>(recvbuf);
        const char* acc = static_cast<const char*>(mine);
        char* in = static_cast<char*>(tmp);
        pieces_.run(comm_, mine, bytes, dst, tmp, bytes, dst, algos::kTagRdExchange, chunk_.bytes, esz,
                    [&](std::size_t off, std::size_t len) { reduce_out(out + off, acc + off, in + off, len / esz, t); });
        mine = recvbuf;
      }
      if (op == RedOp::Avg) scale_inplace(recvbuf, count, t, 1.0f / static_cast<float>(p_));
    }

    // Unfold: the result goes back to the ranks that sat out.
    fold_.unfold(comm_, recvbuf, bytes, algos::kTagRdUnfold);
  }
};

}  // namespace

std::unique_ptr<AllreduceAlgorithm> algos::make_recursive_doubling(Communicator& comm, const AlgoOptions& opts) {
  check_options(opts);
  return std::make_unique<RecursiveDoubling>(comm, opts);
}

}  // namespace gradsync
