// gradsync/comm/nccl_comm.hpp — Communicator over NCCL on device memory.
//
// The NCCL twin of mpi_comm.hpp: same seam, same shape. Every buffer handed to it is a
// device pointer of this rank's GPU; counts are elements, sizes 64-bit.
//
// Set-up (collective over a host communicator, normally MPI's world):
//   1. pick this rank's GPU: SLURM_LOCALID when set, else the host communicator's
//      local_rank(), modulo the visible devices (cuda/device.hpp);
//   2. refuse, on every rank alike, two ranks on one GPU of one host (NCCL cannot run them;
//      host-staged MPI can, see cuda/host_staging.hpp);
//   3. rank 0 makes the ncclUniqueId, the host communicator broadcasts it,
//      ncclCommInitRank(Config) in blocking mode (not bounded by GRADSYNC_TIMEOUT_S: it
//      returns once every rank has joined);
//   4. one non-blocking CUDA stream of its own, on which every NCCL call is enqueued.
//
// Completion and failure: every native collective is enqueued, an event is recorded after
// it, and the call returns only when the event has completed — a request polled by the
// seam's one wait loop (Communicator::wait_all: cudaEventQuery, ncclCommGetAsyncError every
// 16th poll), bounded by GRADSYNC_TIMEOUT_S. On a time-out, an asynchronous
// NCCL error or a failing call the communicator is aborted (ncclCommAbort: the GPU work is
// torn down so nothing hangs) and a gradsync::Error / TimeoutError names rank, host, the
// call and NCCL's own words (ncclGetErrorString, ncclGetLastError where available). Every
// later call on an aborted communicator throws.
//
// Point to point: isend/irecv are queued on the host and issued together, as one
// ncclGroupStart/ncclGroupEnd, when a request is first tested (i.e. by wait/wait_all) or
// before the next collective. That is what lets the algorithms' "post receive, post send,
// wait" steps run without deadlock (separate NCCL sends and receives on one stream block
// each other), and keeps no NCCL group open between calls. NCCL has no tags: messages
// between two ranks match in posting order, tags only appear in messages. A request that
// is dropped before it completed (e.g. after a wait timed out) aborts the communicator.
//
// Control plane (max_double, allgather_strings, split, barrier ...) runs on the host
// communicator. barrier() is a host barrier: every NCCL call of this class has completed on
// the device when it returns, except requests still in flight.
//
// NCCL_DEBUG, NCCL_SOCKET_IFNAME etc. are left to the user (provenance records NCCL_*).
// One thread uses one NcclCommunicator at a time; requests must not outlive it.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "kernels/cuda_check.hpp"

namespace gradsync {

class Stream;
class Event;

// Throws gradsync::Error (rank, host, the call, NCCL's error string and last error, file:line)
// if an NCCL call does not return ncclSuccess.
[[noreturn]] void nccl_fail(ncclResult_t rc, const char* call, const char* file, int line);
#define GS_NCCL(call)                                                                               \
  do {                                                                                              \
    const ncclResult_t gs_nccl_rc_ = (call);                                                        \
    if (gs_nccl_rc_ != ncclSuccess) ::gradsync::nccl_fail(gs_nccl_rc_, #call, __FILE__, __LINE__); \
  } while (0)

// "NCCL 2.28.9 (built with 2.28.9)".
std::string nccl_version_text();

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `control`, a host-memory communicator (MPI) that must outlive this
  // object. device < 0: choose by node-local rank (above); else use that device.
  explicit NcclCommunicator(Communicator& control, int device = -1);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return control_->rank(); }
  int size() const override { return control_->size(); }
  int local_rank() const override { return control_->local_rank(); }
  int local_size() const override { return control_->local_size(); }
  int node_id() const override { return control_->node_id(); }
  int node_count() const override { return control_->node_count(); }
  std::string backend() const override { return "nccl"; }
  std::string hostname() const override { return control_->hostname(); }

  int device() const { return device_; }
  cudaStream_t stream() const;  // where every NCCL call of this communicator is enqueued
  ncclComm_t handle() const { return comm_; }
  bool aborted() const { return comm_ == nullptr; }

  // Device pointers; see "Point to point" above.
  Request isend(const void* buf, std::size_t bytes, int peer, int tag) override;
  Request irecv(void* buf, std::size_t bytes, int peer, int tag) override;

