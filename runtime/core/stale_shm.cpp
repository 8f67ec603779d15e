#include "core/stale_shm.hpp"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

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

std::string vader_segment_prefix() {
  char host[HOST_NAME_MAX + 1] = {0};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  std::string h(host);
  if (const auto dot = h.find('.'); dot != std::string::npos) h.resize(dot);
  return "vader_segment." + h + ".";
}

std::string vader_backing_directory() {
  const char* d = std::getenv("OMPI_MCA_btl_vader_backing_directory");
  return d && *d ? std::string(d) : std::string("/dev/shm");
}

std::vector<std::string> remove_stale_segments(const std::string& dir_in, const std::string& prefix, double min_age_s) {
  std::vector<std::string> removed;
  if (prefix.empty()) return removed;
  const std::string dir = real_dir(dir_in);
  std::vector<std::string> candidates;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return removed;
  const std::time_t now = std::time(nullptr);
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string path = dir + "/" + name;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) continue;
    if (static_cast<double>(now - st.st_mtime) < min_age_s) continue;  // set when the job sized it
    candidates.push_back(path);
  }
  ::closedir(d);
  if (candidates.empty()) return removed;
  const std::set<std::string> mapped = mapped_paths(dir, prefix);
  for (const auto& path : candidates)
    if (!mapped.count(path) && ::unlink(path.c_str()) == 0) removed.push_back(path);
  return removed;
}

}  // namespace gradsync
