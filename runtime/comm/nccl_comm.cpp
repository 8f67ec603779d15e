#include "comm/nccl_comm.hpp"

#include <cstring>
#include <map>

#include "comm/nccl_compat.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/params.hpp"
#include "core/timer.hpp"
#include "cuda/device.hpp"
#include "cuda/stream.hpp"

namespace gradsync {

void nccl_fail(ncclResult_t rc, const char* call, const char* file, int line) {
  throw Error(where() + ": NCCL call " + call + " failed: " + nccl_compat::error_text(rc, nullptr) + " (" + file +
              ":" + std::to_string(line) + ")");
}

std::string nccl_version_text() { return nccl_compat::versions_text(); }

// ---- point-to-point requests -------------------------------------------------------------------

// The calls queued between two flushes, issued as one NCCL group; `done` is recorded on the
// stream after the group, so it completes when every call of the group has.
struct NcclCommunicator::Batch {
  Batch() { GS_CUDA(cudaEventCreateWithFlags(&done, cudaEventDisableTiming)); }
  ~Batch() {
    if (done) cudaEventDestroy(done);
  }
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;
  cudaEvent_t done = nullptr;
  bool issued = false;
  bool complete = false;
};

namespace {

class NcclP2pRequest final : public Request::Impl {
 public:
  // batch == nullptr: a zero-byte transfer, complete at once (both sides know the size).
  NcclP2pRequest(NcclCommunicator& comm, std::shared_ptr<NcclCommunicator::Batch> batch, bool is_send,
                 std::size_t bytes, int peer, int tag)
      : comm_(comm), batch_(std::move(batch)), is_send_(is_send), bytes_(bytes), peer_(peer), tag_(tag),
        done_(batch_ == nullptr) {}
  ~NcclP2pRequest() override {
    if (!done_ && !batch_->complete) comm_.dropped_unfinished(describe());
  }
  bool test() override {
    if (!done_) done_ = comm_.test_batch(*batch_, describe());
    return done_;
  }
  std::string describe() const override {
    return std::string(is_send_ ? "ncclSend of " : "ncclRecv of ") + std::to_string(bytes_) + " bytes " +
           (is_send_ ? "to" : "from") + " rank " + std::to_string(peer_) + " (tag " + std::to_string(tag_) + ")";
  }

 private:
  NcclCommunicator& comm_;
  std::shared_ptr<NcclCommunicator::Batch> batch_;
  bool is_send_;
  std::size_t bytes_;
  int peer_, tag_;
  bool done_;
};

// A native collective in flight (owned event recorded after it on the communicator's
// stream): complete when the event has completed. describe() names the operation and its
// peers (every rank of the communicator), for the time-out's message. Dropped before it
// completed (e.g. after a wait timed out), it aborts the communicator: the GPU may still
// use buffers their owner is about to free.
class NcclEventRequest final : public Request::Impl {
 public:
  NcclEventRequest(NcclCommunicator& comm, std::unique_ptr<Event> ev, std::string what)
      : comm_(comm), ev_(std::move(ev)), what_(std::move(what)) {}
  ~NcclEventRequest() override {
    if (!complete_ && !comm_.aborted()) comm_.dropped_unfinished(describe());
  }
  bool test() override {
    if (!complete_) complete_ = comm_.test_event(ev_->get(), what_, polls_++);
    return complete_;
  }
  std::string describe() const override {
    return what_ + " with peers rank 0.." + std::to_string(comm_.size() - 1) + " (NCCL rank " +
           std::to_string(comm_.rank()) + ")";
  }
  const std::string& what() const { return what_; }

