#include "core/h5io.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "core/error.hpp"

namespace gradsync::h5 {
namespace {

static_assert(sizeof(hid_t) == sizeof(std::int64_t), "hid_t is 64-bit in HDF5 >= 1.10");

// Innermost (most specific) message of HDF5's default error stack.
std::string hdf5_message() {
  std::string msg;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned n, const H5E_error2_t* err, void* data) -> herr_t {
        auto* out = static_cast<std::string*>(data);
        if (n == 0 && err->desc) *out = err->desc;
        return 0;
      },
      &msg);
  H5Eclear2(H5E_DEFAULT);
  // HDF5's descriptions can span lines (the sec2 driver's read errors do): one line, short.
  for (char& ch : msg)
    if (ch == '\n' || ch == '\r') ch = ' ';
  if (msg.size() > 240) msg = msg.substr(0, 240) + "...";
  return msg.empty() ? "unknown HDF5 error" : msg;
}

// Turn HDF5's automatic stderr dump off once; we report errors ourselves.
struct QuietHdf5 {
  QuietHdf5() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }
};
void quiet() { static QuietHdf5 q; }

[[noreturn]] void fail(const char* call, const std::string& file, const std::string& object) {
  throw Error(where() + ": HDF5 " + call + " failed for '" + object + "' in " + file + ": " + hdf5_message());
}

[[noreturn]] void fail_input(const char* call, const std::string& file, const std::string& object) {
  throw UsageError(file + ": cannot read '" + object + "' (HDF5 " + call + "): " + hdf5_message());
}

// ---- temp files removed on SIGTERM / SIGINT / SIGHUP ------------------------------------
// A fixed table of NUL-terminated temp paths, written only by Writer (slot claimed with an
// atomic flag, path copied, then published with `live`), read only by the handler, which
// uses nothing but unlink() and sigaction()/raise() (async-signal-safe). The handler then
// restores the previous disposition and re-raises, so the process still ends by the signal
// (mpirun and Slurm see the usual status).
constexpr int kSignalSlots = 8;
constexpr std::size_t kSlotPath = 4096;
struct TempSlot {
  std::atomic<bool> claimed{false};
  std::atomic<bool> live{false};
  char path[kSlotPath];
};
TempSlot g_slots[kSignalSlots];
constexpr int kCleanupSignals[] = {SIGTERM, SIGINT, SIGHUP};
struct sigaction g_previous[3];

extern "C" void remove_temps_and_reraise(int sig) {
  for (auto& slot : g_slots)
    if (slot.live.load(std::memory_order_acquire)) unlink(slot.path);
  for (int i = 0; i < 3; ++i)
    if (kCleanupSignals[i] == sig) sigaction(sig, &g_previous[i], nullptr);
  raise(sig);
}

void install_cleanup_handlers() {
  static const bool installed = [] {
    for (int i = 0; i < 3; ++i) {
      struct sigaction sa {};
      sa.sa_handler = remove_temps_and_reraise;
      sigemptyset(&sa.sa_mask);
      sa.sa_flags = SA_RESETHAND;
      sigaction(kCleanupSignals[i], &sa, &g_previous[i]);
      // An ignored signal stays ignored (e.g. SIGHUP under nohup).
      if (g_previous[i].sa_handler == SIG_IGN) sigaction(kCleanupSignals[i], &g_previous[i], nullptr);
    }
    return true;
  }();
  (void)installed;
}

int claim_slot(const std::string& path) {
  if (path.size() >= kSlotPath) return -1;
  install_cleanup_handlers();
  for (int i = 0; i < kSignalSlots; ++i) {
    bool expected = false;
    if (g_slots[i].claimed.compare_exchange_strong(expected, true)) {
      std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
      g_slots[i].live.store(true, std::memory_order_release);
      return i;
    }
  }
  return -1;  // more than kSignalSlots writers open at once: this one is cleaned on exceptions only
}

