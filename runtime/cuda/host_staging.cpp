#include "cuda/host_staging.hpp"

#include "core/error.hpp"

namespace gradsync {

// ---- HostStaging -----------------------------------------------------------------------------

void* HostStaging::host(int slot, std::size_t bytes) {
  GS_CHECK(slot >= 0 && slot < kSlots, "staging slot ", slot, " out of range");
  PinnedBuffer& b = bufs_[static_cast<std::size_t>(slot)];
  if (b.get() == nullptr || b.bytes() < bytes) b.reserve(bytes);
  return b.get();
}

// ---- HostStagedAllreduce ---------------------------------------------------------------------

void HostStagedAllreduce::run(const void* sendbuf, void* recvbuf, std::size_t count, DType t, RedOp op) {
  const std::size_t bytes = count * dtype_size(t);
  void* h = staging_.host(0, bytes);
  staging_.to_host(h, sendbuf, bytes);
  host_->run(h, h, count, t, op);  // every registry algorithm works in place
  staging_.to_device(recvbuf, h, bytes);
}

std::unique_ptr<AllreduceAlgorithm> make_host_staged_allreduce(const std::string& name, Communicator& host_comm,
                                                               const AlgoOptions& opts) {
  return std::make_unique<HostStagedAllreduce>(make_allreduce(name, host_comm, opts));
}

// ---- HostStagedCommunicator ------------------------------------------------------------------

namespace {

// A point-to-point transfer through a pinned buffer it owns (returned to the pool at the end).
class StagedRequest final : public Request::Impl {
 public:
  StagedRequest(HostStagedCommunicator& comm, PinnedBuffer pinned, Request inner, void* dev_dst, std::size_t bytes)
      : comm_(comm), pinned_(std::move(pinned)), inner_(std::move(inner)), dev_dst_(dev_dst), bytes_(bytes) {}
  ~StagedRequest() override {
    // An unfinished MPI request still owns the pinned memory: drop it with the buffer.
    if (!inner_.active()) comm_.give_back_pinned(std::move(pinned_));
  }
  bool test() override {
    if (inner_.active()) {
      if (!inner_.impl()->test()) return false;
      description_ = inner_.impl()->describe();
      inner_.reset();
      if (dev_dst_) comm_.staging().to_device(dev_dst_, pinned_.get(), bytes_);  // a receive lands
    }
    return true;
  }
  std::string describe() const override {
    return (inner_.active() ? inner_.impl()->describe() : description_) + " (host-staged)";
  }
  void cancel() override {
    if (inner_.active()) inner_.impl()->cancel();
  }

 private:
  HostStagedCommunicator& comm_;
  PinnedBuffer pinned_;
  mutable Request inner_;  // declared after pinned_: an unfinished MPI request ends first
  void* dev_dst_;  // receives: where the bytes go once they arrived
  std::size_t bytes_;
  std::string description_;
};

}  // namespace

HostStagedCommunicator::HostStagedCommunicator(Communicator& host) : host_(&host) {}

HostStagedCommunicator::HostStagedCommunicator(std::unique_ptr<Communicator> owned)
    : owned_(std::move(owned)), host_(owned_.get()) {}

HostStagedCommunicator::~HostStagedCommunicator() = default;

PinnedBuffer HostStagedCommunicator::take_pinned(std::size_t bytes) {
  for (std::size_t i = 0; i < pool_.size(); ++i) {
    if (pool_[i].bytes() >= bytes) {
      PinnedBuffer b = std::move(pool_[i]);
      pool_.erase(pool_.begin() + static_cast<std::ptrdiff_t>(i));
      return b;
    }
  }
  // None large enough: grow a pooled one instead of adding another (a size sweep would
  // otherwise keep one pinned buffer per size).
  if (!pool_.empty()) {
    PinnedBuffer b = std::move(pool_.back());
    pool_.pop_back();
    b.reserve(bytes);
    return b;
  }
  return PinnedBuffer(bytes);
}

void HostStagedCommunicator::give_back_pinned(PinnedBuffer buf) {
  constexpr std::size_t kMaxPooled = 64;  // bounded: a burst of requests does not pin memory forever
  if (buf.get() && pool_.size() < kMaxPooled) pool_.push_back(std::move(buf));
}

Request HostStagedCommunicator::isend(const void* buf, std::size_t bytes, int peer, int tag) {
  PinnedBuffer pinned = take_pinned(bytes);
  staging_.to_host(pinned.get(), buf, bytes);
  Request inner = host_->isend(pinned.get(), bytes, peer, tag);
  return Request(std::make_unique<StagedRequest>(*this, std::move(pinned), std::move(inner), nullptr, bytes));
}

Request HostStagedCommunicator::irecv(void* buf, std::size_t bytes, int peer, int tag) {
  PinnedBuffer pinned = take_pinned(bytes);
  Request inner = host_->irecv(pinned.get(), bytes, peer, tag);
  return Request(std::make_unique<StagedRequest>(*this, std::move(pinned), std::move(inner), buf, bytes));
}

void HostStagedCommunicator::allreduce(const void* sendbuf, void* recvbuf, std::size_t count, DType t, RedOp op) {
  const std::size_t bytes = count * dtype_size(t);
  void* h = staging_.host(0, bytes);
  staging_.to_host(h, sendbuf, bytes);
  host_->allreduce(h, h, count, t, op);
  staging_.to_device(recvbuf, h, bytes);
}

void HostStagedCommunicator::reduce_scatter(const void* sendbuf, void* recvbuf, std::size_t recvcount, DType t,
                                            RedOp op) {
  // In place on the host: the result is block 0 of the staging buffer (the interface's
  // in-place convention, which the copy back honours for sendbuf == recvbuf too).
  const std::size_t block = recvcount * dtype_size(t);
  const std::size_t total = block * static_cast<std::size_t>(size());
  void* h = staging_.host(0, total);
  staging_.to_host(h, sendbuf, total);
  host_->reduce_scatter(h, h, recvcount, t, op);
  staging_.to_device(recvbuf, h, block);
}

void HostStagedCommunicator::allgather(const void* sendbuf, void* recvbuf, std::size_t sendcount, DType t) {
  const std::size_t block = sendcount * dtype_size(t);
  const std::size_t total = block * static_cast<std::size_t>(size());
  char* h = static_cast<char*>(staging_.host(0, total));
  char* mine = h + static_cast<std::size_t>(rank()) * block;
  staging_.to_host(mine, sendbuf, block);
  host_->allgather(mine, h, sendcount, t);  // the host communicator's in-place form
  staging_.to_device(recvbuf, h, total);
}

void HostStagedCommunicator::alltoall(const void* sendbuf, void* recvbuf, std::size_t count, DType t) {
  const std::size_t total = count * dtype_size(t) * static_cast<std::size_t>(size());
  void* in = staging_.host(0, total);
  void* out = staging_.host(1, total);
  staging_.to_host(in, sendbuf, total);
  host_->alltoall(in, out, count, t);
  staging_.to_device(recvbuf, out, total);
}

void HostStagedCommunicator::broadcast(void* buf, std::size_t count, DType t, int root) {
  const std::size_t bytes = count * dtype_size(t);
  void* h = staging_.host(0, bytes);
  if (rank() == root) staging_.to_host(h, buf, bytes);
  host_->broadcast(h, count, t, root);
  if (rank() != root) staging_.to_device(buf, h, bytes);
}

std::unique_ptr<Communicator> HostStagedCommunicator::split(int color, int key) {
  return std::unique_ptr<Communicator>(new HostStagedCommunicator(host_->split(color, key)));
}

}  // namespace gradsync
