#include "comm/mpi_comm.hpp"

#include <sched.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <exception>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/params.hpp"
#include "core/reduce.hpp"
#include "core/stale_shm.hpp"
#include "core/timer.hpp"

namespace gradsync {

void mpi_check(int rc, const char* call, const char* file, int line) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw Error(where() + ": MPI call " + call + " failed: " + std::string(msg, static_cast<std::size_t>(len)) +
              " (" + file + ":" + std::to_string(line) + ")");
}

// ---- half-precision reduction ops for the native collectives ---------------------------

namespace {

MPI_Op g_sum_f16 = MPI_OP_NULL;
MPI_Op g_sum_bf16 = MPI_OP_NULL;

void sum_f16_fn(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_into(inout, in, static_cast<std::size_t>(*len), DType::F16);
}
void sum_bf16_fn(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_into(inout, in, static_cast<std::size_t>(*len), DType::BF16);
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::F16:
    case DType::BF16: return MPI_UINT16_T;  // reduced by our own ops
  }
  return MPI_BYTE;
}

MPI_Op mpi_sum(DType t) {
  switch (t) {
    case DType::F32: return MPI_SUM;
    case DType::F16: return g_sum_f16;
    case DType::BF16: return g_sum_bf16;
  }
  return MPI_SUM;
}

int to_int(std::size_t n, const char* what) {
  if (n > static_cast<std::size_t>(INT_MAX))
    throw Error(where() + ": " + what + " of " + std::to_string(n) +
                " elements exceeds MPI's int count; use a point-to-point algorithm (e.g. --algo ring)");
  return static_cast<int>(n);
}

// Set when a wait timed out: a peer is dead or stuck, so collective clean-up (freeing a
// shared window: a barrier inside MPI_Win_free) would hang; it is skipped from then on and
// the process ends through the error path (MPI_Abort or exit) without it.
std::atomic<bool> g_peer_lost{false};

// Poll requests until done or the time-out passes. Yields the core after a short spin so
// oversubscribed ranks (tests on 2 cores) make progress.
template <typename Describe>
void poll_until_done(int n, MPI_Request* reqs, Describe describe, long yield_after = 2000) {
  const double timeout = comm_timeout_s();
  if (timeout <= 0) {
    GS_MPI(MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE));
    return;
  }
  int done = 0;
  const double start = now_s();
  for (long spin = 0;; ++spin) {
    GS_MPI(MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE));
    if (done) return;
    if (spin >= yield_after) sched_yield();
    if ((spin & 255) == 0 && now_s() - start > timeout) {
      g_peer_lost.store(true);
      throw TimeoutError(where() + ": timed out after " + std::to_string(static_cast<int>(timeout)) +
                         " s (GRADSYNC_TIMEOUT_S) waiting for " + describe() +
                         " — a peer may have died or be stuck");
    }
  }
}

// Point-to-point messages larger than 1 GiB go as several MPI messages (int counts).
constexpr std::size_t kMaxPiece = std::size_t{1} << 30;

class MpiRequestImpl final : public Request::Impl {
 public:
  MpiRequestImpl(bool is_send, std::size_t bytes, int peer, int tag)
      : is_send_(is_send), bytes_(bytes), peer_(peer), tag_(tag) {}
  ~MpiRequestImpl() override {
    for (auto& r : reqs_)
      if (r != MPI_REQUEST_NULL) {
        MPI_Cancel(&r);
        MPI_Request_free(&r);
      }
  }
  bool test() override {
    int done = 0;
    GS_MPI(MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &done, MPI_STATUSES_IGNORE));
    return done != 0;
  }
  std::string describe() const override {
    return std::string(is_send_ ? "send of " : "recv of ") + std::to_string(bytes_) + " bytes " +
           (is_send_ ? "to" : "from") + " rank " + std::to_string(peer_) + " (tag " + std::to_string(tag_) + ")";
  }
  std::vector<MPI_Request> reqs_;

 private:
  bool is_send_;
  std::size_t bytes_;
  int peer_, tag_;
};