void release_slot(int& i) {
  if (i < 0) return;
  g_slots[i].live.store(false, std::memory_order_release);
  g_slots[i].claimed.store(false, std::memory_order_release);
  i = -1;
}

std::string errno_text(int e) { return std::strerror(e); }

// Publishes `from` as `to` unless `to` exists. Returns 0, or the errno (EEXIST: taken).
int rename_noreplace(const std::string& from, const std::string& to) {
#ifdef RENAME_NOREPLACE
  if (renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return 0;
  if (errno != EINVAL && errno != ENOSYS) return errno;
#endif
  // File systems without RENAME_NOREPLACE: a hard link fails with EEXIST just the same.
  if (link(from.c_str(), to.c_str()) != 0) return errno;
  unlink(from.c_str());
  return 0;
}

// An unnamed inode in `folder` (O_TMPFILE), or -1 where the file system has none (or the
// folder cannot be written: the named path then reports why).
int open_unnamed(const std::string& folder) {
#ifdef O_TMPFILE
  return open(folder.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0644);
#else
  (void)folder;
  return -1;
#endif
}

// The folder a path's file lives in ("." for a bare name).
std::string folder_of(const std::string& path) {
  const std::filesystem::path p(path);
  return p.has_parent_path() ? p.parent_path().string() : std::string(".");
}

// 0, or ENAMETOOLONG when the last component of `path` is longer than its folder's file
// system takes: checked up front where no named file is created until the end.
int name_fits(const std::string& path) {
  const long max = pathconf(folder_of(path).c_str(), _PC_NAME_MAX);
  const std::size_t len = std::filesystem::path(path).filename().string().size();
  return len > static_cast<std::size_t>(max > 0 ? max : 255) ? ENAMETOOLONG : 0;
}

// write(2) until done; 0 or the errno (ENOSPC for a short write that makes no progress).
int write_all(int fd, const char* data, std::size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return errno;
    if (w == 0) return ENOSPC;
    data += w;
    n -= static_cast<std::size_t>(w);
  }
  return 0;
}

// "<stem><suffix>.h5" for "<stem>.h5" (or "<path><suffix>" without the extension).
std::string with_suffix(const std::string& path, const std::string& suffix) {
  const std::filesystem::path p(path);
  if (p.extension() == ".h5") return (p.parent_path() / (p.stem().string() + suffix + ".h5")).string();
  return path + suffix;
}

}  // namespace

PathState path_state(const std::string& path) {
  PathState st;
  struct stat sb {};
  if (stat(path.c_str(), &sb) == 0) {
    st.existed = true;
    st.dev = sb.st_dev;
    st.ino = sb.st_ino;
  }
  return st;
}

PathState check_output_path(const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) throw Error("empty file name");
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw Error(path + " is a folder, not a file name");
  const fs::path parent = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : fs::path(".");
  fs::create_directories(parent, ec);
  if (ec) throw Error("cannot create folder " + parent.string() + ": " + ec.message());
  if (!fs::is_directory(parent, ec)) throw Error(parent.string() + " is not a folder");
  if (access(parent.c_str(), W_OK | X_OK) != 0)
    throw Error("cannot write in folder " + parent.string() + ": " + errno_text(errno));
  // A probe the size of a small result's first blocks: a full disk fails now, not after the
  // run. Unnamed where the file system allows (nothing to leave behind), else named.
  std::string probe = path + ".tmp." + std::to_string(getpid()) + ".probe";
  if (const int e = name_fits(probe); e != 0) throw Error("cannot create a file next to " + path + ": " + errno_text(e));
  int fd = open_unnamed(parent.string());
  if (fd >= 0) probe.clear();
  if (fd < 0) fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("cannot create a file next to " + path + ": " + errno_text(errno));
  static const char block[8192] = {0};
  int err = write_all(fd, block, sizeof block);
  if (err == 0 && fsync(fd) != 0 && errno != EINVAL) err = errno;
  close(fd);
  if (!probe.empty()) unlink(probe.c_str());
  if (err != 0) throw Error("cannot write " + path + ": " + errno_text(err));
  return path_state(path);
}

