// gradsync/core/h5io.hpp — the one HDF5 writer and reader of gradsync results.
//
// Writer: the file is built in memory (HDF5's core driver, no backing store) while an
// unnamed O_TMPFILE inode in the target folder is held open; commit() writes the image into
// that inode, names it "<final>.tmp.<pid>" (linkat through /proc/self/fd) and publishes it
// under the final path. Until commit() nothing in the folder has a name, so even kill -9
// leaves nothing: an unnamed inode vanishes with its last descriptor. Where the file system
// has no O_TMPFILE (NFS, Lustre, older overlayfs) the file is written to the named
// "<final>.tmp.<pid>" as it goes, as before. Either way, a writer destroyed without commit()
// (an exception, a full disk), a failed create, or SIGTERM/SIGINT/SIGHUP while it is open
// removes its temp file: a result file is complete or absent.
// Publishing never silently replaces another run's result: a final path that did not
// exist when the writer was created is published with "no replace" semantics
// (renameat2(RENAME_NOREPLACE), else link()); one that existed then is replaced only if it
// is still the same file. On a conflict, Naming::Unique (default names) takes the next free
// "<stem>-2.h5", "-3", ...; Naming::Exact keeps the result as "<stem>.conflict-<pid>.h5" and
// throws Error naming both paths.
// Reader: typed access to what the writer wrote (and to any plain numeric/string HDF5).
// Every HDF5 call is checked; failures throw gradsync::Error with the call, the object
// path and HDF5's own message.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace gradsync::h5 {

using AttrValue = std::variant<std::int64_t, double, std::string, std::vector<std::int64_t>,
                               std::vector<double>, std::vector<std::string>>;

// Checks, before any work, that `path` can become a result file: not a folder, its folder
// exists or can be created and is writable, and the disk takes a few KiB (a probe file is
// written and removed). Throws Error with the reason (callers name their option).
// Returns what was at `path` then: the run may later replace that file (its own old
// result), never one that appears or changes after this moment (pass it to the Writer).
struct PathState {
  bool existed = false;
  std::uint64_t dev = 0, ino = 0;
};
PathState check_output_path(const std::string& path);
PathState path_state(const std::string& path);

class Writer {
 public:
  enum class Naming { Exact, Unique };
  // `at_start`: the final path's state when the run began (check_output_path's result);
  // without it, the state at construction counts as the start.
  explicit Writer(std::string final_path, Naming naming = Naming::Exact, const PathState* at_start = nullptr);
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  const std::string& final_path() const { return final_path_; }
  // The name the file has between being written out and being published (commit() only,
  // when in_memory(); from construction on otherwise).
  const std::string& temp_path() const { return temp_path_; }
  // True when the file is built in memory over an unnamed inode (nothing named until commit).
  bool in_memory() const { return in_memory_; }

  // Creates the group and its parents if missing ("/steps", "/a/b").
  void group(const std::string& path);
  // Attribute on an object ("/" for the root, or a group/dataset path that exists).
  void attr(const std::string& object, const std::string& name, const AttrValue& value);

  // Datasets. dims empty means 1-D of data.size(); otherwise product(dims) == data.size().
  // Parent groups are created as needed.
  void write(const std::string& path, const std::vector<double>& data, std::vector<std::uint64_t> dims = {});
  void write(const std::string& path, const std::vector<float>& data, std::vector<std::uint64_t> dims = {});
  void write(const std::string& path, const std::vector<std::int64_t>& data, std::vector<std::uint64_t> dims = {});
  void write(const std::string& path, const std::vector<std::string>& data);

  // Flush, close and rename into place. After commit() the writer is inert.
  void commit();

 private:
  void write_numeric(const std::string& path, const void* data, std::int64_t mem_type, std::size_t n,
                     std::vector<std::uint64_t> dims);
  void ensure_parent(const std::string& path);
  void publish();
  void write_out_image(const std::vector<char>& image);
  std::string final_path_;
  std::string temp_path_;
  std::int64_t file_ = -1;
  int tmp_fd_ = -1;  // the unnamed O_TMPFILE inode in the target folder (in memory, until commit)
  bool in_memory_ = false;
  bool committed_ = false;
  Naming naming_ = Naming::Exact;
  int signal_slot_ = -1;                 // index in the signal-cleanup table, -1 if none
  PathState at_start_;  // the final path when the run began: only that file may be replaced
};

class Reader {
 public:
  explicit Reader(const std::string& path);
  ~Reader();
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  const std::string& path() const { return path_; }
  bool exists(const std::string& object) const;  // group or dataset
  std::vector<std::string> list(const std::string& group) const;  // member names
  std::vector<std::uint64_t> dims(const std::string& dataset) const;

  std::vector<double> read_double(const std::string& dataset) const;  // any numeric type
  std::vector<std::int64_t> read_int(const std::string& dataset) const;
  std::vector<std::string> read_strings(const std::string& dataset) const;

  bool has_attr(const std::string& object, const std::string& name) const;
  std::vector<std::string> attr_names(const std::string& object) const;
  AttrValue attr(const std::string& object, const std::string& name) const;
  std::string attr_string(const std::string& object, const std::string& name) const;
  double attr_double(const std::string& object, const std::string& name) const;  // int or float attr
  std::int64_t attr_int(const std::string& object, const std::string& name) const;
  std::vector<std::string> attr_strings(const std::string& object, const std::string& name) const;

 private:
  std::string path_;
  std::int64_t file_ = -1;
};

}  // namespace gradsync::h5
