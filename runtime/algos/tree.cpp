// tree.cpp — binomial-tree all-reduce: pipelined reduce to rank 0, then pipelined
// broadcast from rank 0.
//
// Purpose: a logarithmic-depth all-reduce built from the two classic binomial collectives
//   (reduce + broadcast, as in MPICH's early all-reduce and the tree half of NCCL's
//   algorithms). It needs only lg p rounds, like recursive doubling, and with chunking it
//   streams large vectors through the tree.
//
// What is implemented: a single binomial tree rooted at rank 0, pipelined in chunks of
//   opts.chunk_bytes (not NCCL's double binary tree).
//   Tree: the parent of rank r > 0 is r with its lowest set bit cleared; its children are
//     r + 2^j for every 2^j below that bit (all 2^j < p for the root) with r + 2^j < p.
//   Reduce: for every chunk, a rank adds the chunks of its children (in order of increasing
//     distance; the first add reads the send buffer, recv = send + child) and sends the sum
//     to its parent. Receives for the next kPipelineSlots chunks of every child are posted
//     before the current chunk is reduced, so transfers and additions overlap.
//   Broadcast: the root sends each chunk to its children, largest subtree first; every
//     other rank receives a chunk from its parent straight into the result and forwards
//     it, with a window of receives posted ahead.
//
// Key optimisations: no input copy; leaves send straight from the send buffer; Avg is one
//   scale per chunk on the root only, just before it goes down; scratch (one slot ring per
//   child) reused across calls.
//
// Cost (n bytes, C chunks): about 2 (lg p + C - 1) (alpha + n/C beta) + lg p n/C gamma per
//   rank on the critical path; for C = 1: 2 lg p (alpha + n beta) + lg p n gamma. The root
//   receives lg p full vectors, so it is not bandwidth-optimal.
//
// Use case: small and medium messages, and a reference point for tree-vs-ring studies.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "algos/algorithms.hpp"
#include "algos/detail.hpp"
#include "core/log.hpp"
#include "core/reduce.hpp"

namespace gradsync {
namespace {

using algos::at;
using algos::Span;

class BinomialTree final : public AllreduceAlgorithm {
 public:
  BinomialTree(Communicator& comm, const AlgoOptions& opts)
      : comm_(comm), chunk_(algos::choose_chunk(comm, opts)), chunk_bytes_(chunk_.bytes) {
    p_ = comm.size();
    r_ = comm.rank();
    for (int mask = 1; mask < p_; mask <<= 1) {
      if (r_ & mask) {
        parent_ = r_ - mask;
        break;
      }
      if (r_ + mask < p_) children_.push_back(r_ + mask);
    }
  }

  std::string name() const override { return "tree"; }
  ChunkChoice chunk() const override { return chunk_; }

  void run(const void* sendbuf, void* recvbuf, std::size_t count, DType t, RedOp op) override {
    if (count == 0) return;
    const std::size_t esz = dtype_size(t);
    if (p_ == 1) {
      algos::copy_if_out_of_place(sendbuf, recvbuf, count * esz);
      return;
    }
    const std::size_t C = algos::ceil_div(count, std::max<std::size_t>(1, chunk_bytes_ / esz));
    auto chunk = [&](std::size_t k) { return algos::balanced_part(count, C, k); };
    const std::size_t nch = children_.size();
    const bool root = parent_ < 0;

    // ---- reduce towards rank 0 ----
    const std::size_t D = std::min(algos::kPipelineSlots, C);
    const std::size_t slot_elems = algos::ceil_div(count, C);
    char* slots = static_cast<char*>(scratch_.get(std::max<std::size_t>(1, D * nch * slot_elems * esz)));
    auto slot = [&](std::size_t k, std::size_t i) { return slots + ((k % D) * nch + i) * slot_elems * esz; };
    if (recvs_.size() < std::max(D * nch, C)) recvs_.resize(std::max(D * nch, C));
    if (up_.size() < C) up_.resize(C);

    auto post_child_recvs = [&](std::size_t k) {
      const Span ch = chunk(k);
      for (std::size_t i = 0; i < nch; ++i)
        recvs_[(k % D) * nch + i] = comm_.irecv(slot(k, i), ch.count * esz, children_[i], algos::kTagTreeReduce);
    };
    if (nch > 0)
      for (std::size_t k = 0; k < D; ++k) post_child_recvs(k);
    const void* partial = nch > 0 ? recvbuf : sendbuf;  // what goes up: our sum, or our input at a leaf
    for (std::size_t k = 0; k < C; ++k) {
      const Span ch = chunk(k);
      if (nch > 0) {
        GS_LOG(TRACE) << "tree: reduce chunk " << k << " from " << nch << " children";
        comm_.wait_all(&recvs_[(k % D) * nch], nch);
        reduce_out(at(recvbuf, ch.offset, esz), at(sendbuf, ch.offset, esz), slot(k, 0), ch.count, t);
        for (std::size_t i = 1; i < nch; ++i) reduce_into(at(recvbuf, ch.offset, esz), slot(k, i), ch.count, t);
        if (k + D < C) post_child_recvs(k + D);
      }
      if (root) {
        if (op == RedOp::Avg)
          scale_inplace(at(recvbuf, ch.offset, esz), ch.count, t, 1.0f / static_cast<float>(p_));
      } else {
        up_[k] = comm_.isend(at(partial, ch.offset, esz), ch.count * esz, parent_, algos::kTagTreeReduce);
      }
    }

    // ---- broadcast from rank 0 ----
    const std::size_t W = std::min(algos::kPipelineSlots, C);
    auto post_parent_recv = [&](std::size_t k) {
      comm_.wait(up_[k]);  // the region may still be in flight upwards (in place, or our sum)
      const Span ch = chunk(k);
      recvs_[k % W] = comm_.irecv(at(recvbuf, ch.offset, esz), ch.count * esz, parent_, algos::kTagTreeBcast);
    };
    if (!root)
      for (std::size_t k = 0; k < W; ++k) post_parent_recv(k);
    sends_.reset(comm_, W * std::max<std::size_t>(1, nch));
    for (std::size_t k = 0; k < C; ++k) {
      const Span ch = chunk(k);
      if (!root) {
        GS_LOG(TRACE) << "tree: broadcast chunk " << k << " from rank " << parent_;
        comm_.wait(recvs_[k % W]);
        if (k + W < C) post_parent_recv(k + W);
      }
      for (std::size_t i = nch; i-- > 0;)  // largest subtree first
        sends_.push(comm_.isend(at(recvbuf, ch.offset, esz), ch.count * esz, children_[i], algos::kTagTreeBcast));
    }
    sends_.drain();
  }

 private:
  Communicator& comm_;
  ChunkChoice chunk_;
  std::size_t chunk_bytes_;
  int p_ = 1, r_ = 0, parent_ = -1;
  std::vector<int> children_;  // increasing distance
  algos::Scratch scratch_;
  std::vector<Request> recvs_;
  std::vector<Request> up_;
  algos::RequestWindow sends_;
};

}  // namespace

std::unique_ptr<AllreduceAlgorithm> algos::make_tree(Communicator& comm, const AlgoOptions& opts) {
  check_options(opts);
  return std::make_unique<BinomialTree>(comm, opts);
}

}  // namespace gradsync