// GS_H5(expr, object): evaluate an HDF5 call, throw with call/file/object/message on < 0.
// GS_H5R: the same for the Reader, whose files are inputs the user named: a missing,
// truncated or foreign file is a bad request (UsageError, exit status 2), like a bad option.
#define GS_H5(expr, file, object)                  \
  ([&]() {                                         \
    auto gs_rc_ = (expr);                          \
    if (gs_rc_ < 0) fail(#expr, (file), (object)); \
    return gs_rc_;                                 \
  }())

#define GS_H5R(expr, file, object)                       \
  ([&]() {                                               \
    auto gs_rc_ = (expr);                                \
    if (gs_rc_ < 0) fail_input(#expr, (file), (object)); \
    return gs_rc_;                                       \
  }())

namespace {

// RAII for any hid_t.
class Handle {
 public:
  Handle(hid_t id, herr_t (*closer)(hid_t)) : id_(id), closer_(closer) {}
  ~Handle() {
    if (id_ >= 0) closer_(id_);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  operator hid_t() const { return id_; }

 private:
  hid_t id_;
  herr_t (*closer_)(hid_t);
};

hid_t vlen_string_type() {
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  H5Tset_cset(t, H5T_CSET_UTF8);
  return t;
}

std::vector<hsize_t> to_hsize(const std::vector<std::uint64_t>& d) { return {d.begin(), d.end()}; }

}  // namespace

// ---- Writer ----------------------------------------------------------------------------

Writer::Writer(std::string final_path, Naming naming, const PathState* at_start)
    : final_path_(std::move(final_path)), naming_(naming) {
  quiet();
  namespace fs = std::filesystem;
  const fs::path p(final_path_);
  if (p.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(p.parent_path(), ec);
    if (ec) throw Error(where() + ": cannot create folder " + p.parent_path().string() + ": " + ec.message());
  }
  at_start_ = at_start ? *at_start : path_state(final_path_);
  // "<final>.tmp.<pid>"; a second writer in this process (threads, tests) appends ".<n>",
  // so no two writers share a temp name (nor an in-memory file name: HDF5 keys those by it).
  static std::atomic<std::uint64_t> writers{0};
  const std::uint64_t n = writers.fetch_add(1);
  temp_path_ = final_path_ + ".tmp." + std::to_string(getpid());
  if (n > 0) {
    temp_path_ += '.';
    temp_path_ += std::to_string(n);
  }
  signal_slot_ = claim_slot(temp_path_);
  // Preferred: the file in memory over an unnamed inode in the target folder (nothing named
  // until commit); else the named temp file, written as it goes.
  if (const int e = name_fits(temp_path_); e != 0) {
    release_slot(signal_slot_);
    throw Error(where() + ": cannot create " + temp_path_ + " (for " + final_path_ + "): " + errno_text(e));
  }
  tmp_fd_ = open_unnamed(folder_of(final_path_));
  if (tmp_fd_ >= 0) {
    in_memory_ = true;
    const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    constexpr std::size_t kCoreIncrement = std::size_t{1} << 20;  // the image grows 1 MiB at a time
    if (fapl >= 0 && H5Pset_fapl_core(fapl, kCoreIncrement, false) >= 0)
      file_ = H5Fcreate(temp_path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (fapl >= 0) H5Pclose(fapl);
  } else {
    file_ = H5Fcreate(temp_path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  }
  if (file_ < 0) {
    // A full disk can leave a 0-byte file behind a failed create.
    const std::string msg = hdf5_message();
    if (tmp_fd_ >= 0) close(tmp_fd_);
    tmp_fd_ = -1;
    if (!in_memory_) unlink(temp_path_.c_str());  // a file only: never a folder of that name
    release_slot(signal_slot_);
    throw Error(where() + ": cannot create " + (in_memory_ ? "the in-memory image of " + final_path_ : temp_path_ +
                " (for " + final_path_ + ")") + ": " + msg);
  }
}

Writer::~Writer() {
  if (tmp_fd_ >= 0) close(tmp_fd_);  // an unnamed inode vanishes with it
  if (committed_) return;
  if (file_ >= 0) H5Fclose(file_);
  unlink(temp_path_.c_str());  // a file only: never a folder of that name
  release_slot(signal_slot_);
}

void Writer::group(const std::string& path) {
  if (path.empty() || path == "/") return;
  std::string cur;
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    const std::size_t next = path.find('/', pos + 1);
    cur = path.substr(0, next);
    if (!cur.empty() && cur != "/") {
      const htri_t ex = H5Lexists(file_, cur.c_str(), H5P_DEFAULT);
      if (ex <= 0) {
        Handle g(GS_H5(H5Gcreate2(file_, cur.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), temp_path_, cur),
                 H5Gclose);
      }
    }
    pos = next;
  }
}

void Writer::ensure_parent(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) group(path.substr(0, slash));
}

void Writer::attr(const std::string& object, const std::string& name, const AttrValue& value) {
  Handle obj(GS_H5(H5Oopen(file_, object.c_str(), H5P_DEFAULT), temp_path_, object), H5Oclose);
  if (H5Aexists(obj, name.c_str()) > 0) GS_H5(H5Adelete(obj, name.c_str()), temp_path_, object + "@" + name);
  const std::string where_ = object + "@" + name;
  auto make = [&](hid_t type, hid_t space) {
    return GS_H5(H5Acreate2(obj, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT), temp_path_, where_);
  };
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::int64_t>) {
          Handle space(H5Screate(H5S_SCALAR), H5Sclose);
          Handle a(make(H5T_STD_I64LE, space), H5Aclose);
          GS_H5(H5Awrite(a, H5T_NATIVE_INT64, &v), temp_path_, where_);
        } else if constexpr (std::is_same_v<T, double>) {
          Handle space(H5Screate(H5S_SCALAR), H5Sclose);
          Handle a(make(H5T_IEEE_F64LE, space), H5Aclose);
          GS_H5(H5Awrite(a, H5T_NATIVE_DOUBLE, &v), temp_path_, where_);
        } else if constexpr (std::is_same_v<T, std::string>) {
          Handle type(vlen_string_type(), H5Tclose);
          Handle space(H5Screate(H5S_SCALAR), H5Sclose);
          Handle a(make(type, space), H5Aclose);
          const char* s = v.c_str();
          GS_H5(H5Awrite(a, type, &s), temp_path_, where_);
        } else {
          // An empty list is a zero-length 1-D attribute; HDF5 rejects a write of nothing.
          const hsize_t n = v.size();
          Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
          if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) {
            Handle a(make(H5T_STD_I64LE, space), H5Aclose);
            if (n > 0) GS_H5(H5Awrite(a, H5T_NATIVE_INT64, v.data()), temp_path_, where_);
          } else if constexpr (std::is_same_v<T, std::vector<double>>) {
            Handle a(make(H5T_IEEE_F64LE, space), H5Aclose);
            if (n > 0) GS_H5(H5Awrite(a, H5T_NATIVE_DOUBLE, v.data()), temp_path_, where_);
          } else {
            Handle type(vlen_string_type(), H5Tclose);
            Handle a(make(type, space), H5Aclose);
            std::vector<const char*> ptrs;
            for (const auto& s : v) ptrs.push_back(s.c_str());
            if (n > 0) GS_H5(H5Awrite(a, type, ptrs.data()), temp_path_, where_);
          }
        }
      },
      value);
}

