// Tests of the all-reduce algorithms over MPI (run by CTest through mpiexec on 1..5 ranks).
//
// Every algorithm x dtype {float, half, bfloat16} x op {sum, avg} x element count
// {0, 1, 2, 3, 7, 1000, 65537, plus counts spanning many small chunks} x {in place, out of
// place}, compared element by element with the exact result. Inputs are small integers
// (rank + 1 + i % 7), so every partial sum is exact in all three types whatever the
// reduction order; Avg is compared with the same single rounding of sum * (1/p) that the
// algorithms apply. Out of place, the send buffer must be untouched; guard elements after
// the receive buffer must never be written.
//
// hier also runs on emulated placements (a Communicator wrapper that reports 2 ranks per
// node, or 1 rank per node), which exercises the multi-node path and the fallback to ring
// on a single real node.
//
// Registered buffers (comm/shared_buffer.hpp): shm and auto on buffers in the node's shared
// memory, which shm reads in place from kShmZeroCopyMinBytes on, with every rank's buffers
// registered and with only rank 0's (all ranks must then take the copying path).
//
// All ranks run the same tests in the same order; each rank checks its own results, and
// main() makes the exit status the OR of all ranks' failures (rank 0 prints the summary).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "algos/algorithms.hpp"
#include "algos/allreduce.hpp"
#include "comm/mpi_comm.hpp"
#include "comm/shared_buffer.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "../mpi_gtest_main.hpp"

namespace gs = gradsync;

namespace {

gs::Communicator* g_world = nullptr;

// ---- a communicator with emulated placement ---------------------------------------------

// Forwards everything to `inner` but reports nodes of `ranks_per_node` consecutive ranks.
class EmulatedNodes : public gs::Communicator {
 public:
  EmulatedNodes(gs::Communicator& inner, int ranks_per_node) : in_(inner), rpn_(ranks_per_node) {}
  int rank() const override { return in_.rank(); }
  int size() const override { return in_.size(); }
  int local_rank() const override { return in_.rank() % rpn_; }
  int local_size() const override { return std::min(rpn_, in_.size() - node_id() * rpn_); }
  int node_id() const override { return in_.rank() / rpn_; }
  int node_count() const override { return (in_.size() + rpn_ - 1) / rpn_; }
  std::string backend() const override { return in_.backend(); }
  std::string hostname() const override { return in_.hostname(); }
  gs::Request isend(const void* buf, std::size_t bytes, int peer, int tag) override {
    return in_.isend(buf, bytes, peer, tag);
  }
  gs::Request irecv(void* buf, std::size_t bytes, int peer, int tag) override {
    return in_.irecv(buf, bytes, peer, tag);
  }
  void allreduce(const void* s, void* r, std::size_t n, gs::DType t, gs::RedOp op) override {
    in_.allreduce(s, r, n, t, op);
  }
  void reduce_scatter(const void* s, void* r, std::size_t n, gs::DType t, gs::RedOp op) override {
    in_.reduce_scatter(s, r, n, t, op);
  }
  void allgather(const void* s, void* r, std::size_t n, gs::DType t) override { in_.allgather(s, r, n, t); }
  void alltoall(const void* s, void* r, std::size_t n, gs::DType t) override { in_.alltoall(s, r, n, t); }
  void broadcast(void* b, std::size_t n, gs::DType t, int root) override { in_.broadcast(b, n, t, root); }
  void barrier() override { in_.barrier(); }
  double max_double(double v) override { return in_.max_double(v); }
  double sum_double(double v) override { return in_.sum_double(v); }
  std::int64_t min_int64(std::int64_t v) override { return in_.min_int64(v); }
  std::int64_t max_int64(std::int64_t v) override { return in_.max_int64(v); }
  std::vector<std::string> allgather_strings(const std::string& s) override { return in_.allgather_strings(s); }
  void broadcast_bytes(std::vector<char>& b, int root) override { in_.broadcast_bytes(b, root); }
  std::unique_ptr<gs::Communicator> split(int color, int key) override { return in_.split(color, key); }

