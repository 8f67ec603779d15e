// gradsync/tools/self_comm.hpp — a one-rank, in-process Communicator and all-reduce.
//
// Purpose: run the real Compressor::reduce() code path of a compressor at world size 1
// without MPI (no mpirun, no MPI_Init), so a tool can compare our compressors with a
// reference (PyTorch's DDP hooks at world size 1) on any machine.
// Semantics: every collective over one rank is the identity on the data (Sum and Avg of
// one contribution are the contribution itself; Min/Max too): send -> recv copies, in-place
// calls do nothing. Point to point is to self only: isend copies the message into a
// mailbox, irecv completes once a message of the same tag and size is there (in posting
// order). Anything addressed to another rank is a bug and throws.
#pragma once

#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

#include "algos/allreduce.hpp"
#include "comm/communicator.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"

namespace gradsync::tools {

class SelfCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  int node_id() const override { return 0; }
  int node_count() const override { return 1; }
  std::string backend() const override { return "self"; }
  std::string hostname() const override {
    char h[256] = {0};
    if (gethostname(h, sizeof h - 1) != 0) return "unknown";
    return h;
  }

  Request isend(const void* buf, std::size_t bytes, int peer, int tag) override {
    GS_CHECK(peer == 0, "SelfCommunicator: send to rank ", peer, " of a 1-rank world");
    const char* p = static_cast<const char*>(buf);
    box_->push_back({tag, std::vector<char>(p, p + bytes)});
    return Request(std::make_unique<Done>("send of " + std::to_string(bytes) + " bytes to self"));
  }
  Request irecv(void* buf, std::size_t bytes, int peer, int tag) override {
    GS_CHECK(peer == 0, "SelfCommunicator: receive from rank ", peer, " of a 1-rank world");
    return Request(std::make_unique<Recv>(box_, buf, bytes, tag));
  }

  void allreduce(const void* sendbuf, void* recvbuf, std::size_t count, DType t, RedOp) override {
    copy(sendbuf, recvbuf, count * dtype_size(t));
  }
  void reduce_scatter(const void* sendbuf, void* recvbuf, std::size_t recvcount, DType t, RedOp) override {
    copy(sendbuf, recvbuf, recvcount * dtype_size(t));
  }
  void allgather(const void* sendbuf, void* recvbuf, std::size_t sendcount, DType t) override {
    copy(sendbuf, recvbuf, sendcount * dtype_size(t));
  }
  void alltoall(const void* sendbuf, void* recvbuf, std::size_t count, DType t) override {
    copy(sendbuf, recvbuf, count * dtype_size(t));
  }
  void broadcast(void*, std::size_t, DType, int root) override {
    GS_CHECK(root == 0, "SelfCommunicator: broadcast from rank ", root);
  }
  void barrier() override {}

  double max_double(double v) override { return v; }
  double sum_double(double v) override { return v; }
  std::int64_t min_int64(std::int64_t v) override { return v; }
  std::int64_t max_int64(std::int64_t v) override { return v; }
  std::vector<std::string> allgather_strings(const std::string& s) override { return {s}; }
  void broadcast_bytes(std::vector<char>&, int root) override {
    GS_CHECK(root == 0, "SelfCommunicator: broadcast from rank ", root);
  }
  std::unique_ptr<Communicator> split(int, int) override { return std::make_unique<SelfCommunicator>(); }

 private:
  struct Message {
    int tag;
    std::vector<char> data;
  };
  using Box = std::deque<Message>;

  class Done final : public Request::Impl {
   public:
    explicit Done(std::string d) : d_(std::move(d)) {}
    bool test() override { return true; }
    std::string describe() const override { return d_; }

   private:
    std::string d_;
  };
  class Recv final : public Request::Impl {
   public:
    Recv(std::shared_ptr<Box> box, void* buf, std::size_t bytes, int tag)
        : box_(std::move(box)), buf_(buf), bytes_(bytes), tag_(tag) {}
    bool test() override {
      for (auto it = box_->begin(); it != box_->end(); ++it) {
        if (it->tag != tag_) continue;
        GS_CHECK(it->data.size() == bytes_, "SelfCommunicator: message of ", it->data.size(),
                 " bytes for a receive of ", bytes_, " (tag ", tag_, ")");
        if (bytes_) std::memcpy(buf_, it->data.data(), bytes_);
        box_->erase(it);
        return true;
      }
      return false;
    }
    std::string describe() const override {
      return "recv of " + std::to_string(bytes_) + " bytes from self (tag " + std::to_string(tag_) + ")";
    }

   private:
    std::shared_ptr<Box> box_;
    void* buf_;
    std::size_t bytes_;
    int tag_;
  };

  static void copy(const void* src, void* dst, std::size_t bytes) {
    if (src != dst && bytes) std::memmove(dst, src, bytes);
  }
  std::shared_ptr<Box> box_ = std::make_shared<Box>();
};

// The all-reduce of a 1-rank world: the identity (a copy when not in place).
class SelfAllreduce final : public AllreduceAlgorithm {
 public:
  std::string name() const override { return "self"; }
  void run(const void* sendbuf, void* recvbuf, std::size_t count, DType t, RedOp) override {
    if (sendbuf != recvbuf && count) std::memmove(recvbuf, sendbuf, count * dtype_size(t));
  }
};

}  // namespace gradsync::tools
