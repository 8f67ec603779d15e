#include "comm/shared_buffer.hpp"

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace gradsync {

namespace {

// The registered buffers of every communicator, and each communicator's next id.
struct Registry {
  std::mutex mu;
  std::map<const Communicator*, std::vector<const SharedBuffer*>> buffers;
  std::map<const Communicator*, std::uint64_t> next_id;
};
Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

SharedBuffer::SharedBuffer(const Communicator& comm, std::unique_ptr<SharedSegment> seg, std::size_t bytes,
                           std::uint64_t id, int rank)
    : comm_(&comm), seg_(std::move(seg)), bytes_(bytes), id_(id), rank_(rank) {}

std::unique_ptr<SharedBuffer> SharedBuffer::allocate(Communicator& comm, std::size_t bytes) {
  std::unique_ptr<SharedSegment> seg;
  try {
    seg = comm.allocate_shared(bytes);
  } catch (const Error& e) {
    // Open MPI maps the window in a file under osc_sm_backing_directory (/dev/shm): a
    // container's 64 MiB /dev/shm holds no large buffers.
    throw Error(where() + ": --buffers shared: the node's shared memory cannot map a buffer of " +
                std::to_string(bytes) + " bytes per rank (Open MPI maps it under osc_sm_backing_directory, /dev/shm "
                "by default: too small?); --buffers private keeps the buffers in each process's own memory [" +
                e.what() + "]");
  }
  if (!seg) return nullptr;
  Registry& reg = registry();
  // The id is agreed on (allocation is collective anyway): the largest next id of the
  // ranks, so it is new on every rank even where an earlier communicator at the same
  // address counted differently on some ranks.
  std::int64_t mine = 0;
  {
    std::lock_guard<std::mutex> lock(reg.mu);
    mine = static_cast<std::int64_t>(reg.next_id[&comm]);
  }
  const auto id = static_cast<std::uint64_t>(comm.max_int64(mine));
  std::unique_ptr<SharedBuffer> b(new SharedBuffer(comm, std::move(seg), bytes, id, comm.rank()));
  std::lock_guard<std::mutex> lock(reg.mu);
  reg.next_id[&comm] = id + 1;
  reg.buffers[&comm].push_back(b.get());
  return b;
}

SharedBuffer::~SharedBuffer() {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  auto it = reg.buffers.find(comm_);
  if (it == reg.buffers.end()) return;
  std::erase(it->second, this);
  if (it->second.empty()) reg.buffers.erase(it);
}

SharedRef find_shared(const Communicator& comm, const void* p, std::size_t bytes) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  auto it = reg.buffers.find(&comm);
  if (it == reg.buffers.end()) return {};
  const auto q = reinterpret_cast<std::uintptr_t>(p);
  for (const SharedBuffer* b : it->second) {
    const auto base = reinterpret_cast<std::uintptr_t>(b->peer(comm.rank()));
    if (q >= base && bytes <= b->bytes() && q - base <= b->bytes() - bytes) return {b, q - base};
  }
  return {};
}

const SharedBuffer* shared_by_id(const Communicator& comm, std::uint64_t id) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  auto it = reg.buffers.find(&comm);
  if (it == reg.buffers.end()) return nullptr;
  for (const SharedBuffer* b : it->second)
    if (b->id() == id) return b;
  return nullptr;
}

}  // namespace gradsync
