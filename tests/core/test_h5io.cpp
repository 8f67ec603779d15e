// Tests of core/h5io.hpp: a writer/reader round trip of every attribute and dataset type,
// atomic commit (temp + rename; no file at all without commit), and errors that name the
// missing file or attribute.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <variant>
#include <vector>

#include "core/error.hpp"
#include "core/h5io.hpp"

namespace gs = gradsync;
namespace fs = std::filesystem;

namespace {

// A fresh folder per test, removed afterwards.
class H5Test : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("gradsync_test_h5_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::size_t files_in_dir() const {
    return static_cast<std::size_t>(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()));
  }
  fs::path dir_;
};

TEST_F(H5Test, RoundTripOfAttributesAndDatasets) {
  const std::string file = path("sub/dir/result.h5");  // parent folders are created
  {
    gs::h5::Writer w(file);
    EXPECT_EQ(w.final_path(), file);
    EXPECT_NE(w.temp_path(), file);
    w.attr("/", "int", std::int64_t{-42});
    w.attr("/", "double", 2.5);
    w.attr("/", "string", std::string("ring, 4 ranks"));
    w.attr("/", "ints", std::vector<std::int64_t>{1, 2, 3});
    w.attr("/", "doubles", std::vector<double>{0.5, -1.25});
    w.attr("/", "strings", std::vector<std::string>{"a", "", "ccc"});
    w.attr("/", "int", std::int64_t{7});  // replacing an attribute
    w.group("/runs/0");
    w.attr("/runs/0", "algo", std::string("rd"));
    w.write("/runs/0/time", std::vector<double>{1.0, 2.0, 3.5});
    w.write("/runs/0/loss", std::vector<float>{0.25f, 0.125f});
    w.write("/steps/grid", std::vector<std::int64_t>{1, 2, 3, 4, 5, 6}, {2, 3});  // parents made as needed
    w.write("/names", std::vector<std::string>{"x", "yy"});
    w.write("/empty", std::vector<double>{});
    w.attr("/runs/0/time", "unit", std::string("s"));
    // In memory over an unnamed inode, nothing in the folder has a name until commit();
    // without O_TMPFILE the named temp is written as it goes.
    if (w.in_memory())
      EXPECT_TRUE(fs::is_empty(fs::path(file).parent_path()));
    else
      EXPECT_TRUE(fs::exists(w.temp_path()));
    EXPECT_FALSE(fs::exists(file));
    const std::string temp = w.temp_path();
    w.commit();
    EXPECT_TRUE(fs::exists(file));
    EXPECT_FALSE(fs::exists(temp));
    w.commit();  // a second commit is a no-op
  }
  ASSERT_TRUE(fs::exists(file));

  gs::h5::Reader r(file);
  EXPECT_EQ(std::get<std::int64_t>(r.attr("/", "int")), 7);
  EXPECT_EQ(std::get<double>(r.attr("/", "double")), 2.5);
  EXPECT_EQ(std::get<std::string>(r.attr("/", "string")), "ring, 4 ranks");
  EXPECT_EQ(std::get<std::vector<std::int64_t>>(r.attr("/", "ints")), (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(std::get<std::vector<double>>(r.attr("/", "doubles")), (std::vector<double>{0.5, -1.25}));
  EXPECT_EQ(std::get<std::vector<std::string>>(r.attr("/", "strings")), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(r.attr_int("/", "int"), 7);
  EXPECT_EQ(r.attr_double("/", "int"), 7.0);  // int attribute read as double
  EXPECT_EQ(r.attr_double("/", "double"), 2.5);
  EXPECT_EQ(r.attr_string("/", "string"), "ring, 4 ranks");
  EXPECT_EQ(r.attr_strings("/", "strings"), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(r.attr_string("/runs/0", "algo"), "rd");
  EXPECT_EQ(r.attr_string("/runs/0/time", "unit"), "s");
  EXPECT_TRUE(r.has_attr("/", "double"));
  EXPECT_FALSE(r.has_attr("/", "nope"));
  EXPECT_FALSE(r.has_attr("/no/such/group", "x"));
  auto names = r.attr_names("/");
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"double", "doubles", "int", "ints", "string", "strings"}));

  EXPECT_TRUE(r.exists("/runs/0/time"));
  EXPECT_TRUE(r.exists("/steps"));
  EXPECT_FALSE(r.exists("/runs/1/time"));
  EXPECT_FALSE(r.exists("/nothing"));
  auto members = r.list("/runs/0");
  std::sort(members.begin(), members.end());
  EXPECT_EQ(members, (std::vector<std::string>{"loss", "time"}));
  EXPECT_EQ(r.read_double("/runs/0/time"), (std::vector<double>{1.0, 2.0, 3.5}));
  EXPECT_EQ(r.read_double("/runs/0/loss"), (std::vector<double>{0.25, 0.125}));  // float widened
  EXPECT_EQ(r.read_int("/steps/grid"), (std::vector<std::int64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(r.dims("/steps/grid"), (std::vector<std::uint64_t>{2, 3}));
  EXPECT_EQ(r.dims("/runs/0/time"), (std::vector<std::uint64_t>{3}));
  EXPECT_EQ(r.read_strings("/names"), (std::vector<std::string>{"x", "yy"}));
  EXPECT_TRUE(r.read_double("/empty").empty());
}

TEST_F(H5Test, WriterWithoutCommitLeavesNoFileAndNoTemp) {
  const std::string file = path("abandoned.h5");
  std::string temp;
  {
    gs::h5::Writer w(file);
    temp = w.temp_path();
    w.write("/x", std::vector<double>{1, 2});
    EXPECT_EQ(fs::exists(temp), !w.in_memory());
  }
  EXPECT_FALSE(fs::exists(file));
  EXPECT_FALSE(fs::exists(temp));
  EXPECT_EQ(files_in_dir(), 0u);
}

// kill -9 runs no handler and no destructor: a writer killed mid-write leaves nothing where
// the folder takes unnamed files (the result is built in memory over an O_TMPFILE inode).
TEST_F(H5Test, WriterKilledMidWriteLeavesNothing) {
  const std::string file = path("killed.h5");
  bool in_memory = false;
  {
    gs::h5::Writer probe(path("probe.h5"));
    in_memory = probe.in_memory();
  }
  if (!in_memory) GTEST_SKIP() << "this file system has no O_TMPFILE: a kill -9 may leave the named temp";
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    gs::h5::Writer w(file);
    w.write("/steps/step_time_s", std::vector<double>(100000, 0.5));
    const char ready = 1;
    (void)!write(fds[1], &ready, 1);
    pause();  // killed here, mid-write
    _exit(0);
  }
  close(fds[1]);
  char ready = 0;
  ASSERT_EQ(read(fds[0], &ready, 1), 1);
  close(fds[0]);
  EXPECT_EQ(files_in_dir(), 0u) << "a file is named while the writer is still writing";
  kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  EXPECT_EQ(files_in_dir(), 0u);
}

TEST_F(H5Test, WriterDestroyedByAnExceptionLeavesNothing) {
  const std::string file = path("failed.h5");
  try {
    gs::h5::Writer w(file);
    w.write("/x", std::vector<double>{1, 2, 3}, {2, 2});  // 3 values do not fill 2x2
    ADD_FAILURE() << "no error for mismatched dims";
  } catch (const gs::Error& e) {
    EXPECT_NE(std::string(e.what()).find("/x"), std::string::npos) << e.what();
  }
  EXPECT_EQ(files_in_dir(), 0u);
}

TEST_F(H5Test, CommitReplacesAnExistingFile) {
  const std::string file = path("r.h5");
  {
    gs::h5::Writer w(file);
    w.attr("/", "version", std::int64_t{1});
    w.commit();
  }
  {
    gs::h5::Writer w(file);
    w.attr("/", "version", std::int64_t{2});
    w.commit();
  }
  EXPECT_EQ(gs::h5::Reader(file).attr_int("/", "version"), 2);
  EXPECT_EQ(files_in_dir(), 1u);
}

TEST_F(H5Test, MissingFileNamesThePath) {
  const std::string file = path("does_not_exist.h5");
  try {
    gs::h5::Reader r(file);
    ADD_FAILURE() << "no error";
  } catch (const gs::Error& e) {
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
  }
}

TEST_F(H5Test, NotAnHdf5FileIsAnError) {
  const std::string file = path("text.h5");
  std::ofstream(file) << "not hdf5\n";
  try {
    gs::h5::Reader r(file);
    ADD_FAILURE() << "no error";
  } catch (const gs::Error& e) {
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
  }
}

TEST_F(H5Test, MissingAttributeAndDatasetNameThemselves) {
  const std::string file = path("a.h5");
  {
    gs::h5::Writer w(file);
    w.group("/g");
    w.attr("/g", "present", 1.0);
    w.commit();
  }
  gs::h5::Reader r(file);
  try {
    (void)r.attr("/g", "absent_attr");
    ADD_FAILURE() << "no error";
  } catch (const gs::Error& e) {
    EXPECT_NE(std::string(e.what()).find("absent_attr"), std::string::npos) << e.what();
  }
  try {
    (void)r.attr_string("/g", "absent_attr2");
    ADD_FAILURE() << "no error";
  } catch (const gs::Error& e) {
    EXPECT_NE(std::string(e.what()).find("absent_attr2"), std::string::npos) << e.what();
  }
  try {
    (void)r.read_double("/g/missing_dataset");
    ADD_FAILURE() << "no error";
  } catch (const gs::Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing_dataset"), std::string::npos) << e.what();
  }
}

}  // namespace

// ---- publishing: never replace another run's result -----------------------------------------

namespace {
std::int64_t marker_of(const std::string& file) {
  gs::h5::Reader r(file);
  return r.attr_int("/", "marker");
}
}  // namespace

TEST_F(H5Test, ReplacesTheFileThatExistedWhenTheWriterStarted) {
  const std::string file = path("r.h5");
  {
    gs::h5::Writer w(file);
    w.attr("/", "marker", std::int64_t{1});
    w.commit();
  }
  gs::h5::Writer w(file);  // a rerun overwriting its own old result
  w.attr("/", "marker", std::int64_t{2});
  w.commit();
  EXPECT_EQ(marker_of(file), 2);
  EXPECT_EQ(files_in_dir(), 1u);
}

TEST_F(H5Test, ExactNameTakenDuringTheRunKeepsBothResultsAndSaysSo) {
  const std::string file = path("same.h5");
  gs::h5::Writer slow(file);  // started first, finishes last
  slow.attr("/", "marker", std::int64_t{1});
  {
    gs::h5::Writer fast(file);
    fast.attr("/", "marker", std::int64_t{2});
    fast.commit();
  }
  try {
    slow.commit();
    ADD_FAILURE() << "the second commit replaced the first run's result silently";
  } catch (const gs::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("written by another run"), std::string::npos) << msg;
    EXPECT_NE(msg.find(".conflict-"), std::string::npos) << msg;
  }
  EXPECT_EQ(marker_of(file), 2);
  const std::string kept = path("same.conflict-" + std::to_string(getpid()) + ".h5");
  ASSERT_TRUE(fs::exists(kept));
  EXPECT_EQ(marker_of(kept), 1);
  EXPECT_EQ(files_in_dir(), 2u);  // no temp file
}

