#include "core/stale_shm.hpp"

#include <dirent.h>
#include <ftw.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <set>
#include <string>

namespace gradsync {

namespace {

std::string real_dir(const std::string& dir) {
  char buf[PATH_MAX];
  return ::realpath(dir.c_str(), buf) ? std::string(buf) : dir;
}

std::string host_name() {
  char host[HOST_NAME_MAX + 1] = {0};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  std::string h(host);
  if (const auto dot = h.find('.'); dot != std::string::npos) h.resize(dot);
  return h;
}

double age_s(const struct stat& st) { return static_cast<double>(std::time(nullptr) - st.st_mtime); }

// The entries of dir whose name `name_ok` accepts, of file type `type` (S_IFREG, S_IFDIR;
// links are not followed), owned by this user and at least min_age_s old (mtime): the
// candidates both sweeps then check for mappings.
template <typename NameOk>
std::vector<std::string> old_own_entries(const std::string& dir, NameOk&& name_ok, mode_t type, double min_age_s) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (!name_ok(name)) continue;
    const std::string path = dir + "/" + name;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || (st.st_mode & S_IFMT) != type || st.st_uid != ::geteuid() ||
        age_s(st) < min_age_s)
      continue;
    out.push_back(path);
  }
  ::closedir(d);
  return out;
}

// The files under dir/prefix* that some process maps (the path field of /proc/<pid>/maps;
// a mapping of a file unlinked since reads "<path> (deleted)" and names no file here).
std::set<std::string> mapped_paths(const std::string& dir, const std::string& prefix) {
  std::set<std::string> out;
  const std::string want = dir + "/" + prefix;
  DIR* proc = ::opendir("/proc");
  if (!proc) return out;
  while (const dirent* e = ::readdir(proc)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream maps(std::string("/proc/") + e->d_name + "/maps");
    std::string line;
    while (std::getline(maps, line)) {
      const auto at = line.find(want);
      if (at != std::string::npos) out.insert(line.substr(at));
    }
  }
  ::closedir(proc);
  return out;
}

}  // namespace

std::string vader_segment_prefix() { return "vader_segment." + host_name() + "."; }

std::string vader_backing_directory() {
  const char* d = std::getenv("OMPI_MCA_btl_vader_backing_directory");
  return d && *d ? std::string(d) : std::string("/dev/shm");
}

std::vector<std::string> remove_stale_segments(const std::string& dir_in, const std::string& prefix, double min_age_s) {
  std::vector<std::string> removed;
  if (prefix.empty()) return removed;
  const std::string dir = real_dir(dir_in);
  // A segment's mtime is set when its job sizes it, at start-up.
  const std::vector<std::string> candidates = old_own_entries(
      dir, [&](const std::string& name) { return name.compare(0, prefix.size(), prefix) == 0; }, S_IFREG, min_age_s);
  if (candidates.empty()) return removed;
  const std::set<std::string> mapped = mapped_paths(dir, prefix);
  for (const auto& path : candidates)
    if (!mapped.count(path) && ::unlink(path.c_str()) == 0) removed.push_back(path);
  return removed;
}

std::string ompi_session_top_dir() {
  std::string base = "/tmp";
  for (const char* var : {"OMPI_MCA_orte_tmpdir_base", "TMPDIR"}) {
    const char* v = std::getenv(var);
    if (v && *v) {
      base = v;
      break;
    }
  }
  return base + "/ompi." + host_name() + "." + std::to_string(::geteuid());
}

std::vector<std::string> remove_stale_session_dirs(const std::string& top_in, double min_age_s) {
  std::vector<std::string> removed;
  const std::string top = real_dir(top_in);
  auto mpirun_gone = [](const std::string& name) {  // pid.<N> of no such process
    if (name.compare(0, 4, "pid.") != 0 || name.size() == 4 ||
        name.find_first_not_of("0123456789", 4) != std::string::npos || name.size() > 14)
      return false;
    const long pid = std::stol(name.substr(4));
    // Gone: no such process (EPERM means alive under another user).
    return pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
  };
  const std::vector<std::string> candidates = old_own_entries(top, mpirun_gone, S_IFDIR, min_age_s);
  if (candidates.empty()) return removed;
  const std::set<std::string> mapped = mapped_paths(top, "pid.");
  for (const auto& path : candidates) {
    bool in_use = false;
    for (const auto& m : mapped) in_use = in_use || m.compare(0, path.size() + 1, path + "/") == 0;
    if (in_use) continue;
    // Depth first, not following links: every file, then its directory.
    const int rc = ::nftw(
        path.c_str(),
        [](const char* p, const struct stat*, int type, FTW*) {
          return (type == FTW_DP ? ::rmdir(p) : ::unlink(p)) == 0 || errno == ENOENT ? 0 : 1;
        },
        16, FTW_DEPTH | FTW_PHYS);
    if (rc == 0) removed.push_back(path);
  }
  return removed;
}

}  // namespace gradsync