 private:
  NcclCommunicator& comm_;
  std::unique_ptr<Event> ev_;
  std::string what_;
  long polls_ = 0;
  bool complete_ = false;
};

// Runs `calls` between ncclGroupStart and ncclGroupEnd; the group is closed on errors too,
// so NCCL's per-thread group depth stays balanced.
template <typename Calls>
void nccl_group(Calls&& calls) {
  GS_NCCL(ncclGroupStart());
  try {
    calls();
  } catch (...) {
    ncclGroupEnd();
    throw;
  }
  GS_NCCL(ncclGroupEnd());
}

std::string elements(std::size_t count, DType t) {
  return std::to_string(count) + " " + dtype_name(t) + " elements";
}

}  // namespace

// ---- set-up and tear-down ----------------------------------------------------------------------

NcclCommunicator::NcclCommunicator(Communicator& control, int device) : control_(&control) {
  GS_CHECK(control.backend() != "nccl", "an NCCL communicator needs a host (MPI) communicator for its control plane");
  init(device);
}

NcclCommunicator::NcclCommunicator(std::unique_ptr<Communicator> owned_control, int device)
    : owned_control_(std::move(owned_control)), control_(owned_control_.get()) {
  init(device);
}

void NcclCommunicator::init(int device) {
  // 1. Every rank needs a GPU; decide together so that no rank waits for one that gave up.
  std::string why;
  const bool have = cuda_device_count(&why) > 0;
  if (control_->min_int64(have ? 1 : 0) == 0) {
    const std::vector<std::string> reasons = control_->allgather_strings(have ? "" : why);
    std::string missing;
    for (int r = 0; r < size(); ++r)
      if (!reasons[static_cast<std::size_t>(r)].empty()) {
        missing += (missing.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r);
        if (missing.size() > 200) break;
      }
    throw NoCudaDeviceError("no CUDA device found (" + where() + (have ? "" : ": " + why) +
                            "); NCCL needs one GPU on every rank, missing on " + missing);
  }
  if (device < 0) {
    device_ = select_cuda_device(local_rank());
  } else {
    device_ = device;
    GS_CUDA(cudaSetDevice(device_));
  }

  // 2. One GPU per rank: NCCL refuses two ranks on one GPU ("Duplicate GPU detected")
  //    later and less clearly. Every rank sees the same table and reaches the same verdict.
  //    A GPU is its PCI address on its host (device indices depend on CUDA_VISIBLE_DEVICES).
  const CudaDeviceInfo info = cuda_device_info(device_);
  const std::vector<std::string> gpus =
      control_->allgather_strings("GPU " + info.pci_bus_id + " on " + hostname());
  std::map<std::string, int> first;
  for (int r = 0; r < size(); ++r) {
    const std::string& g = gpus[static_cast<std::size_t>(r)];
    const auto [it, fresh] = first.emplace(g, r);
    if (!fresh)
      throw Error(where() + ": NCCL needs one GPU per rank, but ranks " + std::to_string(it->second) + " and " +
                  std::to_string(r) + " both use " + g +
                  ": start at most as many ranks per host as it has GPUs, or use an MPI algorithm (host staging "
                  "lets ranks share a GPU)");
  }

  // 3. The unique id travels over the host communicator. A failure on rank 0 is sent as an
  //    empty id, so that every rank fails instead of waiting.
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  std::vector<char> bytes;
  std::string id_error;
  if (rank() == 0) {
    const ncclResult_t rc = ncclGetUniqueId(&id);
    const char* raw = reinterpret_cast<const char*>(&id);
    if (rc == ncclSuccess) bytes.assign(raw, raw + sizeof id);
    else id_error = ": " + nccl_compat::error_text(rc, nullptr);
  }
  control_->broadcast_bytes(bytes, 0);
  if (bytes.size() != sizeof id) throw Error(where() + ": ncclGetUniqueId failed on rank 0" + id_error);
  std::memcpy(&id, bytes.data(), sizeof id);

  // 4. Stream, then the communicator (blocking until all ranks joined).
  stream_ = std::make_unique<Stream>();
  const double t0 = now_s();
  GS_NCCL(nccl_compat::init_rank(&comm_, size(), id, rank()));
  GS_LOG(INFO) << "NCCL communicator: rank " << rank() << "/" << size() << " on GPU " << device_ << " ("
               << info.name << ", " << info.pci_bus_id << "), " << nccl_version_text() << ", init "
               << (now_s() - t0) * 1e3 << " ms";
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_) {
    // Work still running (a request that was never waited for) would make ncclCommDestroy
    // wait for it, perhaps forever: abort instead.
    if (cudaStreamQuery(stream_->get()) == cudaSuccess) ncclCommDestroy(comm_);
    else ncclCommAbort(comm_);
    cudaGetLastError();
    comm_ = nullptr;
  }
}

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key) {
  std::unique_ptr<Communicator> sub = control_->split(color, key);
  return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(sub), device_));
}

cudaStream_t NcclCommunicator::stream() const { return stream_->get(); }

// ---- failure handling --------------------------------------------------------------------------

