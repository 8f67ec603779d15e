// gradsync/comm/shared_buffer.hpp — buffers in a node's shared memory that a collective can
// read in place on every rank ("registered" buffers).
//
// Purpose: a shared-memory all-reduce (algos/shm.cpp) on ordinary buffers must first copy
//   each rank's input into a shared segment, because a peer cannot read another process's
//   private memory. When the caller's buffers already live in shared memory, every rank
//   can sum its part straight from its peers' buffers and copy the finished parts straight
//   out of them: the copy-in and the publication copy go away. This is the host analog of
//   NCCL's user buffer registration (ncclMemAlloc + ncclCommRegister) and of MPI_Alloc_mem
//   buffers that an MPI's shared-memory collectives read in place.
// Approach: SharedBuffer::allocate is collective over a Communicator whose ranks share one
//   node; it maps one shared segment (Communicator::allocate_shared) and registers the
//   buffer under (communicator, id), the id agreed on by the ranks at allocation, so the
//   same buffer has the same id on every rank. A buffer must not outlive its communicator.
//   find_shared answers whether a range lies in a registered buffer of that communicator;
//   shared_by_id gives, on any rank, the mapping of a peer's copy.
// Use case: gradsync-bench's send and receive buffers and gradsync-train's host buckets
//   (--buffers shared, their default on one node); any caller that owns its buffers for the
//   life of a communicator. A full /dev/shm is an Error naming --buffers private, the way
//   out in both programs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "comm/communicator.hpp"

namespace gradsync {

class SharedBuffer {
 public:
  // Collective over comm: bytes per rank (every rank the same). nullptr on every rank when
  // the ranks do not share one node (or the backend cannot map peers' memory).
  static std::unique_ptr<SharedBuffer> allocate(Communicator& comm, std::size_t bytes);
  ~SharedBuffer();  // unregisters; collective (frees the segment) like the allocation
  SharedBuffer(const SharedBuffer&) = delete;
  SharedBuffer& operator=(const SharedBuffer&) = delete;

  void* data() { return seg_->part(rank_); }
  std::size_t bytes() const { return bytes_; }
  std::uint64_t id() const { return id_; }
  // Rank `rank`'s copy of this buffer, mapped into this process (64-byte aligned).
  const void* peer(int rank) const { return seg_->part(rank); }

 private:
  SharedBuffer(const Communicator& comm, std::unique_ptr<SharedSegment> seg, std::size_t bytes, std::uint64_t id,
               int rank);
  const Communicator* comm_;
  std::unique_ptr<SharedSegment> seg_;
  std::size_t bytes_;
  std::uint64_t id_;
  int rank_;
};

// Where [p, p + bytes) lies in a registered buffer of `comm` on this rank.
struct SharedRef {
  const SharedBuffer* buffer = nullptr;  // nullptr: not in one
  std::size_t offset = 0;
};
SharedRef find_shared(const Communicator& comm, const void* p, std::size_t bytes);
// The buffer of `comm` registered under `id`; nullptr when none.
const SharedBuffer* shared_by_id(const Communicator& comm, std::uint64_t id);

}  // namespace gradsync
