# tests/testbed/bench.cmake — which MPI program the script tests (testbed, slurm) run.
# gradsync-bench when the build has it; otherwise a tiny stand-in (gs_mpi_probe.c) that speaks
# the same options (--op pingpong -b -e -n -w --out) and prints the same nccl-tests table.
# Sets GS_SCRIPT_TEST_BENCH (a generator expression for the program's path).
if(TARGET gradsync-bench)
  set(GS_SCRIPT_TEST_BENCH $<TARGET_FILE:gradsync-bench>)
else()
  if(NOT TARGET gs_mpi_probe)
    find_package(MPI REQUIRED COMPONENTS C)
    add_executable(gs_mpi_probe ${PROJECT_SOURCE_DIR}/tests/testbed/gs_mpi_probe.c)
    target_include_directories(gs_mpi_probe SYSTEM PRIVATE ${HDF5_INCLUDE_DIRS})
    target_link_libraries(gs_mpi_probe PRIVATE MPI::MPI_C ${HDF5_C_LIBRARIES})
    set_target_properties(gs_mpi_probe PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  endif()
  set(GS_SCRIPT_TEST_BENCH $<TARGET_FILE:gs_mpi_probe>)
endif()