TEST_F(H5Test, UniqueNameTakenDuringTheRunMovesToTheNextFreeName) {
  const std::string file = path("default.h5");
  gs::h5::Writer slow(file, gs::h5::Writer::Naming::Unique);
  slow.attr("/", "marker", std::int64_t{1});
  {
    gs::h5::Writer fast(file, gs::h5::Writer::Naming::Unique);
    fast.attr("/", "marker", std::int64_t{2});
    fast.commit();
    EXPECT_EQ(fast.final_path(), file);
  }
  slow.commit();
  EXPECT_EQ(slow.final_path(), path("default-2.h5"));
  EXPECT_EQ(marker_of(file), 2);
  EXPECT_EQ(marker_of(path("default-2.h5")), 1);
}

TEST_F(H5Test, FailedCreateLeavesNothingAndNamesTheFile) {
  // The temp name is too long for the file system (255 bytes), so the create fails. (A full
  // disk, where a failed create used to leave a 0-byte temp file, is in tests/faults.)
  const std::string file = path(std::string(250, 'a') + ".h5");
  try {
    gs::h5::Writer w(file);
    ADD_FAILURE() << "no error";
  } catch (const gs::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot create"), std::string::npos) << e.what();
  }
  EXPECT_EQ(files_in_dir(), 0u);
}