// Blocking native collectives are the baselines every measurement is compared with, so they
// run as the library's blocking calls (MPI_Allreduce, not MPI_Iallreduce: Open MPI serves the
// two from different components with different algorithms). They cannot be polled, so a
// watchdog thread bounds them instead: armed before the call and disarmed after it; if the
// time-out passes, it prints which rank hung in which call and aborts the whole job.
class Watchdog {
 public:
  static Watchdog& instance() {
    static Watchdog w;
    return w;
  }
  // Arming is two relaxed atomic stores on the hot path: no lock, no wake-up. The thread
  // polls at a coarse period (a quarter of the time-out, at most 1 s), so a hang is caught
  // within time-out + period.
  void arm(const char* call, std::size_t count) {
    const double timeout = comm_timeout_s();
    if (timeout <= 0) return;
    if (!started_.load(std::memory_order_acquire)) start(timeout);
    call_.store(call, std::memory_order_relaxed);
    count_.store(count, std::memory_order_relaxed);
    armed_at_.store(now_s(), std::memory_order_release);
  }
  void disarm() { armed_at_.store(0.0, std::memory_order_release); }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void start(double timeout) {
    std::lock_guard<std::mutex> lock(mu_);
    if (started_.load(std::memory_order_relaxed)) return;
    thread_ = std::thread([this, timeout] { loop(timeout); });
    started_.store(true, std::memory_order_release);
  }
  void loop(double timeout) {
    const auto period = std::chrono::duration<double>(std::min(timeout / 4, 1.0));
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, period, [this] { return stop_; })) {
      const double since = armed_at_.load(std::memory_order_acquire);
      if (since <= 0 || now_s() - since < timeout) continue;
      const std::size_t n = count_.load();
      const std::string of = n > 0 ? " of " + std::to_string(n) + " elements" : std::string();
      std::fprintf(stderr, "gradsync: error: %s: timed out after %.0f s (GRADSYNC_TIMEOUT_S) in %s%s"
                   " — a peer may have died or be stuck; aborting the job\n",
                   where().c_str(), timeout, call_.load(), of.c_str());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
      std::_Exit(1);
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
  std::atomic<bool> started_{false};
  std::atomic<double> armed_at_{0.0};
  std::atomic<const char*> call_{""};
  std::atomic<std::size_t> count_{0};
  bool stop_ = false;
};

class WatchGuard {
 public:
  WatchGuard(const char* call, std::size_t count) { Watchdog::instance().arm(call, count); }
  ~WatchGuard() { Watchdog::instance().disarm(); }
  WatchGuard(const WatchGuard&) = delete;
  WatchGuard& operator=(const WatchGuard&) = delete;
};

}  // namespace

// ---- MpiRuntime -------------------------------------------------------------------------

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) GS_MPI(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided_));
  else MPI_Query_thread(&provided_);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (g_sum_f16 == MPI_OP_NULL) {
    GS_MPI(MPI_Op_create(&sum_f16_fn, 1, &g_sum_f16));
    GS_MPI(MPI_Op_create(&sum_bf16_fn, 1, &g_sum_bf16));
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  set_process_identity(rank, size);
  GS_LOG(INFO) << "MPI initialised, thread level " << provided_ << " (MULTIPLE=" << MPI_THREAD_MULTIPLE << ")";
  // What killed jobs left on this node (core/stale_shm.hpp): segment files at least 10 s old
  // (Open MPI creates, sizes and maps its file in one call at start-up) and mapped by no
  // process, and session directories of mpiruns that are gone. Only logged: which run finds
  // them is chance, and a run's stderr stays its own.
  if (param_string("GRADSYNC_SWEEP_STALE") == "1" && launcher_local_rank_zero()) {
    for (const auto& path : remove_stale_segments(vader_backing_directory(), vader_segment_prefix(), 10)) {
      GS_LOG(INFO) << "removed " << path << ": an Open MPI shared-memory segment no process maps (a killed job's)";
    }
    for (const auto& path : remove_stale_session_dirs(ompi_session_top_dir(), 10)) {
      GS_LOG(INFO) << "removed " << path << ": the session directory of an mpirun that is gone";
    }
  }
}