 private:
  gs::Communicator& in_;
  int rpn_;
};

// ---- data and checks --------------------------------------------------------------------

constexpr gs::DType kTypes[] = {gs::DType::F32, gs::DType::F16, gs::DType::BF16};
constexpr gs::RedOp kOps[] = {gs::RedOp::Sum, gs::RedOp::Avg};
constexpr std::size_t kGuard = 16;  // elements after the receive buffer that must stay intact

float input_value(int rank, std::size_t i) { return static_cast<float>(rank + 1 + static_cast<int>(i % 7)); }

// Raw bits of element i (2 or 4 bytes).
std::uint32_t bits_at(const unsigned char* buf, std::size_t i, std::size_t esz) {
  std::uint32_t b = 0;
  std::memcpy(&b, buf + i * esz, esz);
  return b;
}

// The exact expected bits of element i for p ranks.
std::uint32_t expected_bits(std::size_t i, int p, gs::DType t, gs::RedOp op) {
  float sum = 0;
  for (int r = 0; r < p; ++r) sum += input_value(r, i);  // small integers: exact
  const float v = op == gs::RedOp::Avg ? sum * (1.0f / static_cast<float>(p)) : sum;
  unsigned char out[4] = {0, 0, 0, 0};
  gs::store_from_f32(out, 0, t, v);
  std::uint32_t b = 0;
  std::memcpy(&b, out, gs::dtype_size(t));
  return b;
}

// Runs one all-reduce on the caller's memory (send_mem, recv_mem: (count + kGuard)
// elements each; recv_mem unused in place) and returns a description of what went wrong
// ("" when right).
std::string run_case_on(gs::AllreduceAlgorithm& algo, int rank, int p, gs::DType t, gs::RedOp op, std::size_t count,
                        bool in_place, unsigned char* send_mem, unsigned char* recv_mem) {
  const std::size_t esz = gs::dtype_size(t), bytes = (count + kGuard) * esz;
  unsigned char* send = send_mem;
  std::memset(send, 0xA5, bytes);
  for (std::size_t i = 0; i < count; ++i) gs::store_from_f32(send, i, t, input_value(rank, i));
  unsigned char* recv = in_place ? send : recv_mem;
  if (!in_place) {
    std::memset(recv, 0xFF, count * esz);  // all-ones: NaN in every type
    std::memset(recv + count * esz, 0xA5, kGuard * esz);
  }
  const std::vector<unsigned char> send_before(send, send + bytes);

  algo.run(in_place ? recv : send, recv, count, t, op);

  std::string err;
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint32_t got = bits_at(recv, i, esz), want = expected_bits(i, p, t, op);
    if (got != want && wrong++ == 0) {
      unsigned char want_buf[4];
      std::memcpy(want_buf, &want, esz);
      char line[200];
      std::snprintf(line, sizeof line, "first wrong element %zu: got %g (0x%x), want %g (0x%x); ", i,
                    static_cast<double>(gs::load_as_f32(recv, i, t)), got,
                    static_cast<double>(gs::load_as_f32(want_buf, 0, t)), want);
      err += line;
    }
  }
  if (wrong) err += std::to_string(wrong) + " of " + std::to_string(count) + " elements wrong; ";
  for (std::size_t i = count; i < count + kGuard; ++i)
    if (bits_at(recv, i, esz) != bits_at(send_before.data(), i, esz)) {
      err += "guard element " + std::to_string(i - count) + " after the receive buffer was written; ";
      break;
    }
  if (!in_place && !std::equal(send_before.begin(), send_before.end(), send)) err += "send buffer was modified; ";
  if (!err.empty())
    err = algo.name() + " (" + algo.chosen(count * esz) + ") " + gs::dtype_name(t) + " " + gs::redop_name(op) +
          " count " + std::to_string(count) + (in_place ? " in place" : " out of place") + " on rank " +
          std::to_string(rank) + "/" + std::to_string(p) + ": " + err;
  return err;
}

// run_case_on in this process's own memory.
std::string run_case(gs::AllreduceAlgorithm& algo, int rank, int p, gs::DType t, gs::RedOp op, std::size_t count,
                     bool in_place) {
  std::vector<unsigned char> send((count + kGuard) * gs::dtype_size(t)), recv(send.size());
  return run_case_on(algo, rank, p, t, op, count, in_place, send.data(), recv.data());
}

struct Variant {
  std::string algo;
  int channels;
  int ranks_per_node;  // 0: the real placement; else emulated
};

void PrintTo(const Variant& v, std::ostream* os) {
  *os << v.algo << ", " << v.channels << " channel(s), "
      << (v.ranks_per_node > 0 ? std::to_string(v.ranks_per_node) + " rank(s) per emulated node" : "real placement");
}

std::string variant_name(const ::testing::TestParamInfo<Variant>& info) {
  std::string n = info.param.algo + "_c" + std::to_string(info.param.channels);
  if (info.param.ranks_per_node > 0) n += "_rpn" + std::to_string(info.param.ranks_per_node);
  return n;
}