TEST_F(H5Test, CheckOutputPathRefusesFoldersAndUncreatableParents) {
  EXPECT_THROW(gs::h5::check_output_path(dir_.string()), gs::Error);
  EXPECT_THROW(gs::h5::check_output_path("/proc/gradsync-no/x.h5"), gs::Error);
  const std::string file = path("text");
  std::ofstream(file) << "x";
  EXPECT_THROW(gs::h5::check_output_path(file + "/x.h5"), gs::Error);
  EXPECT_NO_THROW(gs::h5::check_output_path(path("sub/ok.h5")));
  EXPECT_FALSE(fs::exists(path("sub/ok.h5")));
  EXPECT_EQ(files_in_dir(), 2u);  // "text" and the created folder "sub"; no probe left
  EXPECT_TRUE(fs::is_empty(path("sub")));
}

TEST_F(H5Test, BadInputFilesAreUsageErrorsOnOneLine) {
  const std::string file = path("text.h5");
  std::ofstream(file) << "not hdf5\n";
  for (const std::string& f : {file, path("missing.h5"), dir_.string()}) {
    try {
      gs::h5::Reader r(f);
      ADD_FAILURE() << "no error for " << f;
    } catch (const gs::UsageError& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
}

TEST_F(H5Test, TheStateAtTheRunsStartDecidesNotTheStateAtWriting) {
  // The programs check --out before measuring and create the writer only afterwards: a
  // result another run published in between must not count as "this run's old file".
  const std::string file = path("late.h5");
  const gs::h5::PathState at_start = gs::h5::check_output_path(file);
  EXPECT_FALSE(at_start.existed);
  {
    gs::h5::Writer other(file);
    other.attr("/", "marker", std::int64_t{2});
    other.commit();
  }
  gs::h5::Writer mine(file, gs::h5::Writer::Naming::Exact, &at_start);
  mine.attr("/", "marker", std::int64_t{1});
  EXPECT_THROW(mine.commit(), gs::Error);
  EXPECT_EQ(marker_of(file), 2);
  EXPECT_EQ(files_in_dir(), 2u);  // the other run's and this run's .conflict-<pid>.h5
}