MpiRuntime::~MpiRuntime() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (g_sum_f16 != MPI_OP_NULL) {
    MPI_Op_free(&g_sum_f16);
    MPI_Op_free(&g_sum_bf16);
  }
  MPI_Finalize();
}

void MpiRuntime::abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

// ---- MpiCommunicator --------------------------------------------------------------------

MpiCommunicator::MpiCommunicator(MPI_Comm comm) : comm_(comm), owned_(comm != MPI_COMM_WORLD) {
  GS_MPI(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  GS_MPI(MPI_Comm_rank(comm_, &rank_));
  GS_MPI(MPI_Comm_size(comm_, &size_));
  char name[MPI_MAX_PROCESSOR_NAME] = {0};
  int len = 0;
  MPI_Get_processor_name(name, &len);
  hostname_.assign(name, static_cast<std::size_t>(len));

  // Placement: who shares my node, and which node am I (numbered by lowest global rank).
  // These are the job's first messages between ranks: a peer that cannot be reached (e.g.
  // Open MPI's TCP BTL offering a docker0 address every host has, experiments/README.md
  // seed-ifname) hangs them inside Open MPI, so the watchdog bounds them like any wait.
  WatchGuard guard("the communicator's set-up (MPI_Comm_split_type, MPI_Allgather: the first messages between "
                   "ranks; a peer unreachable over the chosen interfaces? see btl_tcp_if_include)",
                   0);
  MPI_Comm local;
  GS_MPI(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local));
  MPI_Comm_rank(local, &local_rank_);
  MPI_Comm_size(local, &local_size_);
  int leader_rank = rank_;
  GS_MPI(MPI_Bcast(&leader_rank, 1, MPI_INT, 0, local));
  // node id = number of distinct leaders with a smaller global rank
  std::vector<int> leaders(static_cast<std::size_t>(size_));
  GS_MPI(MPI_Allgather(&leader_rank, 1, MPI_INT, leaders.data(), 1, MPI_INT, comm_));
  leader_of_ = leaders;
  std::vector<int> distinct;
  for (int l : leaders)
    if (std::find(distinct.begin(), distinct.end(), l) == distinct.end()) distinct.push_back(l);
  std::sort(distinct.begin(), distinct.end());
  node_count_ = static_cast<int>(distinct.size());
  node_id_ = static_cast<int>(std::lower_bound(distinct.begin(), distinct.end(), leader_rank) - distinct.begin());
  MPI_Comm_free(&local);
}

MpiCommunicator::~MpiCommunicator() {
  if (owned_) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }
}

Request MpiCommunicator::isend(const void* buf, std::size_t bytes, int peer, int tag) {
  auto impl = std::make_unique<MpiRequestImpl>(true, bytes, peer, tag);
  const char* p = static_cast<const char*>(buf);
  std::size_t off = 0;
  do {
    const std::size_t piece = std::min(kMaxPiece, bytes - off);
    MPI_Request r;
    GS_MPI(MPI_Isend(p + off, static_cast<int>(piece), MPI_BYTE, peer, tag, comm_, &r));
    impl->reqs_.push_back(r);
    off += piece;
  } while (off < bytes);
  return Request(std::move(impl));
}

