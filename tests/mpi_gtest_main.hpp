// gradsync/tests/mpi_gtest_main.hpp — the main() of the GoogleTest binaries that run under
// mpirun (tests/CMakeLists.txt: gradsync_add_mpi_test).
//
// Every rank runs every test against one live MpiCommunicator, handed to `bind` before the
// tests and taken back (bind(nullptr)) after them, before it goes: a test file keeps it in
// its global and frees there what it built on it. Rank 0 prints GoogleTest's report; the other ranks print
// only their failures, tagged with the rank. The exit status is 1 when a test failed on
// any rank, so ctest sees one verdict for the job.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <functional>

#include "comm/mpi_comm.hpp"

namespace gradsync::test_support {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }

 private:
  int rank_;
};

inline int run_mpi_gtests(int argc, char** argv, const char* name,
                          const std::function<void(MpiCommunicator*)>& bind) {
  MpiRuntime mpi(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  int failed = 0;
  {
    MpiCommunicator comm;
    bind(&comm);
    failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
    bind(nullptr);
  }
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) std::printf("%s on %d rank(s): %s\n", name, size, any_failed ? "FAILED on some rank" : "all ranks passed");
  return any_failed;
}

}  // namespace gradsync::test_support
