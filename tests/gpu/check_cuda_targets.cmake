# cmake -DFILES="a;b;..." -DBENCH=path -DWORK=dir -P check_cuda_targets.cmake
#
# This configuration has GRADSYNC_WITH_CUDA=ON: the CUDA test binaries must exist, and
# gradsync-bench must have been built with CUDA support — `--device cuda` is then either
# refused for want of a GPU (status 1, "no CUDA device found") or runs (status 0), but is
# never refused as an option of a build without CUDA (status 2, "built without CUDA").
foreach(f IN LISTS FILES)
  if(NOT EXISTS "${f}")
    message(FATAL_ERROR "CUDA target not built: ${f}")
  endif()
endforeach()
if(NOT EXISTS "${BENCH}")
  message(FATAL_ERROR "gradsync-bench not built: ${BENCH}")
endif()
file(MAKE_DIRECTORY "${WORK}")
execute_process(COMMAND "${BENCH}" --device cuda --algo nccl -b 8 -e 8 -n 1 -w 0 --out "${WORK}/probe.h5"
                WORKING_DIRECTORY "${WORK}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
if(err MATCHES "built without CUDA" OR rc EQUAL 2)
  message(FATAL_ERROR "gradsync-bench was built without CUDA support (status ${rc}): ${err}")
endif()
if(NOT (rc EQUAL 0 OR (rc EQUAL 1 AND err MATCHES "no CUDA device found")))
  message(FATAL_ERROR "gradsync-bench --device cuda: unexpected status ${rc}\n${out}\n${err}")
endif()
message(STATUS "CUDA targets built; gradsync-bench --device cuda: status ${rc}")