Request MpiCommunicator::irecv(void* buf, std::size_t bytes, int peer, int tag) {
  auto impl = std::make_unique<MpiRequestImpl>(false, bytes, peer, tag);
  char* p = static_cast<char*>(buf);
  std::size_t off = 0;
  do {
    const std::size_t piece = std::min(kMaxPiece, bytes - off);
    MPI_Request r;
    GS_MPI(MPI_Irecv(p + off, static_cast<int>(piece), MPI_BYTE, peer, tag, comm_, &r));
    impl->reqs_.push_back(r);
    off += piece;
  } while (off < bytes);
  return Request(std::move(impl));
}

void MpiCommunicator::wait_native(MPI_Request& req, const std::string& what) {
  poll_until_done(1, &req, [&] { return what; });
}

void MpiCommunicator::allreduce(const void* sendbuf, void* recvbuf, std::size_t count, DType t, RedOp op) {
  const int n = to_int(count, "MPI_Allreduce");
  {
    WatchGuard guard("MPI_Allreduce", count);
    GS_MPI(MPI_Allreduce(sendbuf == recvbuf ? MPI_IN_PLACE : sendbuf, recvbuf, n, mpi_type(t), mpi_sum(t), comm_));
  }
  if (op == RedOp::Avg) scale_inplace(recvbuf, count, t, 1.0f / static_cast<float>(size_));
}

void MpiCommunicator::reduce_scatter(const void* sendbuf, void* recvbuf, std::size_t recvcount, DType t,
                                     RedOp op) {
  to_int(recvcount * static_cast<std::size_t>(size_), "MPI_Reduce_scatter_block");
  {
    WatchGuard guard("MPI_Reduce_scatter_block", recvcount);
    GS_MPI(MPI_Reduce_scatter_block(sendbuf == recvbuf ? MPI_IN_PLACE : sendbuf, recvbuf,
                                    static_cast<int>(recvcount), mpi_type(t), mpi_sum(t), comm_));
  }
  if (op == RedOp::Avg) scale_inplace(recvbuf, recvcount, t, 1.0f / static_cast<float>(size_));
}

void MpiCommunicator::allgather(const void* sendbuf, void* recvbuf, std::size_t sendcount, DType t) {
  to_int(sendcount * static_cast<std::size_t>(size_), "MPI_Allgather");
  const bool in_place =
      sendbuf == static_cast<const char*>(recvbuf) + static_cast<std::size_t>(rank_) * sendcount * dtype_size(t);
  WatchGuard guard("MPI_Allgather", sendcount);
  GS_MPI(MPI_Allgather(in_place ? MPI_IN_PLACE : sendbuf, static_cast<int>(sendcount), mpi_type(t), recvbuf,
                       static_cast<int>(sendcount), mpi_type(t), comm_));
}

void MpiCommunicator::alltoall(const void* sendbuf, void* recvbuf, std::size_t count, DType t) {
  to_int(count * static_cast<std::size_t>(size_), "MPI_Alltoall");
  WatchGuard guard("MPI_Alltoall", count);
  GS_MPI(MPI_Alltoall(sendbuf == recvbuf ? MPI_IN_PLACE : sendbuf, static_cast<int>(count), mpi_type(t), recvbuf,
                      static_cast<int>(count), mpi_type(t), comm_));
}

void MpiCommunicator::broadcast(void* buf, std::size_t count, DType t, int root) {
  const int n = to_int(count, "MPI_Bcast");
  WatchGuard guard("MPI_Bcast", count);
  GS_MPI(MPI_Bcast(buf, n, mpi_type(t), root, comm_));
}

void MpiCommunicator::barrier() {
  MPI_Request req;
  GS_MPI(MPI_Ibarrier(comm_, &req));
  wait_native(req, "MPI_Ibarrier");
}

double MpiCommunicator::max_double(double v) {
  double out = 0;
  MPI_Request req;
  GS_MPI(MPI_Iallreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, comm_, &req));
  wait_native(req, "MPI_Iallreduce(max)");
  return out;
}

