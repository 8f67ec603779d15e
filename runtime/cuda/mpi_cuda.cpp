#include "cuda/mpi_cuda.hpp"

#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

namespace gradsync {

std::string mpi_cuda_aware_text() {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1 ? "yes" : "no (CUDA support disabled at run time)";
#elif defined(MPIX_CUDA_AWARE_SUPPORT)
  return "no (MPI built without CUDA support)";
#else
  return "unknown (MPI has no MPIX_Query_cuda_support); assumed no";
#endif
}

bool mpi_cuda_aware() { return mpi_cuda_aware_text() == "yes"; }

}  // namespace gradsync
