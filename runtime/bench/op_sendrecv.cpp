// sendrecv: every rank sends `size` bytes to its right ring neighbour (rank + 1) and at
// the same time receives `size` bytes from its left one (rank - 1) — one step of a ring
// all-reduce, alone. With 2 ranks both directions of the one link are busy at once; with
// more, every rank's link carries one flow out and one flow in. This is the both-ways
// measurement next to pingpong's one-way one: calibrate fits the fabric's duplex term
// (what a rank gets while sending and receiving at once) from the ratio of the two.
//
// Columns (as nccl-tests' sendrecv_perf): size = bytes each rank sends (and receives);
// count = elements; algbw = size / time; busbw = algbw (factor 1: every byte crosses one
// link once). Each rank moves 2 x size through its network port per call.
//
// Checking: rank r's input is move_input(r, i); it must receive move_input(r - 1, i).
// Out of place: send and receive buffers. In place: the buffer is sent, the neighbour's
// data arrives in a staging buffer and is copied over it (point-to-point cannot send and
// receive one buffer at once): the in-place time includes that local copy.
// Algorithms: "mpi" — one non-blocking send + receive of the whole message on the host
// communicator (under --device cuda through host staging, as every host collective);
// "pieces" — the exchange as rd and rabenseifner move theirs (algos::choose_piece,
// algos::PieceExchange): in pieces of --chunk-bytes when given, else of 32 KiB (below Open
// MPI's TCP eager limit) between hosts, whole on one node. Over TCP a whole message above
// the eager limit stalls on the rendezvous handshake both ways, which chunked algorithms
// never see: measured 2026-12-02 on the 2-host 1 Gbit/s testbed, "mpi" gave 0.08 GB/s at
// 4-16 MiB in place while the ring's steps ran at 0.12; on the 200 Mbit/s testbed a fit to
// "mpi" sendrecv read a both-ways factor of 0.58 where the chunked ring ran at 94% of the
// rate. For the duplex term of a fabric that prices gradsync's algorithms, sweep "pieces".
#include <cstring>
#include <vector>

#include "algos/algorithms.hpp"
#include "algos/detail.hpp"
#include "bench/ops.hpp"
#include "bench/p2p_algos.hpp"
#include "core/error.hpp"

namespace gradsync::bench {

namespace {

class SendrecvOp final : public Collective {
 public:
  SendrecvOp(const CollectiveConfig& cfg, Communicator& comm)
      : cfg_(cfg),
        comm_(comm),
        rank_(comm.rank()),
        n_(comm.size()),
        chunk_(cfg.algo == "pieces" && n_ > 1 ? algos::choose_piece(comm, cfg.algo_options) : ChunkChoice{}) {}

  ChunkChoice chunk() const override { return chunk_; }

  Layout layout(std::size_t elems) const override {
    Layout l;
    l.param_count = l.send_count = l.recv_count = elems;
    return l;
  }
  double bus_factor() const override { return 1.0; }

  float input(std::size_t i) const override { return move_input(rank_, i); }
  float expected(std::size_t i, const Layout&) const override { return move_input(left(), i); }

  void run(const void* send, void* recv, const Layout& l) override {
    // Piece size 0 ("mpi", or "pieces" on one node): one non-blocking receive + send.
    const std::size_t bytes = l.param_count * dtype_size(cfg_.dtype);
    pieces_.run(comm_, send, bytes, right(), recv, bytes, left(), kTagSendrecv, chunk_.bytes);
  }
  void run_in_place(void* buf, const Layout& l) override {
    const std::size_t bytes = l.param_count * dtype_size(cfg_.dtype);
    if (stage_.size() < bytes) stage_.resize(bytes);
    run(buf, stage_.data(), l);
    if (cfg_.copy) cfg_.copy(buf, stage_.data(), bytes);
    else std::memcpy(buf, stage_.data(), bytes);
  }
  void reserve(std::size_t max_send_count, std::size_t) override {
    stage_.resize(max_send_count * dtype_size(cfg_.dtype));
  }
  std::string algo_used(std::size_t) const override { return cfg_.algo; }

 private:
  int left() const { return (rank_ + n_ - 1) % n_; }
  int right() const { return (rank_ + 1) % n_; }

  CollectiveConfig cfg_;
  Communicator& comm_;
  int rank_, n_;
  ChunkChoice chunk_;        // "pieces": the piece size and why (0: whole); "mpi": none
  algos::PieceExchange pieces_;
  std::vector<char> stage_;  // in place: the neighbour's data, before the copy
};

}  // namespace

std::unique_ptr<Collective> make_sendrecv_op(const CollectiveConfig& cfg, Communicator& comm) {
  return std::make_unique<SendrecvOp>(cfg, comm);
}

}  // namespace gradsync::bench
