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

class RecursiveDoubling final : public AllreduceAlgorithm {
 public:
  RecursiveDoubling(Communicator& comm, const AlgoOptions& opts)
      : comm_(comm),
        p_(comm.size()),
        fold_(p_, comm.rank()),
        pof2_(fold_.pof2()),
        newrank_(fold_.newrank()),
        chunk_(p_ > 1 ? algos::choose_piece(comm, opts) : ChunkChoice{}) {}

  std::string name() const override { return "rd"; }
  ChunkChoice chunk() const override { return chunk_; }

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

    // lg p' rounds of full-vector exchange with the partner at distance mask.
    if (newrank_ >= 0) {
      for (int mask = 1; mask < pof2_; mask <<= 1) {
        const int dst = real_rank(newrank_ ^ mask);
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

 private:
  int real_rank(int nr) const { return fold_.real_rank(nr); }

  Communicator& comm_;
  int p_;
  algos::PowerOfTwoFold fold_;
  int pof2_, newrank_;
  ChunkChoice chunk_;
  algos::Scratch scratch_;
  algos::PieceExchange pieces_;
};

}  // namespace

std::unique_ptr<AllreduceAlgorithm> algos::make_recursive_doubling(Communicator& comm, const AlgoOptions& opts) {
  check_options(opts);
  return std::make_unique<RecursiveDoubling>(comm, opts);
}

}  // namespace gradsync