void Writer::write_numeric(const std::string& path, const void* data, std::int64_t mem_type, std::size_t n,
                           std::vector<std::uint64_t> dims) {
  if (dims.empty()) dims = {n};
  const std::uint64_t prod = std::accumulate(dims.begin(), dims.end(), std::uint64_t{1}, std::multiplies<>());
  if (prod != n)
    throw Error(where() + ": dataset '" + path + "': " + std::to_string(n) + " values do not fill dims of " +
                std::to_string(prod));
  ensure_parent(path);
  const auto hd = to_hsize(dims);
  Handle space(GS_H5(H5Screate_simple(static_cast<int>(hd.size()), hd.data(), nullptr), temp_path_, path),
               H5Sclose);
  hid_t file_type = H5T_IEEE_F64LE;
  if (mem_type == H5T_NATIVE_FLOAT) file_type = H5T_IEEE_F32LE;
  if (mem_type == H5T_NATIVE_INT64) file_type = H5T_STD_I64LE;
  Handle ds(GS_H5(H5Dcreate2(file_, path.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                  temp_path_, path),
            H5Dclose);
  if (n > 0) GS_H5(H5Dwrite(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), temp_path_, path);
}

void Writer::write(const std::string& path, const std::vector<double>& data, std::vector<std::uint64_t> dims) {
  write_numeric(path, data.data(), H5T_NATIVE_DOUBLE, data.size(), std::move(dims));
}
void Writer::write(const std::string& path, const std::vector<float>& data, std::vector<std::uint64_t> dims) {
  write_numeric(path, data.data(), H5T_NATIVE_FLOAT, data.size(), std::move(dims));
}
void Writer::write(const std::string& path, const std::vector<std::int64_t>& data,
                   std::vector<std::uint64_t> dims) {
  write_numeric(path, data.data(), H5T_NATIVE_INT64, data.size(), std::move(dims));
}

void Writer::write(const std::string& path, const std::vector<std::string>& data) {
  ensure_parent(path);
  const hsize_t n = data.size();
  Handle type(vlen_string_type(), H5Tclose);
  Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
  Handle ds(GS_H5(H5Dcreate2(file_, path.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), temp_path_,
                  path),
            H5Dclose);
  std::vector<const char*> ptrs;
  for (const auto& s : data) ptrs.push_back(s.c_str());
  if (n > 0) GS_H5(H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()), temp_path_, path);
}

