// gradsync/bench/collective.hpp — what one collective contributes to the benchmark.
//
// As in nccl-tests, the harness (harness.cpp) owns everything that is the same for every
// operation: buffers, the timing loop, filling, checking, the table and the result file.
// A collective supplies only
//   - its element counts for a message size     (layout)
//   - the bus-bandwidth factor                  (bus_factor)
//   - its input and expected output values      (input, expected)
//   - the call                                  (run)
// Each operation lives in its own op_<name>.cpp and registers itself in the table of
// collective.cpp, which also lists the algorithms each operation accepts.
//
// Values: every input is a small non-negative integer, exact in float, half and bfloat16,
// chosen so that sums over all ranks stay exact too (see reduce_input). Expected results
// are therefore exact, whatever order an algorithm reduces in; only `avg` (sum, then one
// scale by 1/n) is compared with a tolerance of a couple of units in the last place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "algos/allreduce.hpp"
#include "comm/communicator.hpp"
#include "core/dtype.hpp"

namespace gradsync::bench {

// Element counts of one message size (nccl-tests' getCollByteCount).
struct Layout {
  std::size_t send_count = 0;   // elements of each rank's out-of-place send buffer
  std::size_t recv_count = 0;   // elements of each rank's out-of-place receive buffer
  std::size_t param_count = 0;  // the "count" column: the count argument of the call
  // In place, one buffer of max(send_count, recv_count) elements is both input and output.
  std::size_t ip_send_offset = 0;  // where this rank's input sits in it
  std::size_t ip_recv_offset = 0;  // where this rank's result is read from it
  // The "size" column (nccl-tests: max of send and receive bytes); algbw = size / time.
  std::size_t bytes(std::size_t elem_size) const {
    return (send_count > recv_count ? send_count : recv_count) * elem_size;
  }
};

// Everything a collective needs to know about the run, fixed for its lifetime.
struct CollectiveConfig {
  std::string algo;
  DType dtype = DType::F32;
  RedOp redop = RedOp::Sum;
  int root = 0;
  AlgoOptions algo_options;
  // Local copy between two of the run's buffers (broadcast's root copies its send buffer
  // to its receive buffer). Empty: memcpy (host buffers); --algo nccl: device to device.
  std::function<void(void* dst, const void* src, std::size_t bytes)> copy;
};

class Collective {
 public:
  virtual ~Collective() = default;

  virtual bool has_redop() const { return false; }  // table shows "none" otherwise
  virtual bool has_root() const { return false; }   // table shows -1 otherwise

  // Counts for a message of `elems` elements (already size / element size). Rounds down to
  // what the operation can split evenly across ranks.
  virtual Layout layout(std::size_t elems) const = 0;
  virtual double bus_factor() const = 0;

  // Whether this rank has input data (a broadcast's non-roots have none).
  virtual bool has_input() const { return true; }
  // Element i of this rank's input, and element i of this rank's expected result.
  virtual float input(std::size_t i) const = 0;
  virtual float expected(std::size_t i, const Layout& l) const = 0;

  // One call. Out of place: send and recv are distinct buffers of the layout's sizes.
  // In place: `buf` holds the input at ip_send_offset and gets the result at ip_recv_offset.
  virtual void run(const void* send, void* recv, const Layout& l) = 0;
  virtual void run_in_place(void* buf, const Layout& l) = 0;

  // The algorithm that served a message of `bytes` (what "auto" chose).
  virtual std::string algo_used(std::size_t bytes) const = 0;
  // The pipelining chunk it runs with and why ({0, ""}: none, or chosen by the library).
  virtual ChunkChoice chunk() const { return {}; }

  // Called once before the sweep with the largest element counts of the sweep, so that a
  // wrapper can allocate (e.g. the pinned buffers of host staging) outside the timed region.
  virtual void reserve(std::size_t max_send_count, std::size_t max_recv_count) {
    (void)max_send_count;
    (void)max_recv_count;
  }
};

// ---- the operation table -------------------------------------------------------------------

// Operation names in display order (pingpong last: it has its own loop, see pingpong.hpp).
const std::vector<std::string>& op_names();
// The algorithms an operation accepts (allreduce: the registry's names; every operation also
// "nccl", which needs --device cuda), default first where it matters: default_algo() says
// which one is used without --algo.
std::vector<std::string> algo_names_for(const std::string& op);
std::string default_algo(const std::string& op);
// Throws UsageError naming --op / --algo for unknown names. No communication.
void check_op_algo(const std::string& op, const std::string& algo);

// Builds the collective for `op` (not pingpong). Collective when the algorithm sets up
// sub-communicators (every rank must call it).
std::unique_ptr<Collective> make_collective(const std::string& op, const CollectiveConfig& cfg,
                                            Communicator& comm);

// ---- shared input patterns -----------------------------------------------------------------

// Input of rank r for reductions over n ranks: integers in [0, m] with n*m exactly
// representable in `t` (2^24 float, 2048 half, 256 bfloat16), so every partial sum is exact.
float reduce_input(int r, std::size_t i, int n, DType t);
// Input of rank r for data movement (no arithmetic): integers in [0, 250], exact in every
// type, different across ranks and neighbouring indices so misplaced blocks show.
float move_input(int r, std::size_t i);
// The result of averaging an exact sum as the runtime does it (sum * (1/n), rounded once).
float avg_of_sum(float sum, int n, DType t);

}  // namespace gradsync::bench
