// gradsync/comm/communicator.hpp — the one seam between algorithms and transports.
//
// A Communicator is a group of ranks that can exchange bytes point to point and run the
// library's own ("native") collectives. Collective algorithms in runtime/algos/ are written
// only against isend/irecv/wait here, so they run on every implementation (MPI on host
// memory today; NCCL on device memory shares the shape).
//
// Every wait is bounded by GRADSYNC_TIMEOUT_S: a peer that vanished produces a TimeoutError
// naming this rank, the peer and the operation, instead of a hang.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.hpp"

namespace gradsync {

// A non-blocking operation in flight. Move-only; waiting twice is a no-op.
class Request {
 public:
  class Impl {
   public:
    virtual ~Impl() = default;
    virtual bool test() = 0;                       // true once complete
    virtual std::string describe() const = 0;      // "recv of 4194304 bytes from rank 2 (tag 7)"
    virtual void cancel() {}
  };
  Request() = default;
  explicit Request(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
  Request(Request&&) noexcept = default;
  Request& operator=(Request&&) noexcept = default;
  bool active() const { return impl_ != nullptr; }
  Impl* impl() { return impl_.get(); }
  void reset() { impl_.reset(); }

 private:
  std::unique_ptr<Impl> impl_;
};

// Memory that every rank of a communicator can load and store directly (an MPI-3 shared
// window on one node). Part r belongs to rank r; any rank may read or write any part, and
// sync() is the only ordering: stores before it are visible to loads after it, on every rank.
class SharedSegment {
 public:
  virtual ~SharedSegment() = default;
  virtual std::size_t bytes_per_rank() const = 0;
  virtual void* part(int rank) = 0;  // 64-byte aligned, bytes_per_rank() long
  // Memory barrier + barrier of the communicator (collective, bounded by the time-out).
  virtual void sync() = 0;
};

// How bytes reach one peer: what the transport is and where its eager/rendezvous switch is.
struct PeerLink {
  enum class Kind : std::uint8_t { Unknown, SharedMemory, Network };
  Kind kind = Kind::Unknown;
  std::string transport;        // "sm", "tcp", ... ("" when unknown)
  std::size_t eager_limit = 0;  // bytes sent without a rendezvous handshake (0: unknown)
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Placement: ranks sharing a node (shared-memory domain) and the node count.
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  virtual int node_id() const = 0;     // 0..node_count-1, numbered by lowest global rank
  virtual int node_count() const = 0;
  virtual std::string backend() const = 0;  // "mpi", "nccl"
  virtual std::string hostname() const = 0;

  // ---- point to point (bytes) ----------------------------------------------------------
  virtual Request isend(const void* buf, std::size_t bytes, int peer, int tag) = 0;
  virtual Request irecv(void* buf, std::size_t bytes, int peer, int tag) = 0;

  // Wait for all active requests (inactive ones are skipped), bounded by the time-out.
  void wait_all(Request* reqs, std::size_t n);
  void wait(Request& r) { wait_all(&r, 1); }
  // Convenience: exchange with two peers (send to `dst`, receive from `src`).
  void sendrecv(const void* sendbuf, std::size_t sendbytes, int dst, void* recvbuf, std::size_t recvbytes,
                int src, int tag);
  void send(const void* buf, std::size_t bytes, int peer, int tag);
  void recv(void* buf, std::size_t bytes, int peer, int tag);

  // ---- native collectives (the library's own implementation) -----------------------------
  // counts are elements of `t`; sendbuf == recvbuf means in place.
  virtual void allreduce(const void* sendbuf, void* recvbuf, std::size_t count, DType t, RedOp op) = 0;
  // recvcount elements per rank; sendbuf holds size()*recvcount.
  virtual void reduce_scatter(const void* sendbuf, void* recvbuf, std::size_t recvcount, DType t, RedOp op) = 0;
  // sendcount elements per rank; recvbuf holds size()*sendcount.
  virtual void allgather(const void* sendbuf, void* recvbuf, std::size_t sendcount, DType t) = 0;
  // count elements to each peer; both buffers hold size()*count.
  virtual void alltoall(const void* sendbuf, void* recvbuf, std::size_t count, DType t) = 0;
  virtual void broadcast(void* buf, std::size_t count, DType t, int root) = 0;
  virtual void barrier() = 0;

  // ---- non-blocking collectives a device can order -----------------------------------------
  // The all-reduce, all-gather and all-to-all above, started and returned as a request that
  // wait()/wait_all() complete (the one wait loop, GRADSYNC_TIMEOUT_S). `after`: a device
  // event (cuda: a cudaEvent_t) the collective must follow on the device, so that a caller
  // orders it after its own kernels without waiting on the host; null: none. This base
  // completes the collective on the calling thread before it returns (an inactive
  // request), which orders it after everything the caller did; it refuses an event (host
  // memory has none). NcclCommunicator enqueues on its stream after cudaStreamWaitEvent.
  virtual Request iallreduce(const void* sendbuf, void* recvbuf, std::size_t count, DType t, RedOp op,
                             const void* after = nullptr);
  virtual Request iallgather(const void* sendbuf, void* recvbuf, std::size_t sendcount, DType t,
                             const void* after = nullptr);
  virtual Request ialltoall(const void* sendbuf, void* recvbuf, std::size_t count, DType t,
                            const void* after = nullptr);

  // ---- control-plane helpers (small, not on hot paths) -----------------------------------
  virtual double max_double(double v) = 0;
  virtual double sum_double(double v) = 0;
  virtual std::int64_t min_int64(std::int64_t v) = 0;
  virtual std::int64_t max_int64(std::int64_t v) = 0;
  // Every rank's string, in rank order.
  virtual std::vector<std::string> allgather_strings(const std::string& s) = 0;
  virtual void broadcast_bytes(std::vector<char>& bytes, int root) = 0;

  // Sub-communicator of the ranks with the same color, ordered by key (MPI_Comm_split).
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  // ---- placement-aware extras (defaults: not available) -----------------------------------
  // A shared segment of bytes_per_rank per rank, or nullptr when the ranks do not all share
  // one node or the backend cannot map peers' memory. Collective; every rank gets the same
  // answer.
  virtual std::unique_ptr<SharedSegment> allocate_shared(std::size_t bytes_per_rank) {
    (void)bytes_per_rank;
    return nullptr;
  }
  // The transport towards `peer` (used to pick pipelining chunk sizes).
  virtual PeerLink link_to(int peer) const {
    (void)peer;
    return {};
  }

 protected:
  // Progress hook called while polling requests (MPI needs none; kept for backends that do).
  virtual void progress() {}
};

// Checks that every rank passed the same value (a configuration fingerprint) and, if not,
// throws an Error naming the ranks that differ and both values. Collective.
void check_same_on_all_ranks(Communicator& comm, const std::string& what, const std::string& value);

}  // namespace gradsync
