// gradsync/bench/p2p_algos.hpp — two textbook collectives over point-to-point, so the bench
// can put the library's MPI_Alltoall and MPI_Bcast next to a plain implementation (as it does
// for all-reduce with the algorithm registry). Deliberately simple: no pipelining.
//
//   pairwise all-to-all   step s = 1..n-1: send block (r+s) to rank r+s, receive block (r-s)
//                         from rank r-s (Thakur, Rabenseifner & Gropp 2005, the long-message
//                         algorithm). In place, the input is first copied to scratch.
//   binomial broadcast    ranks relative to the root; a rank receives once from the rank that
//                         differs in its lowest set bit, then sends to rank + 2^k for each
//                         lower bit k, highest first: ceil(log2 n) rounds.
//
// Tags 2000..2099 belong to these (runtime/algos uses 1000..1699).
#pragma once

#include <cstddef>
#include <memory>

#include "comm/communicator.hpp"

namespace gradsync::bench {

inline constexpr int kTagPairwiseAlltoall = 2000;
inline constexpr int kTagBinomialBroadcast = 2001;
inline constexpr int kTagPingPong = 2002;
inline constexpr int kTagSendrecv = 2003;

class PairwiseAlltoall {
 public:
  // `block_bytes` to each peer; both buffers hold n blocks. send == recv means in place.
  void run(Communicator& comm, const void* send, void* recv, std::size_t block_bytes);

 private:
  std::unique_ptr<char[]> scratch_;  // in place: a copy of the input, grown on demand
  std::size_t scratch_bytes_ = 0;
};

void binomial_broadcast(Communicator& comm, void* buf, std::size_t bytes, int root);

}  // namespace gradsync::bench