class AllreduceTest : public ::testing::TestWithParam<Variant> {
 protected:
  // Runs every dtype x op x place for each count with an algorithm built from `opts`.
  void check_counts(gs::AlgoOptions opts, const std::vector<std::size_t>& counts) {
    gs::Communicator& world = *g_world;
    std::unique_ptr<EmulatedNodes> emulated;
    gs::Communicator* comm = &world;
    if (GetParam().ranks_per_node > 0) {
      emulated = std::make_unique<EmulatedNodes>(world, GetParam().ranks_per_node);
      comm = emulated.get();
    }
    opts.channels = GetParam().channels;
    auto algo = gs::make_allreduce(GetParam().algo, *comm, opts);
    ASSERT_EQ(algo->name(), GetParam().algo);
    for (std::size_t count : counts)
      for (gs::DType t : kTypes)
        for (gs::RedOp op : kOps)
          for (bool in_place : {false, true}) {
            const std::string err = run_case(*algo, world.rank(), world.size(), t, op, count, in_place);
            EXPECT_EQ(err, "");
          }
  }
};

TEST_P(AllreduceTest, ExactForEveryCountTypeOpAndPlace) {
  check_counts(gs::AlgoOptions{}, {0, 1, 2, 3, 7, 1000, 65537});
}

TEST_P(AllreduceTest, ManySmallChunks) {
  gs::AlgoOptions opts;
  opts.chunk_bytes = 1024;  // 10007 elements: several chunks per step for every type
  check_counts(opts, {10007, 5});
  opts.chunk_bytes = 1;  // less than one element: one element per chunk
  check_counts(opts, {13});
}

TEST_P(AllreduceTest, RepeatedCallsWithChangingSizesReuseState) {
  gs::AlgoOptions opts;
  opts.chunk_bytes = 4096;
  check_counts(opts, {4099, 17, 4099, 0, 1, 20000, 3});
}

INSTANTIATE_TEST_SUITE_P(Algorithms, AllreduceTest,
                         ::testing::Values(Variant{"ring", 1, 0}, Variant{"ring", 3, 0}, Variant{"rd", 1, 0},
                                           Variant{"rabenseifner", 1, 0}, Variant{"tree", 1, 0},
                                           Variant{"hier", 1, 0}, Variant{"hier", 2, 2}, Variant{"hier", 1, 1},
                                           Variant{"shm", 1, 0}, Variant{"shm", 1, 2},
                                           Variant{"mpi", 1, 0}, Variant{"auto", 1, 0}, Variant{"auto", 1, 2}),
                         variant_name);

// ---- registered (shared) buffers --------------------------------------------------------------

// run_case_on buffers in shared memory: `registered` says whether this rank's lie in a
// SharedBuffer of `comm` (allocated on every rank either way: allocation is collective).
std::string run_case_shared(gs::Communicator& comm, gs::AllreduceAlgorithm& algo, bool registered, gs::DType t,
                            gs::RedOp op, std::size_t count, bool in_place) {
  const std::size_t bytes = (count + kGuard) * gs::dtype_size(t);
  auto send_buf = gs::SharedBuffer::allocate(comm, bytes);
  auto recv_buf = gs::SharedBuffer::allocate(comm, bytes);
  if (!send_buf || !recv_buf) return "no shared buffer on one node";
  std::vector<unsigned char> send_own(bytes), recv_own(bytes);
  auto* send = registered ? static_cast<unsigned char*>(send_buf->data()) : send_own.data();
  auto* recv = registered ? static_cast<unsigned char*>(recv_buf->data()) : recv_own.data();
  const std::string err = run_case_on(algo, comm.rank(), comm.size(), t, op, count, in_place, send, recv);
  return err.empty() ? err : (registered ? "registered " : "private ") + err;
}

TEST(SharedBuffers, ShmAndAutoExactOnRegisteredAndMixedBuffers) {
  gs::Communicator& world = *g_world;
  if (world.size() < 2 || world.node_count() > 1) GTEST_SKIP() << "needs 2 or more ranks on one node";
  // Below, at and past the zero-copy size for every type (300007 halves: 600 KB).
  const std::vector<std::size_t> counts = {1000, 70001, 300007};
  for (const char* name : {"shm", "auto"}) {
    auto algo = gs::make_allreduce(name, world);
    for (bool all : {true, false})  // every rank registered, or rank 0 only
      for (std::size_t count : counts)
        for (gs::DType t : kTypes)
          for (gs::RedOp op : kOps)
            for (bool in_place : {false, true})
              EXPECT_EQ(run_case_shared(world, *algo, all || world.rank() == 0, t, op, count, in_place), "");
  }
}

