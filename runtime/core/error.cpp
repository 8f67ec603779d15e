#include "core/error.hpp"

#include <unistd.h>

namespace gradsync {
namespace {
struct Identity {
  int rank = -1;
  int nranks = 0;
  std::string host;
  Identity() {
    char buf[256] = {0};
    if (gethostname(buf, sizeof(buf) - 1) == 0) host = buf;
    if (host.empty()) host = "unknown-host";
  }
};
Identity& identity() {
  static Identity id;
  return id;
}
}  // namespace

void set_process_identity(int rank, int nranks) {
  identity().rank = rank;
  identity().nranks = nranks;
}
int process_rank() { return identity().rank; }
int process_nranks() { return identity().nranks; }
const std::string& process_host() { return identity().host; }

std::string where() {
  const Identity& id = identity();
  if (id.rank < 0) return id.host;
  return "rank " + std::to_string(id.rank) + "/" + std::to_string(id.nranks) + " on " + id.host;
}

}  // namespace gradsync