void Writer::commit() {
  if (committed_) return;
  GS_H5(H5Fflush(file_, H5F_SCOPE_GLOBAL), temp_path_, "/");
  std::vector<char> image;
  if (in_memory_) {
    const ssize_t n = GS_H5(H5Fget_file_image(file_, nullptr, 0), temp_path_, "/");
    image.resize(static_cast<std::size_t>(n));
    if (H5Fget_file_image(file_, image.data(), image.size()) != n) fail("H5Fget_file_image", temp_path_, "/");
  }
  const herr_t rc = H5Fclose(file_);
  file_ = -1;
  if (rc < 0) {
    if (!in_memory_) unlink(temp_path_.c_str());  // a file only: never a folder of that name
    fail("H5Fclose", temp_path_, "/");
  }
  try {
    if (in_memory_) write_out_image(image);
    publish();
  } catch (...) {
    unlink(temp_path_.c_str());  // a file only: never a folder of that name
    release_slot(signal_slot_);
    throw;
  }
  release_slot(signal_slot_);
  committed_ = true;
}

// The finished image into the unnamed inode, which then gets the temp name (publish()
// renames it from there). Where the inode cannot be linked (no /proc), the image is written
// under the temp name instead. A stale temp of a dead process with this pid is replaced.
void Writer::write_out_image(const std::vector<char>& image) {
  if (const int err = write_all(tmp_fd_, image.data(), image.size()); err != 0)
    throw Error(where() + ": cannot write " + final_path_ + ": " + errno_text(err));
  const std::string proc = "/proc/self/fd/" + std::to_string(tmp_fd_);
  int rc = linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, temp_path_.c_str(), AT_SYMLINK_FOLLOW);
  if (rc != 0 && errno == EEXIST && unlink(temp_path_.c_str()) == 0)
    rc = linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, temp_path_.c_str(), AT_SYMLINK_FOLLOW);
  close(tmp_fd_);
  tmp_fd_ = -1;
  if (rc == 0) return;
  const int fd = open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(where() + ": cannot create " + temp_path_ + " (for " + final_path_ + "): " + errno_text(errno));
  const int err = write_all(fd, image.data(), image.size());
  close(fd);
  if (err != 0) throw Error(where() + ": cannot write " + final_path_ + ": " + errno_text(err));
}

