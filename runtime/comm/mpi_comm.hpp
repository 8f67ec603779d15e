// gradsync/comm/mpi_comm.hpp — Communicator over MPI on host memory.
//
// MpiRuntime owns MPI_Init/MPI_Finalize and puts MPI_ERRORS_RETURN on the world so every
// failing call comes back to GS_MPI, which throws with rank, host, call and MPI's own
// error string. Non-blocking calls are polled (MPI_Testall) against GRADSYNC_TIMEOUT_S.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"

namespace gradsync {

// Throws gradsync::Error if an MPI call does not return MPI_SUCCESS.
void mpi_check(int rc, const char* call, const char* file, int line);
#define GS_MPI(call) ::gradsync::mpi_check((call), #call, __FILE__, __LINE__)

class MpiRuntime {
 public:
  // Initialises MPI (thread level MULTIPLE requested: the reducer has a communication thread).
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;
  int thread_level() const { return provided_; }
  // Ends every rank of the job with `code` (used by main() after printing an error).
  [[noreturn]] static void abort(int code);

 private:
  int provided_ = 0;
};

class MpiCommunicator final : public Communicator {
 public:
  // Wraps `comm` (MPI_COMM_WORLD is not freed; others are owned and freed).
  explicit MpiCommunicator(MPI_Comm comm = MPI_COMM_WORLD);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  int node_id() const override { return node_id_; }
  int node_count() const override { return node_count_; }
  std::string backend() const override { return "mpi"; }
  std::string hostname() const override { return hostname_; }
  MPI_Comm handle() const { return comm_; }

  Request isend(const void* buf, std::size_t bytes, int peer, int tag) override;
  Request irecv(void* buf, std::size_t bytes, int peer, int tag) override;

  void allreduce(const void* sendbuf, void* recvbuf, std::size_t count, DType t, RedOp op) override;
  void reduce_scatter(const void* sendbuf, void* recvbuf, std::size_t recvcount, DType t, RedOp op) override;
  void allgather(const void* sendbuf, void* recvbuf, std::size_t sendcount, DType t) override;
  void alltoall(const void* sendbuf, void* recvbuf, std::size_t count, DType t) override;
  void broadcast(void* buf, std::size_t count, DType t, int root) override;
  void barrier() override;

  double max_double(double v) override;
  double sum_double(double v) override;
  std::int64_t min_int64(std::int64_t v) override;
  std::int64_t max_int64(std::int64_t v) override;
  std::vector<std::string> allgather_strings(const std::string& s) override;
  void broadcast_bytes(std::vector<char>& bytes, int root) override;

  std::unique_ptr<Communicator> split(int color, int key) override;
  std::unique_ptr<SharedSegment> allocate_shared(std::size_t bytes_per_rank) override;
  PeerLink link_to(int peer) const override;

 private:
  // Wait for a native non-blocking collective with the time-out.
  void wait_native(MPI_Request& req, const std::string& what);
  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0, size_ = 1;
  int local_rank_ = 0, local_size_ = 1, node_id_ = 0, node_count_ = 1;
  std::vector<int> leader_of_;  // per rank: lowest global rank on its node (same node <=> equal)
  std::string hostname_;
};

}  // namespace gradsync