double MpiCommunicator::sum_double(double v) {
  double out = 0;
  MPI_Request req;
  GS_MPI(MPI_Iallreduce(&v, &out, 1, MPI_DOUBLE, MPI_SUM, comm_, &req));
  wait_native(req, "MPI_Iallreduce(sum)");
  return out;
}

std::int64_t MpiCommunicator::min_int64(std::int64_t v) {
  std::int64_t out = 0;
  MPI_Request req;
  GS_MPI(MPI_Iallreduce(&v, &out, 1, MPI_INT64_T, MPI_MIN, comm_, &req));
  wait_native(req, "MPI_Iallreduce(min)");
  return out;
}

std::int64_t MpiCommunicator::max_int64(std::int64_t v) {
  std::int64_t out = 0;
  MPI_Request req;
  GS_MPI(MPI_Iallreduce(&v, &out, 1, MPI_INT64_T, MPI_MAX, comm_, &req));
  wait_native(req, "MPI_Iallreduce(max)");
  return out;
}

std::vector<std::string> MpiCommunicator::allgather_strings(const std::string& s) {
  int len = static_cast<int>(s.size());
  std::vector<int> lens(static_cast<std::size_t>(size_));
  MPI_Request req;
  GS_MPI(MPI_Iallgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, comm_, &req));
  wait_native(req, "MPI_Iallgather(lengths)");
  std::vector<int> displs(static_cast<std::size_t>(size_), 0);
  for (int i = 1; i < size_; ++i) displs[i] = displs[i - 1] + lens[i - 1];
  std::vector<char> all(static_cast<std::size_t>(displs.back() + lens.back()) + 1);
  GS_MPI(MPI_Iallgatherv(s.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, comm_, &req));
  wait_native(req, "MPI_Iallgatherv(strings)");
  std::vector<std::string> out;
  for (int i = 0; i < size_; ++i) out.emplace_back(all.data() + displs[i], static_cast<std::size_t>(lens[i]));
  return out;
}

void MpiCommunicator::broadcast_bytes(std::vector<char>& bytes, int root) {
  std::int64_t n = static_cast<std::int64_t>(bytes.size());
  MPI_Request req;
  GS_MPI(MPI_Ibcast(&n, 1, MPI_INT64_T, root, comm_, &req));
  wait_native(req, "MPI_Ibcast(size)");
  bytes.resize(static_cast<std::size_t>(n));
  if (n > 0) {
    GS_MPI(MPI_Ibcast(bytes.data(), to_int(bytes.size(), "broadcast_bytes"), MPI_CHAR, root, comm_, &req));
    wait_native(req, "MPI_Ibcast(bytes)");
  }
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  MPI_Comm sub;
  GS_MPI(MPI_Comm_split(comm_, color, key, &sub));
  return std::make_unique<MpiCommunicator>(sub);
}

// ---- shared segments and peer links ---------------------------------------------------------

namespace {

// An MPI-3 shared window, locked once for passive-target access by every rank (the
// "unified" memory model of MPI_Win_allocate_shared: loads and stores, ordered by
// MPI_Win_sync around a barrier).
class MpiSharedSegment final : public SharedSegment {
 public:
  MpiSharedSegment(MPI_Comm comm, int size, std::size_t bytes) : comm_(comm), bytes_(bytes) {
    // More ranks on the node than cores we may run on: a rank waiting in sync() gives its
    // core away at once (the ranks it waits for need it), else after a short spin.
    cpu_set_t set;
    CPU_ZERO(&set);
    const int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    yield_after_ = size > cores ? 0 : 200;
    MPI_Info info;
    GS_MPI(MPI_Info_create(&info));
    GS_MPI(MPI_Info_set(info, "alloc_shared_noncontig", "true"));  // each part on its owner's NUMA node
    void* mine = nullptr;
    const int rc = MPI_Win_allocate_shared(static_cast<MPI_Aint>(bytes), 1, info, comm_, &mine, &win_);
    MPI_Info_free(&info);
    GS_MPI(rc);
    parts_.resize(static_cast<std::size_t>(size));
    for (int r = 0; r < size; ++r) {
      MPI_Aint len = 0;
      int disp = 0;
      GS_MPI(MPI_Win_shared_query(win_, r, &len, &disp, &parts_[static_cast<std::size_t>(r)]));
    }
    GS_MPI(MPI_Win_lock_all(MPI_MODE_NOCHECK, win_));
  }
  ~MpiSharedSegment() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    // Freeing is collective: not while unwinding from a failed wait (it would hang on the
    // peer that is gone) nor after one; the window goes with the process.
    if (finalized || g_peer_lost.load() || std::uncaught_exceptions() > 0) return;
    MPI_Win_unlock_all(win_);
    MPI_Win_free(&win_);
  }
  MpiSharedSegment(const MpiSharedSegment&) = delete;
  MpiSharedSegment& operator=(const MpiSharedSegment&) = delete;

