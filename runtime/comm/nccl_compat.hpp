// gradsync/comm/nccl_compat.hpp — every difference between NCCL versions, in one place.
//
// The rest of the code calls these helpers and never tests NCCL_VERSION_CODE itself
// (nccl-tests keeps its nccl1_compat.h the same way). What differs:
//
//   feature                         since   without it
//   ncclSend / ncclRecv             2.7     refused at compile time (alltoall and p2p need them)
//   ncclCommGetAsyncError           2.4     (older than the p2p floor)
//   ncclAvg                         2.10    --redop avg refused with a message naming the version
//   ncclBfloat16                    2.10    bfloat16 refused likewise
//   ncclGetLastError                2.13    messages carry ncclGetErrorString only
//   ncclCommInitRankConfig          2.14    ncclCommInitRank (always blocking then)
//   NCCL_VERSION for minor > 8      2.9     the code scheme changed (2.8.4 = 2804, 2.10.3 = 21003)
//
// Compile-time availability follows the header; run-time availability is checked against
// the loaded library (ncclGetVersion), which may be older than the header it was built with.
#pragma once

#include <nccl.h>

#include <string>

#include "core/dtype.hpp"
#include "core/error.hpp"

#ifndef NCCL_VERSION
#define NCCL_VERSION(X, Y, Z) (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))
#endif
#ifndef NCCL_VERSION_CODE
#define NCCL_VERSION_CODE NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH)
#endif

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 7, 0)
#error "gradsync needs NCCL >= 2.7 (ncclSend/ncclRecv)"
#endif

#define GS_NCCL_HAS_AVG (NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0))
#define GS_NCCL_HAS_BF16 (NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0))
#define GS_NCCL_HAS_LAST_ERROR (NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0))
#define GS_NCCL_HAS_CONFIG (NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0))

namespace gradsync::nccl_compat {

// "2.28.9" from a version code of either scheme.
inline std::string version_text(int code) {
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? (code % 10000) / 100 : (code % 1000) / 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

// The loaded library's version code (ncclGetVersion), or the header's if that fails.
inline int runtime_version() {
  static const int version = [] {
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess || v <= 0) v = NCCL_VERSION_CODE;
    return v;
  }();
  return version;
}

inline std::string versions_text() {
  return "NCCL " + version_text(runtime_version()) + " (built with " + version_text(NCCL_VERSION_CODE) + ")";
}

// The library's own words for an error, plus its last detailed message where it keeps one.
inline std::string error_text(ncclResult_t rc, ncclComm_t comm) {
  std::string s = ncclGetErrorString(rc);
#if GS_NCCL_HAS_LAST_ERROR
  const char* last = ncclGetLastError(comm);
  if (last && *last) s += std::string("; last NCCL error: ") + last;
#else
  (void)comm;
#endif
  return s;
}

// True for the "still working" state of a non-blocking communicator (2.14+); ours are
// blocking, but ncclCommGetAsyncError may report it while a call is being set up.
inline bool in_progress(ncclResult_t state) {
#if GS_NCCL_HAS_CONFIG
  return state == ncclInProgress;
#else
  (void)state;
  return false;
#endif
}

// NCCL's element type for `t`. UsageError when the header or the library lacks it.
inline ncclDataType_t datatype(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::F16: return ncclFloat16;
    case DType::BF16:
#if GS_NCCL_HAS_BF16
      GS_USAGE_CHECK(runtime_version() >= NCCL_VERSION(2, 10, 0),
                     "bfloat16 needs NCCL >= 2.10, the loaded library is ", version_text(runtime_version()));
      return ncclBfloat16;
#else
      throw UsageError("bfloat16 needs NCCL >= 2.10; gradsync was built with NCCL " +
                       version_text(NCCL_VERSION_CODE));
#endif
  }
  throw UsageError("unknown element type for NCCL");
}

// NCCL's reduction for `op`. ncclAvg pre-multiplies every input by 1/n for floating types
// (then sums), so its result may differ from "sum, then scale once" in the last bits.
inline ncclRedOp_t redop(RedOp op) {
  switch (op) {
    case RedOp::Sum: return ncclSum;
    case RedOp::Avg:
#if GS_NCCL_HAS_AVG
      GS_USAGE_CHECK(runtime_version() >= NCCL_VERSION(2, 10, 0),
                     "--redop avg needs NCCL >= 2.10, the loaded library is ", version_text(runtime_version()));
      return ncclAvg;
#else
      throw UsageError("--redop avg needs NCCL >= 2.10 (ncclAvg); gradsync was built with NCCL " +
                       version_text(NCCL_VERSION_CODE));
#endif
  }
  throw UsageError("unknown reduction for NCCL");
}

// ncclCommInitRank in blocking mode. With 2.14+ the mode is set explicitly in the config,
// so NCCL_COMM_BLOCKING=0 in the environment cannot turn our calls asynchronous (every
// call of NcclCommunicator assumes ncclSuccess means "enqueued").
inline ncclResult_t init_rank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
#if GS_NCCL_HAS_CONFIG
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;
  return ncclCommInitRankConfig(comm, nranks, id, rank, &config);
#else
  return ncclCommInitRank(comm, nranks, id, rank);
#endif
}

}  // namespace gradsync::nccl_compat