void Writer::publish() {
  // Replace only the file that was there when this run began (the user's old result); a
  // file that appeared or changed since was written by another run and is never replaced.
  const PathState now = path_state(final_path_);
  if (at_start_.existed && now.existed && now.dev == at_start_.dev && now.ino == at_start_.ino) {
    if (std::rename(temp_path_.c_str(), final_path_.c_str()) != 0)
      throw Error(where() + ": cannot rename " + temp_path_ + " to " + final_path_ + ": " + errno_text(errno));
    return;
  }
  int rc = rename_noreplace(temp_path_, final_path_);
  if (rc == 0) return;
  if (rc != EEXIST)
    throw Error(where() + ": cannot rename " + temp_path_ + " to " + final_path_ + ": " + errno_text(rc));
  if (naming_ == Naming::Unique) {
    for (int k = 2; k < 10000; ++k) {
      std::string suffix = "-";
      suffix += std::to_string(k);
      const std::string candidate = with_suffix(final_path_, suffix);
      rc = rename_noreplace(temp_path_, candidate);
      if (rc == 0) {
        final_path_ = candidate;
        return;
      }
      if (rc != EEXIST)
        throw Error(where() + ": cannot rename " + temp_path_ + " to " + candidate + ": " + errno_text(rc));
    }
    throw Error(where() + ": no free name for " + final_path_ + " (tried -2 .. -9999)");
  }
  const std::string kept = with_suffix(final_path_, ".conflict-" + std::to_string(getpid()));
  rc = rename_noreplace(temp_path_, kept);
  if (rc != 0)
    throw Error(where() + ": " + final_path_ + " was written by another run while this one ran, and keeping this "
                "result as " + kept + " failed too: " + errno_text(rc));
  throw Error(where() + ": " + final_path_ + " was written by another run while this one ran; not replaced. This "
              "run's complete result is " + kept);
}

// ---- Reader ----------------------------------------------------------------------------

Reader::Reader(const std::string& path) : path_(path) {
  quiet();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw UsageError(path + ": no such file");
  if (std::filesystem::is_directory(path, ec)) throw UsageError(path + ": is a folder, not an HDF5 file");
  file_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file_ < 0) fail_input("H5Fopen", path, "/ (not an HDF5 file, or truncated?)");
}

Reader::~Reader() {
  if (file_ >= 0) H5Fclose(file_);
}