  std::size_t bytes_per_rank() const override { return bytes_; }
  void* part(int rank) override { return parts_[static_cast<std::size_t>(rank)]; }
  void sync() override {
    GS_MPI(MPI_Win_sync(win_));  // my stores are complete ...
    MPI_Request req;
    GS_MPI(MPI_Ibarrier(comm_, &req));  // ... everyone's are ...
    poll_until_done(1, &req, [] { return std::string("MPI_Ibarrier of a shared segment"); }, yield_after_);
    GS_MPI(MPI_Win_sync(win_));  // ... and my loads see them
  }

 private:
  MPI_Comm comm_;
  std::size_t bytes_;
  MPI_Win win_ = MPI_WIN_NULL;
  std::vector<void*> parts_;
  long yield_after_ = 200;  // polls of the barrier before each one yields the core
};

// An Open MPI size control variable read through MPI_T (e.g. btl_tcp_eager_limit), or 0
// when the library does not expose it.
std::size_t read_size_cvar(const char* name) {
  int provided = 0;
  if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return 0;
  std::size_t value = 0;
  int index = -1;
  if (MPI_T_cvar_get_index(name, &index) == MPI_SUCCESS) {
    MPI_T_cvar_handle handle;
    int count = 0;
    if (MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) == MPI_SUCCESS) {
      if (count == 1) {
        unsigned long long v = 0;  // Open MPI registers sizes as size_t / unsigned long
        if (MPI_T_cvar_read(handle, &v) == MPI_SUCCESS) value = static_cast<std::size_t>(v);
      }
      MPI_T_cvar_handle_free(&handle);
    }
  }
  MPI_T_finalize();
  return value;
}

}  // namespace

std::unique_ptr<SharedSegment> MpiCommunicator::allocate_shared(std::size_t bytes_per_rank) {
  if (local_size_ != size_) return nullptr;  // the same answer on every rank
  return std::make_unique<MpiSharedSegment>(comm_, size_, std::max<std::size_t>(bytes_per_rank, 64));
}

PeerLink MpiCommunicator::link_to(int peer) const {
  PeerLink link;
  if (peer < 0 || peer >= size_) return link;
  if (leader_of_[static_cast<std::size_t>(peer)] == leader_of_[static_cast<std::size_t>(rank_)]) {
    link.kind = PeerLink::Kind::SharedMemory;
    link.transport = "sm";
    return link;
  }
  // Off the node: Open MPI's TCP BTL (the only network transport of the machines we run
  // on). Its eager limit is btl_tcp_eager_limit, 64 KiB unless changed.
  static const std::size_t eager = [] {
    const std::size_t v = read_size_cvar("btl_tcp_eager_limit");
    return v > 0 ? v : std::size_t{64} << 10;
  }();
  link.kind = PeerLink::Kind::Network;
  link.transport = "tcp";
  link.eager_limit = eager;
  return link;
}

}  // namespace gradsync
