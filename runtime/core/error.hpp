// gradsync/core/error.hpp — the project's exception types and check macros.
//
// Inside gradsync, failures are exceptions. Every message says *where* (rank and host,
// once the communicator has told the core who this process is), *what* (the call or the
// option) and *why* (the library's own error string, the offending values).
// Programs catch at main(), print one line, and exit non-zero (2 for usage errors).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace gradsync {

// Something went wrong at run time (a library call failed, a peer vanished, a file is bad).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// The user asked for something impossible: unknown option value, bad size, bad spec.
// Programs exit with status 2 on these, before any communication where possible.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& what) : Error(what) {}
};

// A collective or point-to-point wait ran past GRADSYNC_TIMEOUT_S.
class TimeoutError : public Error {
 public:
  explicit TimeoutError(const std::string& what) : Error(what) {}
};

// Who this process is, for messages and logs. Set once by the communicator layer;
// before that, rank is -1 and messages carry the host name only.
void set_process_identity(int rank, int nranks);
int process_rank();
int process_nranks();
const std::string& process_host();

// "rank 3/8 on node07" (or "node07" before the communicator exists).
std::string where();

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace gradsync

// GS_CHECK(cond, parts...): throw gradsync::Error with location and the streamed parts.
#define GS_CHECK(cond, ...)                                                              \
  do {                                                                                   \
    if (!(cond))                                                                         \
      throw ::gradsync::Error(::gradsync::detail::concat(                                \
          ::gradsync::where(), ": ", __VA_ARGS__, " [" #cond " failed at ", __FILE__, ":", \
          __LINE__, "]"));                                                               \
  } while (0)

// GS_USAGE_CHECK(cond, parts...): refuse a user's request (exit status 2 at main).
#define GS_USAGE_CHECK(cond, ...)                                                   \
  do {                                                                              \
    if (!(cond)) throw ::gradsync::UsageError(::gradsync::detail::concat(__VA_ARGS__)); \
  } while (0)

// GS_CHECK_EQ(a, b, parts...): like GS_CHECK, printing both operands.
#define GS_CHECK_EQ(a, b, ...)                                                            \
  do {                                                                                    \
    const auto& gs_a_ = (a);                                                              \
    const auto& gs_b_ = (b);                                                              \
    if (!(gs_a_ == gs_b_))                                                                \
      throw ::gradsync::Error(::gradsync::detail::concat(                                 \
          ::gradsync::where(), ": ", __VA_ARGS__, " (" #a " = ", gs_a_, ", " #b " = ", gs_b_, \
          ") at ", __FILE__, ":", __LINE__));                                             \
  } while (0)