std::string NcclCommunicator::describe_call(const std::string& what) const {
  return where() + ": " + what + " (NCCL rank " + std::to_string(rank()) + "/" + std::to_string(size()) + ", GPU " +
         std::to_string(device_) + ")";
}

void NcclCommunicator::check_usable(const std::string& what) const {
  if (!comm_) throw Error(describe_call(what) + ": the NCCL communicator was aborted earlier: " + abort_reason_);
}

void NcclCommunicator::abort_comm(const std::string& reason) {
  if (!comm_) return;
  GS_LOG(WARN) << "aborting the NCCL communicator: " << reason;
  ncclCommAbort(comm_);  // we are failing already; its own result changes nothing
  comm_ = nullptr;
  abort_reason_ = reason;
  queued_.clear();
  open_batch_.reset();
}

void NcclCommunicator::abort_and_throw(const std::string& what, const std::string& why, bool timeout) {
  const std::string msg = describe_call(what) + ": " + why;
  abort_comm(msg);
  if (timeout) throw TimeoutError(msg + "; communicator aborted (ncclCommAbort) — a peer may have died or be stuck");
  throw Error(msg + "; communicator aborted (ncclCommAbort)");
}

void NcclCommunicator::check_async(const std::string& what) {
  ncclResult_t state = ncclSuccess;
  const ncclResult_t rc = ncclCommGetAsyncError(comm_, &state);
  if (rc != ncclSuccess)
    abort_and_throw(what, "ncclCommGetAsyncError failed: " + nccl_compat::error_text(rc, comm_), false);
  if (state != ncclSuccess && !nccl_compat::in_progress(state))
    abort_and_throw(what, "asynchronous NCCL error: " + nccl_compat::error_text(state, comm_), false);
}

void NcclCommunicator::finish_native(Request& r) {
  // The one wait loop of the Communicator seam (Communicator::wait_all: polling, yielding,
  // GRADSYNC_TIMEOUT_S). The request's test() aborts the communicator on a CUDA or
  // asynchronous NCCL error; a time-out aborts it here, so the GPU work is torn down and
  // every later call refuses.
  if (!r.active()) return;
  const std::string what = static_cast<NcclEventRequest*>(r.impl())->what();
  try {
    wait(r);
  } catch (const TimeoutError& e) {
    ncclResult_t state = ncclSuccess;
    if (comm_) ncclCommGetAsyncError(comm_, &state);
    std::string why = e.what();  // "<where>: timed out after ... waiting for <describe()> ..."
    if (const std::size_t k = why.find("timed out"); k != std::string::npos) why = why.substr(k);
    const std::string async = nccl_compat::error_text(state, comm_);
    abort_comm(describe_call(what) + ": " + why);
    r.reset();  // after the abort: dropping it aborts nothing more
    throw TimeoutError(describe_call(what) + ": " + why + "; ncclCommGetAsyncError: " + async +
                       "; communicator aborted (ncclCommAbort) — a peer may have died or be stuck");
  }
}

bool NcclCommunicator::test_event(cudaEvent_t ev, const std::string& what, long polls) {
  check_usable(what);
  const cudaError_t q = cudaEventQuery(ev);
  if (q == cudaSuccess) return true;
  if (q != cudaErrorNotReady)
    abort_and_throw(what, std::string("cudaEventQuery failed: ") + cudaGetErrorName(q) + " (" +
                              cudaGetErrorString(q) + ")", false);
  if ((polls & 15) == 0) check_async(what);
  return false;
}

template <typename Enqueue>
Request NcclCommunicator::start_native(const std::string& what, const void* after, Enqueue&& enqueue) {
  check_usable(what);
  flush_p2p();  // point-to-point calls posted before stay ahead of this on the stream
  auto done = std::make_unique<Event>(false);
  try {
    // The caller's device work first: the stream waits for its event on the GPU.
    if (after) GS_CUDA(cudaStreamWaitEvent(stream_->get(), static_cast<cudaEvent_t>(const_cast<void*>(after)), 0));
    enqueue();
    done->record(stream_->get());
  } catch (const Error& e) {
    abort_comm(e.what());
    throw;
  }
  return Request(std::make_unique<NcclEventRequest>(*this, std::move(done), what));
}