TEST(SharedBuffers, FoundByRangeAndIdOnlyOnTheirCommunicator) {
  gs::Communicator& world = *g_world;
  if (world.size() < 2 || world.node_count() > 1) GTEST_SKIP() << "needs 2 or more ranks on one node";
  auto a = gs::SharedBuffer::allocate(world, 4096);
  auto b = gs::SharedBuffer::allocate(world, 100);
  ASSERT_TRUE(a && b);
  EXPECT_GT(b->id(), a->id());  // agreed on by the ranks at allocation
  EXPECT_EQ(world.min_int64(static_cast<std::int64_t>(b->id())), world.max_int64(static_cast<std::int64_t>(b->id())));
  const auto* base = static_cast<const char*>(a->data());
  const gs::SharedRef in = gs::find_shared(world, base + 100, 3996);
  EXPECT_EQ(in.buffer, a.get());
  EXPECT_EQ(in.offset, 100u);
  EXPECT_EQ(gs::find_shared(world, base + 100, 3997).buffer, nullptr);  // runs past the end
  EXPECT_EQ(gs::shared_by_id(world, b->id()), b.get());
  EmulatedNodes other(world, world.size());  // another communicator object: nothing registered
  EXPECT_EQ(gs::find_shared(other, base, 8).buffer, nullptr);
  // Every rank's copy is mapped here: rank j's first byte, written by rank j.
  static_cast<char*>(a->data())[0] = static_cast<char>(world.rank() + 1);
  world.barrier();
  for (int j = 0; j < world.size(); ++j) EXPECT_EQ(static_cast<const char*>(a->peer(j))[0], j + 1);
  world.barrier();
  const std::uint64_t gone = b->id();
  b.reset();
  EXPECT_EQ(gs::shared_by_id(world, gone), nullptr);
}

// ---- registry -------------------------------------------------------------------------------

TEST(Registry, NamesInOrder) {
  const std::vector<std::string> want = {"ring", "rd", "rabenseifner", "tree", "hier", "shm", "mpi", "auto"};
  EXPECT_EQ(gs::allreduce_names(), want);
  for (const auto& n : want) EXPECT_NO_THROW(gs::check_allreduce_name(n));
}

TEST(Registry, UnknownNameThrowsUsageErrorListingKnownNames) {
  for (int i = 0; i < 2; ++i) {
    try {
      if (i == 0) gs::check_allreduce_name("rign");
      else (void)gs::make_allreduce("rign", *g_world);
      ADD_FAILURE() << "no exception for an unknown name";
    } catch (const gs::UsageError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("'rign'"), std::string::npos) << msg;
      for (const auto& n : gs::allreduce_names()) EXPECT_NE(msg.find(n), std::string::npos) << msg;
    }
  }
}

TEST(Registry, BadOptionsThrowUsageError) {
  gs::AlgoOptions opts;
  opts.channels = 0;
  EXPECT_THROW((void)gs::make_allreduce("ring", *g_world, opts), gs::UsageError);
  opts.channels = 1000;
  EXPECT_THROW((void)gs::make_allreduce("ring", *g_world, opts), gs::UsageError);
}

TEST(Auto, ChoosesBySizeAndPlacement) {
  auto algo = gs::make_allreduce("auto", *g_world);
  EXPECT_EQ(algo->name(), "auto");
  // The test ranks all run on one node: native for small messages, shm for the rest.
  if (g_world->size() > 1 && g_world->node_count() == 1) {
    EXPECT_EQ(algo->chosen(8), "mpi");
    EXPECT_EQ(algo->chosen(64 << 10), "mpi");
    EXPECT_EQ(algo->chosen((64 << 10) + 1), "shm");
    EXPECT_EQ(algo->chosen(16 << 20), "shm");
  }
  if (g_world->size() == 1) {
    EXPECT_EQ(algo->chosen(8), "rd");
    EXPECT_EQ(algo->chosen((64 << 10) + 1), "rabenseifner");
    EXPECT_EQ(algo->chosen(16 << 20), "ring");
  }
  // Emulated nodes (no shared segment across the wrapper): the multi-node table.
  EmulatedNodes two_per_node(*g_world, 2);
  auto emulated = gs::make_allreduce("auto", two_per_node);
  const int p = g_world->size();
  const bool equal_nodes = p >= 4 && p % 2 == 0;
  EXPECT_EQ(emulated->chosen(8), "rd");
  EXPECT_EQ(emulated->chosen(64 << 10), "rd");
  EXPECT_EQ(emulated->chosen(16 << 20), equal_nodes ? "hier" : "ring");
  if (!equal_nodes && p > 2) {
    EXPECT_EQ(emulated->chosen(1 << 20), "rabenseifner");
  }
}