bool Reader::exists(const std::string& object) const {
  if (object == "/" || object.empty()) return true;
  // Walk component by component: H5Lexists fails if an intermediate link is missing.
  std::size_t pos = 0;
  while (true) {
    const std::size_t next = object.find('/', pos + 1);
    const std::string cur = object.substr(0, next);
    if (!cur.empty() && cur != "/" && H5Lexists(file_, cur.c_str(), H5P_DEFAULT) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
    if (next == std::string::npos) return true;
    pos = next;
  }
}

std::vector<std::string> Reader::list(const std::string& group) const {
  Handle g(GS_H5R(H5Gopen2(file_, group.c_str(), H5P_DEFAULT), path_, group), H5Gclose);
  std::vector<std::string> names;
  H5Literate(
      g, H5_INDEX_NAME, H5_ITER_INC, nullptr,
      [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
        static_cast<std::vector<std::string>*>(data)->push_back(name);
        return 0;
      },
      &names);
  return names;
}

std::vector<std::uint64_t> Reader::dims(const std::string& dataset) const {
  Handle ds(GS_H5R(H5Dopen2(file_, dataset.c_str(), H5P_DEFAULT), path_, dataset), H5Dclose);
  Handle space(GS_H5R(H5Dget_space(ds), path_, dataset), H5Sclose);
  const int rank = GS_H5R(H5Sget_simple_extent_ndims(space), path_, dataset);
  std::vector<hsize_t> d(static_cast<std::size_t>(rank));
  if (rank > 0) H5Sget_simple_extent_dims(space, d.data(), nullptr);
  return {d.begin(), d.end()};
}

namespace {
template <typename T>
std::vector<T> read_numeric(hid_t file, const std::string& path, const std::string& dataset, hid_t mem_type) {
  Handle ds(GS_H5R(H5Dopen2(file, dataset.c_str(), H5P_DEFAULT), path, dataset), H5Dclose);
  Handle space(GS_H5R(H5Dget_space(ds), path, dataset), H5Sclose);
  const hssize_t n = GS_H5R(H5Sget_simple_extent_npoints(space), path, dataset);
  std::vector<T> out(static_cast<std::size_t>(n));
  if (n > 0) GS_H5R(H5Dread(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()), path, dataset);
  return out;
}

std::vector<std::string> read_vlen_strings(hid_t obj, bool is_attr, const std::string& path,
                                           const std::string& what) {
  Handle space(is_attr ? H5Aget_space(obj) : H5Dget_space(obj), H5Sclose);
  Handle ftype(is_attr ? H5Aget_type(obj) : H5Dget_type(obj), H5Tclose);
  if (H5Tget_class(ftype) != H5T_STRING) throw Error(where() + ": '" + what + "' in " + path + " is not a string");
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  std::vector<std::string> out;
  if (H5Tis_variable_str(ftype) > 0) {
    Handle mtype(vlen_string_type(), H5Tclose);
    std::vector<char*> ptrs(static_cast<std::size_t>(n), nullptr);
    if (n > 0) {
      if (is_attr) GS_H5R(H5Aread(obj, mtype, ptrs.data()), path, what);
      else GS_H5R(H5Dread(obj, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()), path, what);
    }
    for (char* p : ptrs) out.emplace_back(p ? p : "");
    if (n > 0) H5Dvlen_reclaim(mtype, space, H5P_DEFAULT, ptrs.data());
  } else {
    const std::size_t len = H5Tget_size(ftype);
    std::vector<char> buf(len * static_cast<std::size_t>(n) + 1, '\0');
    Handle mtype(H5Tcopy(ftype), H5Tclose);
    if (n > 0) {
      if (is_attr) GS_H5R(H5Aread(obj, mtype, buf.data()), path, what);
      else GS_H5R(H5Dread(obj, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()), path, what);
    }
    for (hssize_t i = 0; i < n; ++i) {
      std::string s(buf.data() + i * len, len);
      s.erase(s.find_last_not_of(std::string("\0 ", 2)) + 1);
      out.push_back(s);
    }
  }
  return out;
}
}  // namespace

std::vector<double> Reader::read_double(const std::string& dataset) const {
  return read_numeric<double>(file_, path_, dataset, H5T_NATIVE_DOUBLE);
}
std::vector<std::int64_t> Reader::read_int(const std::string& dataset) const {
  return read_numeric<std::int64_t>(file_, path_, dataset, H5T_NATIVE_INT64);
}
std::vector<std::string> Reader::read_strings(const std::string& dataset) const {
  Handle ds(GS_H5R(H5Dopen2(file_, dataset.c_str(), H5P_DEFAULT), path_, dataset), H5Dclose);
  return read_vlen_strings(ds, false, path_, dataset);
}

bool Reader::has_attr(const std::string& object, const std::string& name) const {
  if (!exists(object)) return false;
  const htri_t r = H5Aexists_by_name(file_, object.c_str(), name.c_str(), H5P_DEFAULT);
  H5Eclear2(H5E_DEFAULT);
  return r > 0;
}

std::vector<std::string> Reader::attr_names(const std::string& object) const {
  Handle obj(GS_H5R(H5Oopen(file_, object.c_str(), H5P_DEFAULT), path_, object), H5Oclose);
  std::vector<std::string> names;
  H5Aiterate2(
      obj, H5_INDEX_NAME, H5_ITER_INC, nullptr,
      [](hid_t, const char* name, const H5A_info_t*, void* data) -> herr_t {
        static_cast<std::vector<std::string>*>(data)->push_back(name);
        return 0;
      },
      &names);
  return names;
}

AttrValue Reader::attr(const std::string& object, const std::string& name) const {
  const std::string what = object + "@" + name;
  if (!has_attr(object, name)) throw Error(where() + ": " + path_ + " has no attribute '" + what + "'");
  Handle a(GS_H5R(H5Aopen_by_name(file_, object.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT), path_, what),
           H5Aclose);
  Handle type(H5Aget_type(a), H5Tclose);
  Handle space(H5Aget_space(a), H5Sclose);
  const bool scalar = H5Sget_simple_extent_type(space) == H5S_SCALAR;
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  switch (H5Tget_class(type)) {
    case H5T_INTEGER: {
      std::vector<std::int64_t> v(static_cast<std::size_t>(n));
      if (n > 0) GS_H5R(H5Aread(a, H5T_NATIVE_INT64, v.data()), path_, what);
      if (scalar) return v.at(0);
      return v;
    }
    case H5T_FLOAT: {
      std::vector<double> v(static_cast<std::size_t>(n));
      if (n > 0) GS_H5R(H5Aread(a, H5T_NATIVE_DOUBLE, v.data()), path_, what);
      if (scalar) return v.at(0);
      return v;
    }
    case H5T_STRING: {
      auto v = read_vlen_strings(a, true, path_, what);
      if (scalar) return v.empty() ? std::string() : v[0];
      return v;
    }
    default: throw Error(where() + ": attribute '" + what + "' in " + path_ + " has an unsupported type");
  }
}

std::string Reader::attr_string(const std::string& object, const std::string& name) const {
  AttrValue v = attr(object, name);
  if (auto* s = std::get_if<std::string>(&v)) return *s;
  if (auto* i = std::get_if<std::int64_t>(&v)) return std::to_string(*i);
  if (auto* d = std::get_if<double>(&v)) return std::to_string(*d);
  throw Error(where() + ": attribute '" + object + "@" + name + "' in " + path_ + " is not a scalar");
}

double Reader::attr_double(const std::string& object, const std::string& name) const {
  AttrValue v = attr(object, name);
  if (auto* d = std::get_if<double>(&v)) return *d;
  if (auto* i = std::get_if<std::int64_t>(&v)) return static_cast<double>(*i);
  throw Error(where() + ": attribute '" + object + "@" + name + "' in " + path_ + " is not a number");
}

std::int64_t Reader::attr_int(const std::string& object, const std::string& name) const {
  AttrValue v = attr(object, name);
  if (auto* i = std::get_if<std::int64_t>(&v)) return *i;
  if (auto* d = std::get_if<double>(&v)) return static_cast<std::int64_t>(*d);
  throw Error(where() + ": attribute '" + object + "@" + name + "' in " + path_ + " is not a number");
}

std::vector<std::string> Reader::attr_strings(const std::string& object, const std::string& name) const {
  AttrValue v = attr(object, name);
  if (auto* s = std::get_if<std::vector<std::string>>(&v)) return *s;
  if (auto* s = std::get_if<std::string>(&v)) return {*s};
  throw Error(where() + ": attribute '" + object + "@" + name + "' in " + path_ + " is not a string list");
}

}  // namespace gradsync::h5