template <typename Enqueue>
void NcclCommunicator::run_native(const std::string& what, Enqueue&& enqueue) {
  Request r = start_native(what, nullptr, std::forward<Enqueue>(enqueue));
  finish_native(r);
}

// ---- point to point ------------------------------------------------------------------------------

Request NcclCommunicator::isend(const void* buf, std::size_t bytes, int peer, int tag) {
  check_usable("ncclSend");
  GS_CHECK(peer >= 0 && peer < size(), "ncclSend to rank ", peer, " of ", size());
  if (bytes == 0) return Request(std::make_unique<NcclP2pRequest>(*this, nullptr, true, 0, peer, tag));
  if (!open_batch_) open_batch_ = std::make_shared<Batch>();
  queued_.push_back({true, const_cast<void*>(buf), bytes, peer});
  return Request(std::make_unique<NcclP2pRequest>(*this, open_batch_, true, bytes, peer, tag));
}

Request NcclCommunicator::irecv(void* buf, std::size_t bytes, int peer, int tag) {
  check_usable("ncclRecv");
  GS_CHECK(peer >= 0 && peer < size(), "ncclRecv from rank ", peer, " of ", size());
  if (bytes == 0) return Request(std::make_unique<NcclP2pRequest>(*this, nullptr, false, 0, peer, tag));
  if (!open_batch_) open_batch_ = std::make_shared<Batch>();
  queued_.push_back({false, buf, bytes, peer});
  return Request(std::make_unique<NcclP2pRequest>(*this, open_batch_, false, bytes, peer, tag));
}

void NcclCommunicator::flush_p2p() {
  if (queued_.empty()) return;
  check_usable("point-to-point group");
  const std::shared_ptr<Batch> batch = std::move(open_batch_);
  const std::vector<P2pCall> calls = std::move(queued_);
  open_batch_.reset();
  queued_.clear();
  try {
    nccl_group([&] {
      for (const P2pCall& c : calls) {
        if (c.is_send) GS_NCCL(ncclSend(c.buf, c.bytes, ncclUint8, c.peer, comm_, stream_->get()));
        else GS_NCCL(ncclRecv(c.buf, c.bytes, ncclUint8, c.peer, comm_, stream_->get()));
      }
    });
    GS_CUDA(cudaEventRecord(batch->done, stream_->get()));
  } catch (const Error& e) {
    abort_comm(e.what());
    throw;
  }
  batch->issued = true;
}

bool NcclCommunicator::test_batch(Batch& batch, const std::string& what) {
  if (batch.complete) return true;
  if (!batch.issued) flush_p2p();
  check_usable(what);
  GS_CHECK(batch.issued, "internal: ", what, " was never issued");
  const cudaError_t q = cudaEventQuery(batch.done);
  if (q == cudaSuccess) {
    batch.complete = true;
    return true;
  }
  if (q != cudaErrorNotReady)
    abort_and_throw(what, std::string("cudaEventQuery failed: ") + cudaGetErrorName(q) + " (" + cudaGetErrorString(q) +
                              ")", false);
  check_async(what);
  return false;
}

void NcclCommunicator::dropped_unfinished(const std::string& what) {
  // The GPU may still read or write the request's buffer, which its owner is about to free
  // (typically after a wait timed out): tear the communicator down.
  abort_comm("a request was dropped before it completed: " + what);
}

// ---- native collectives ------------------------------------------------------------------------------

Request NcclCommunicator::iallreduce(const void* sendbuf, void* recvbuf, std::size_t count, DType t, RedOp op,
                                     const void* after) {
  if (count == 0) return Request();
  const ncclDataType_t type = nccl_compat::datatype(t);
  const ncclRedOp_t red = nccl_compat::redop(op);
  return start_native("ncclAllReduce of " + elements(count, t), after, [&] {
    GS_NCCL(ncclAllReduce(sendbuf, recvbuf, count, type, red, comm_, stream_->get()));
  });
}

void NcclCommunicator::allreduce(const void* sendbuf, void* recvbuf, std::size_t count, DType t, RedOp op) {
  Request r = iallreduce(sendbuf, recvbuf, count, t, op, nullptr);
  finish_native(r);
}