// ---- transport-aware chunk --------------------------------------------------------------------

// Reports every peer on another node as a TCP link with the given eager limit.
class TcpNodes final : public EmulatedNodes {
 public:
  TcpNodes(gs::Communicator& inner, std::size_t eager) : EmulatedNodes(inner, 1), eager_(eager) {}
  gs::PeerLink link_to(int peer) const override {
    gs::PeerLink l;
    l.kind = peer == rank() ? gs::PeerLink::Kind::SharedMemory : gs::PeerLink::Kind::Network;
    l.transport = "tcp";
    l.eager_limit = eager_;
    return l;
  }

 private:
  std::size_t eager_;
};

TEST(Chunk, ExplicitWinsOverTransport) {
  gs::AlgoOptions opts;
  opts.chunk_bytes = 12345;
  TcpNodes tcp(*g_world, 64 << 10);
  EXPECT_EQ(gs::algos::choose_chunk(tcp, opts).bytes, 12345u);
  EXPECT_EQ(gs::algos::choose_chunk(*g_world, opts).bytes, 12345u);
}

TEST(Chunk, BelowTheTcpEagerLimitBetweenNodes) {
  if (g_world->size() < 2) GTEST_SKIP() << "needs 2 ranks (emulated nodes)";
  TcpNodes tcp64(*g_world, 64 << 10);
  const gs::ChunkChoice c = gs::algos::choose_chunk(tcp64, {});
  EXPECT_EQ(c.bytes, 32u << 10);
  EXPECT_NE(c.reason.find("eager"), std::string::npos) << c.reason;
  TcpNodes tcp1m(*g_world, 1 << 20);
  EXPECT_EQ(gs::algos::choose_chunk(tcp1m, {}).bytes, 512u << 10);
  TcpNodes tcp4k(*g_world, 4096);
  EXPECT_EQ(gs::algos::choose_chunk(tcp4k, {}).bytes, 2048u);
  // The ring built on it runs with that chunk and stays exact.
  auto ring = gs::make_allreduce("ring", tcp64);
  EXPECT_EQ(ring->chunk().bytes, 32u << 10);
  EXPECT_EQ(run_case(*ring, g_world->rank(), g_world->size(), gs::DType::F32, gs::RedOp::Sum, 100003, false), "");
  // rd and rabenseifner move their exchanges in pieces of the same size (whole halves above
  // the eager limit stall on the rendezvous), reduce each piece as it lands, and stay exact.
  for (const char* name : {"rd", "rabenseifner"}) {
    auto a = gs::make_allreduce(name, tcp64);
    EXPECT_EQ(a->chunk().bytes, 32u << 10) << name;
    for (gs::DType t : kTypes)
      for (bool in_place : {false, true})
        EXPECT_EQ(run_case(*a, g_world->rank(), g_world->size(), t, gs::RedOp::Sum, 100003, in_place), "") << name;
  }
}

TEST(Chunk, OneNodeAndUnknownTransport) {
  const gs::ChunkChoice one = gs::algos::choose_chunk(*g_world, {});
  EXPECT_EQ(one.bytes, 4u << 20);
  if (g_world->size() > 1) {
    EXPECT_NE(one.reason.find("shared-memory"), std::string::npos) << one.reason;
  }
  // rd and rabenseifner exchange whole messages on one node (no --chunk-bytes).
  for (const char* name : {"rd", "rabenseifner"}) EXPECT_EQ(gs::make_allreduce(name, *g_world)->chunk().bytes, 0u) << name;
  EmulatedNodes unknown(*g_world, 1);  // several nodes, no link information
  if (g_world->size() > 1) {
    EXPECT_NE(gs::algos::choose_chunk(unknown, {}).reason.find("unknown"), std::string::npos);
  }
}

TEST(Hier, FallsBackToRingWhenNodesDiffer) {
  EmulatedNodes two_per_node(*g_world, 2);
  auto algo = gs::make_allreduce("hier", two_per_node);
  const int p = g_world->size();
  EXPECT_EQ(algo->name(), "hier");
  EXPECT_EQ(algo->chosen(1 << 20), (p % 2 == 1 && p > 1) ? "ring" : "hier");
}

}  // namespace

int main(int argc, char** argv) {
  return gs::test_support::run_mpi_gtests(argc, argv, "test_allreduce_mpi", [](gs::MpiCommunicator* w) { g_world = w; });
}
