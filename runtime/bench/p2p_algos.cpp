#include "bench/p2p_algos.hpp"

#include <cstring>
#include <vector>

namespace gradsync::bench {

void PairwiseAlltoall::run(Communicator& comm, const void* send, void* recv, std::size_t block_bytes) {
  const int n = comm.size(), r = comm.rank();
  const std::size_t total = block_bytes * static_cast<std::size_t>(n);
  const char* src = static_cast<const char*>(send);
  char* dst = static_cast<char*>(recv);
  if (send == recv && total > 0) {
    // Block (r-s) arrives before block (r-s) has been sent to rank r-s: keep a copy.
    if (scratch_bytes_ < total) {
      scratch_.reset(new char[total]);
      scratch_bytes_ = total;
    }
    std::memcpy(scratch_.get(), send, total);
    src = scratch_.get();
  }
  // My own block stays local.
  if (src != dst && block_bytes > 0)
    std::memcpy(dst + static_cast<std::size_t>(r) * block_bytes, src + static_cast<std::size_t>(r) * block_bytes,
                block_bytes);
  if (block_bytes == 0) return;
  for (int s = 1; s < n; ++s) {
    const int to = (r + s) % n, from = (r - s + n) % n;
    comm.sendrecv(src + static_cast<std::size_t>(to) * block_bytes, block_bytes, to,
                  dst + static_cast<std::size_t>(from) * block_bytes, block_bytes, from, kTagPairwiseAlltoall);
  }
}

void binomial_broadcast(Communicator& comm, void* buf, std::size_t bytes, int root) {
  const int n = comm.size();
  if (n == 1 || bytes == 0) return;
  const int vr = (comm.rank() - root + n) % n;  // rank relative to the root
  // Receive from the parent: clear my lowest set bit.
  int mask = 1;
  while (mask < n) {
    if (vr & mask) {
      comm.recv(buf, bytes, ((vr - mask) + root) % n, kTagBinomialBroadcast);
      break;
    }
    mask <<= 1;
  }
  // Send to the children vr + 2^k for every k below that bit, largest subtree first.
  std::vector<Request> sends;
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (vr + mask < n) sends.push_back(comm.isend(buf, bytes, (vr + mask + root) % n, kTagBinomialBroadcast));
  comm.wait_all(sends.data(), sends.size());
}

}  // namespace gradsync::bench
