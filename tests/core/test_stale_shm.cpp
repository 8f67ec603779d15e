// gradsync/tests/core/test_stale_shm.cpp — removing killed jobs' segment files and session
// directories (core/stale_shm.hpp).
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "core/stale_shm.hpp"

using namespace gradsync;

namespace {

std::string make_file(const std::string& path, long age_s) {
  const int fd = ::open(path.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0600);
  EXPECT_GE(fd, 0) << path;
  EXPECT_EQ(::ftruncate(fd, 4096), 0);
  ::close(fd);
  const timespec t[2] = {{std::time(nullptr) - age_s, 0}, {std::time(nullptr) - age_s, 0}};
  EXPECT_EQ(::utimensat(AT_FDCWD, path.c_str(), t, 0), 0);
  return path;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

}  // namespace

TEST(StaleShm, RemovesOnlyOldUnmappedFilesOfThePrefix) {
  char tmpl[] = "/tmp/gradsync-stale-shm-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl, prefix = "vader_segment.testhost.0.";
  const std::string stale = make_file(dir + "/" + prefix + "1f.0", 120);
  const std::string stale2 = make_file(dir + "/" + prefix + "1f.1", 120);
  const std::string young = make_file(dir + "/" + prefix + "2a.0", 0);     // a job starting now
  const std::string other = make_file(dir + "/vader_segment.otherhost.0.1f.0", 120);
  const std::string mapped = make_file(dir + "/" + prefix + "3b.0", 120);  // a live job's
  const int fd = ::open(mapped.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  void* m = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(m, MAP_FAILED);
  ::close(fd);
  ASSERT_EQ(::mkdir((dir + "/" + prefix + "dir").c_str(), 0700), 0);

  std::vector<std::string> removed = remove_stale_segments(dir, prefix, 60);
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed, (std::vector<std::string>{stale, stale2}));
  EXPECT_FALSE(exists(stale));
  EXPECT_FALSE(exists(stale2));
  EXPECT_TRUE(exists(young));
  EXPECT_TRUE(exists(other));
  EXPECT_TRUE(exists(mapped));
  EXPECT_TRUE(exists(dir + "/" + prefix + "dir"));

  // Unmapped, the live job's file is a killed job's: the next sweep takes it.
  ASSERT_EQ(::munmap(m, 4096), 0);
  EXPECT_EQ(remove_stale_segments(dir, prefix, 60), (std::vector<std::string>{mapped}));
  EXPECT_TRUE(remove_stale_segments(dir, prefix, 60).empty());
  EXPECT_TRUE(remove_stale_segments(dir + "/missing", prefix, 60).empty());
  EXPECT_TRUE(remove_stale_segments(dir, "", 0).empty());  // an empty prefix removes nothing
  EXPECT_TRUE(exists(young) && exists(other));

  for (const auto& p : {young, other}) ::unlink(p.c_str());
  ::rmdir((dir + "/" + prefix + "dir").c_str());
  ::rmdir(dir.c_str());
}

TEST(StaleShm, PrefixNamesThisHost) {
  char host[256] = {0};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  std::string h(host);
  h = h.substr(0, h.find('.'));
  EXPECT_EQ(vader_segment_prefix(), "vader_segment." + h + ".");
}

TEST(StaleShm, RemovesSessionDirsOfMpirunsThatAreGone) {
  char tmpl[] = "/tmp/gradsync-stale-session-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string top = tmpl;
  // A pid that is gone: a child that exited and was reaped.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  auto session = [&](const std::string& name, long age_s) {
    const std::string d = top + "/" + name;
    EXPECT_EQ(::mkdir(d.c_str(), 0700), 0) << d;
    EXPECT_EQ(::mkdir((d + "/1").c_str(), 0700), 0);
    make_file(d + "/1/smseg-0", 0);
    make_file(d + "/contact.txt", 0);
    EXPECT_EQ(::symlink("/etc", (d + "/link").c_str()), 0);  // followed, it would reach /etc
    const timespec t[2] = {{std::time(nullptr) - age_s, 0}, {std::time(nullptr) - age_s, 0}};
    EXPECT_EQ(::utimensat(AT_FDCWD, d.c_str(), t, 0), 0);
    return d;
  };
  const std::string gone = session("pid." + std::to_string(child), 120);
  const std::string alive = session("pid." + std::to_string(::getpid()), 120);       // this process
  const std::string young = session("pid." + std::to_string(child) + "0", 0);          // gone or not: too young
  const std::string other = session("jobfam.12", 120);                                  // not a pid.<N>
  const std::string mapped = session("pid.999999999", 120);                             // no such pid
  const int fd = ::open((mapped + "/1/smseg-0").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  void* m = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(m, MAP_FAILED);
  ::close(fd);

  EXPECT_EQ(remove_stale_session_dirs(top, 60), (std::vector<std::string>{gone}));
  EXPECT_FALSE(exists(gone));
  EXPECT_TRUE(exists(alive) && exists(young) && exists(other) && exists(mapped));
  EXPECT_TRUE(exists("/etc/hostname") || exists("/etc/passwd"));  // the link's target stays
  ASSERT_EQ(::munmap(m, 4096), 0);
  EXPECT_EQ(remove_stale_session_dirs(top, 60), (std::vector<std::string>{mapped}));
  EXPECT_TRUE(remove_stale_session_dirs(top + "/missing", 0).empty());
  for (const auto& d : {alive, young, other}) {
    ::unlink((d + "/1/smseg-0").c_str());
    ::unlink((d + "/contact.txt").c_str());
    ::unlink((d + "/link").c_str());
    ::rmdir((d + "/1").c_str());
    ::rmdir(d.c_str());
  }
  EXPECT_EQ(::rmdir(top.c_str()), 0);
}

TEST(StaleShm, SessionTopDirNamesThisHostAndUser) {
  const std::string top = ompi_session_top_dir();
  EXPECT_NE(top.find("/ompi."), std::string::npos) << top;
  EXPECT_EQ(top.substr(top.rfind('.') + 1), std::to_string(::geteuid())) << top;
}