  // ncclAllReduce / ncclReduceScatter / ncclAllGather / ncclBroadcast; alltoall as grouped
  // ncclSend/ncclRecv. In-place conventions are the interface's (as MPI's): reduce_scatter
  // with sendbuf == recvbuf leaves the result in block 0 (NCCL's own in-place form,
  // recvbuf == sendbuf + rank * recvcount, is passed through as such); allgather is in
  // place when sendbuf == recvbuf + rank * sendcount; alltoall when sendbuf == recvbuf
  // (the input is first copied to device scratch).
  void allreduce(const void* sendbuf, void* recvbuf, std::size_t count, DType t, RedOp op) override;
  // Enqueued on stream() after cudaStreamWaitEvent(after) (a cudaEvent_t, or null); the
  // request completes with an event recorded after the collective. Dropped unfinished, it
  // aborts the communicator.
  Request iallreduce(const void* sendbuf, void* recvbuf, std::size_t count, DType t, RedOp op,
                     const void* after = nullptr) override;
  Request iallgather(const void* sendbuf, void* recvbuf, std::size_t sendcount, DType t,
                     const void* after = nullptr) override;
  Request ialltoall(const void* sendbuf, void* recvbuf, std::size_t count, DType t,
                    const void* after = nullptr) override;
  void reduce_scatter(const void* sendbuf, void* recvbuf, std::size_t recvcount, DType t, RedOp op) override;
  void allgather(const void* sendbuf, void* recvbuf, std::size_t sendcount, DType t) override;
  void alltoall(const void* sendbuf, void* recvbuf, std::size_t count, DType t) override;
  void broadcast(void* buf, std::size_t count, DType t, int root) override;
  void barrier() override;

  double max_double(double v) override { return control_->max_double(v); }
  double sum_double(double v) override { return control_->sum_double(v); }
  std::int64_t min_int64(std::int64_t v) override { return control_->min_int64(v); }
  std::int64_t max_int64(std::int64_t v) override { return control_->max_int64(v); }
  std::vector<std::string> allgather_strings(const std::string& s) override {
    return control_->allgather_strings(s);
  }
  void broadcast_bytes(std::vector<char>& bytes, int root) override { control_->broadcast_bytes(bytes, root); }

  // Splits the host communicator and makes a new NCCL communicator over each part, on the
  // same device. Collective over this communicator.
  std::unique_ptr<Communicator> split(int color, int key) override;

  // ---- used by the point-to-point requests (nccl_comm.cpp) ------------------------------
  struct Batch;  // one group of queued point-to-point calls and its completion event
  bool test_batch(Batch& batch, const std::string& what);
  // One poll of a native collective's completion event (`polls`: how many before; every
  // 16th also checks ncclCommGetAsyncError). Errors abort the communicator and throw.
  bool test_event(cudaEvent_t ev, const std::string& what, long polls);
  void dropped_unfinished(const std::string& what);

 private:
  NcclCommunicator(std::unique_ptr<Communicator> owned_control, int device);
  void init(int device);

  // Enqueue one operation on stream_ (after any queued point-to-point calls and the
  // caller's event `after`), record an event of its own after it and return the request
  // that completes with it. Failures abort the communicator and throw.
  template <typename Enqueue>
  Request start_native(const std::string& what, const void* after, Enqueue&& enqueue);
  // Wait for a start_native request in the seam's wait loop; a time-out aborts and throws.
  void finish_native(Request& r);
  template <typename Enqueue>
  void run_native(const std::string& what, Enqueue&& enqueue);  // start + finish
  void flush_p2p();
  void check_async(const std::string& what);
  void check_usable(const std::string& what) const;
  [[noreturn]] void abort_and_throw(const std::string& what, const std::string& why, bool timeout);
  void abort_comm(const std::string& reason);
  std::string describe_call(const std::string& what) const;
  void* scratch(std::size_t bytes);

  std::unique_ptr<Communicator> owned_control_;
  Communicator* control_;
  int device_ = -1;
  // Made once the device is chosen; destroyed after comm_ (the destructor ends comm_ first).
  std::unique_ptr<Stream> stream_;
  DeviceBuffer scratch_;         // alltoall in place: a copy of the input
  ncclComm_t comm_ = nullptr;    // nullptr once aborted
  std::string abort_reason_;

  struct P2pCall {
    bool is_send;
    void* buf;
    std::size_t bytes;
    int peer;
  };
  std::vector<P2pCall> queued_;
  std::shared_ptr<Batch> open_batch_;  // the batch the queued calls will form
};

}  // namespace gradsync