void NcclCommunicator::reduce_scatter(const void* sendbuf, void* recvbuf, std::size_t recvcount, DType t, RedOp op) {
  if (recvcount == 0) return;
  const ncclDataType_t type = nccl_compat::datatype(t);
  const ncclRedOp_t red = nccl_compat::redop(op);
  const std::size_t block = recvcount * dtype_size(t);
  run_native("ncclReduceScatter of " + elements(recvcount, t) + " per rank", [&] {
    if (sendbuf != recvbuf) {
      GS_NCCL(ncclReduceScatter(sendbuf, recvbuf, recvcount, type, red, comm_, stream_->get()));
      return;
    }
    // The interface's in place: NCCL's in-place form, then block `rank` moves to block 0.
    char* mine = static_cast<char*>(recvbuf) + static_cast<std::size_t>(rank()) * block;
    GS_NCCL(ncclReduceScatter(sendbuf, mine, recvcount, type, red, comm_, stream_->get()));
    if (rank() != 0) GS_CUDA(cudaMemcpyAsync(recvbuf, mine, block, cudaMemcpyDeviceToDevice, stream_->get()));
  });
}

Request NcclCommunicator::iallgather(const void* sendbuf, void* recvbuf, std::size_t sendcount, DType t,
                                     const void* after) {
  if (sendcount == 0) return Request();
  const ncclDataType_t type = nccl_compat::datatype(t);
  return start_native("ncclAllGather of " + elements(sendcount, t) + " per rank", after, [&] {
    GS_NCCL(ncclAllGather(sendbuf, recvbuf, sendcount, type, comm_, stream_->get()));
  });
}

void NcclCommunicator::allgather(const void* sendbuf, void* recvbuf, std::size_t sendcount, DType t) {
  Request r = iallgather(sendbuf, recvbuf, sendcount, t, nullptr);
  finish_native(r);
}

void NcclCommunicator::alltoall(const void* sendbuf, void* recvbuf, std::size_t count, DType t) {
  Request r = ialltoall(sendbuf, recvbuf, count, t, nullptr);
  finish_native(r);
}

Request NcclCommunicator::ialltoall(const void* sendbuf, void* recvbuf, std::size_t count, DType t,
                                    const void* after) {
  if (count == 0) return Request();
  const ncclDataType_t type = nccl_compat::datatype(t);
  const std::size_t block = count * dtype_size(t);
  const std::size_t n = static_cast<std::size_t>(size()), me = static_cast<std::size_t>(rank());
  const bool in_place = sendbuf == recvbuf;
  const char* src = static_cast<const char*>(sendbuf);
  char* dst = static_cast<char*>(recvbuf);
  if (in_place) src = static_cast<const char*>(scratch(block * n));
  // In place, the copy aside goes to scratch_, reused by later calls: they are ordered
  // after this one on the same stream.
  return start_native("alltoall (grouped ncclSend/ncclRecv) of " + elements(count, t) + " per peer", after, [&] {
    // In place: the input is copied aside first (my own block stays where it is);
    // otherwise my own block is a local copy.
    if (in_place)
      GS_CUDA(cudaMemcpyAsync(const_cast<char*>(src), sendbuf, block * n, cudaMemcpyDeviceToDevice, stream_->get()));
    else
      GS_CUDA(cudaMemcpyAsync(dst + me * block, src + me * block, block, cudaMemcpyDeviceToDevice, stream_->get()));
    nccl_group([&] {
      for (std::size_t p = 0; p < n; ++p) {
        if (p == me) continue;
        GS_NCCL(ncclSend(src + p * block, count, type, static_cast<int>(p), comm_, stream_->get()));
        GS_NCCL(ncclRecv(dst + p * block, count, type, static_cast<int>(p), comm_, stream_->get()));
      }
    });
  });
}

void NcclCommunicator::broadcast(void* buf, std::size_t count, DType t, int root) {
  if (count == 0) return;
  GS_CHECK(root >= 0 && root < size(), "broadcast root ", root, " of ", size(), " ranks");
  const ncclDataType_t type = nccl_compat::datatype(t);
  run_native("ncclBroadcast of " + elements(count, t) + " from rank " + std::to_string(root), [&] {
    GS_NCCL(ncclBroadcast(buf, buf, count, type, root, comm_, stream_->get()));
  });
}

void NcclCommunicator::barrier() {
  flush_p2p();
  control_->barrier();
}

void* NcclCommunicator::scratch(std::size_t bytes) {
  scratch_.reserve(bytes);
  return scratch_.get();
}

}  // namespace gradsync
