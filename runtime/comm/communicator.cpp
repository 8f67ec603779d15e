#include "comm/communicator.hpp"

#include <sched.h>

#include "core/error.hpp"
#include "core/params.hpp"
#include "core/timer.hpp"

namespace gradsync {

void Communicator::wait_all(Request* reqs, std::size_t n) {
  const double timeout = comm_timeout_s();
  const double start = now_s();
  std::size_t remaining = 0;
  for (std::size_t i = 0; i < n; ++i) remaining += reqs[i].active() ? 1 : 0;
  for (long spin = 0; remaining > 0; ++spin) {
    for (std::size_t i = 0; i < n; ++i) {
      if (reqs[i].active() && reqs[i].impl()->test()) {
        reqs[i].reset();
        --remaining;
      }
    }
    if (remaining == 0) return;
    progress();
    if (spin > 2000) sched_yield();
    if (timeout > 0 && (spin & 255) == 0 && now_s() - start > timeout) {
      std::string pending;
      for (std::size_t i = 0; i < n; ++i)
        if (reqs[i].active()) {
          if (!pending.empty()) pending += "; ";
          pending += reqs[i].impl()->describe();
        }
      throw TimeoutError(where() + ": timed out after " + std::to_string(static_cast<int>(timeout)) +
                         " s (GRADSYNC_TIMEOUT_S) waiting for " + pending + " — a peer may have died or be stuck");
    }
  }
}

void Communicator::sendrecv(const void* sendbuf, std::size_t sendbytes, int dst, void* recvbuf,
                            std::size_t recvbytes, int src, int tag) {
  Request r[2] = {irecv(recvbuf, recvbytes, src, tag), isend(sendbuf, sendbytes, dst, tag)};
  wait_all(r, 2);
}

void Communicator::send(const void* buf, std::size_t bytes, int peer, int tag) {
  Request r = isend(buf, bytes, peer, tag);
  wait(r);
}

void Communicator::recv(void* buf, std::size_t bytes, int peer, int tag) {
  Request r = irecv(buf, bytes, peer, tag);
  wait(r);
}

namespace {

void refuse_device_event(const Communicator& comm, const void* after, const char* op) {
  GS_CHECK(after == nullptr, op, " on the ", comm.backend(),
           " communicator cannot be ordered after a device event (host memory; complete the device work first)");
}

}  // namespace

Request Communicator::iallreduce(const void* sendbuf, void* recvbuf, std::size_t count, DType t, RedOp op,
                                 const void* after) {
  refuse_device_event(*this, after, "iallreduce");
  allreduce(sendbuf, recvbuf, count, t, op);
  return Request();
}

Request Communicator::iallgather(const void* sendbuf, void* recvbuf, std::size_t sendcount, DType t,
                                 const void* after) {
  refuse_device_event(*this, after, "iallgather");
  allgather(sendbuf, recvbuf, sendcount, t);
  return Request();
}

Request Communicator::ialltoall(const void* sendbuf, void* recvbuf, std::size_t count, DType t, const void* after) {
  refuse_device_event(*this, after, "ialltoall");
  alltoall(sendbuf, recvbuf, count, t);
  return Request();
}

void check_same_on_all_ranks(Communicator& comm, const std::string& what, const std::string& value) {
  const std::vector<std::string> all = comm.allgather_strings(value);
  for (int r = 1; r < comm.size(); ++r) {
    if (all[static_cast<std::size_t>(r)] != all[0]) {
      std::string differing;
      for (int q = 0; q < comm.size(); ++q)
        if (all[static_cast<std::size_t>(q)] != all[0]) {
          if (!differing.empty()) differing += ',';
          differing += std::to_string(q);
        }
      throw Error(where() + ": " + what + " differs across ranks: rank 0 has '" + all[0] + "' but rank(s) " +
                  differing + " have '" + all[static_cast<std::size_t>(r)] + "'");
    }
  }
}

}  // namespace gradsync
