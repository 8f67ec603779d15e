// gradsync/train/reducer.cpp — see reducer.hpp.
#include "train/reducer.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "comm/shared_buffer.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"
#include "device/host.hpp"
#include "plan/buckets.hpp"

namespace gradsync::train {

BucketReadiness::BucketReadiness(const std::vector<std::vector<std::size_t>>& assignment, std::size_t ntensors)
    : bucket_of_(ntensors, 0), marked_(ntensors, 0), pending_(assignment.size(), 0), complete_(assignment.size(), 0) {
  for (std::size_t b = 0; b < assignment.size(); ++b) {
    size_.push_back(assignment[b].size());
    for (std::size_t i : assignment[b]) bucket_of_[i] = b;
  }
}

void BucketReadiness::reset() {
  std::fill(marked_.begin(), marked_.end(), 0);
  pending_ = size_;
  std::fill(complete_.begin(), complete_.end(), 0);
  next_ = 0;
  marked_count_ = 0;
}

bool BucketReadiness::mark(std::size_t i, const char* who) {
  GS_CHECK(i < marked_.size() && !marked_[i], who, ": gradient of tensor ", i, " marked ready twice or unknown");
  marked_[i] = 1;
  ++marked_count_;
  const std::size_t b = bucket_of_[i];
  if (--pending_[b] != 0) return false;
  complete_[b] = 1;
  return true;
}

bool BucketReadiness::pop_launchable(std::size_t& b) {
  if (!launchable()) return false;
  b = next_++;
  return true;
}

namespace {
// A host bucket in a registered shared buffer, zeroed as Device::zeros.
class SharedArray final : public device::Array {
 public:
  SharedArray(std::unique_ptr<SharedBuffer> buffer, std::size_t count) : buffer_(std::move(buffer)) {
    data_ = static_cast<float*>(buffer_->data());
    count_ = count;
    std::memset(data_, 0, count * sizeof(float));
  }

 private:
  std::unique_ptr<SharedBuffer> buffer_;
};
}  // namespace

Reducer::Reducer(Communicator& comm, AllreduceAlgorithm& allreduce, Compressor& compressor,
                 std::vector<models::TensorSpec> tensors, ReducerOptions opts)
    : Reducer(device::host_device(), ReducerComms{&comm, &allreduce, nullptr, nullptr}, compressor, std::move(tensors),
              opts) {}

Reducer::Reducer(device::Device& dev, ReducerComms comms, Compressor& compressor,
                 std::vector<models::TensorSpec> tensors, ReducerOptions opts)
    : dev_(dev), comms_(comms), compressor_(compressor), tensors_(std::move(tensors)), opts_(opts) {
  GS_CHECK(!tensors_.empty(), "reducer: the model has no parameters");
  GS_CHECK(comms_.host != nullptr && comms_.host_algo != nullptr, "reducer: no host communicator");
  GS_CHECK((comms_.device == nullptr) == (comms_.device_algo == nullptr), "reducer: a device communicator needs its algorithm");
  // Decided once: device buckets go in place only where a device communicator exists and
  // the compressor touches them through it alone.
  staged_ = !dev_.host_memory() && !(comms_.device != nullptr && compressor_.accepts_device_memory());
  std::vector<std::int64_t> bytes;
  for (const auto& t : tensors_) bytes.push_back(t.numel() * static_cast<std::int64_t>(sizeof(float)));
  assignment_ = plan::assign_buckets(bytes, opts_.bucket_bytes, opts_.first_bucket_bytes);

  const std::size_t nb = assignment_.size();
  // Registered buckets: host memory only (a device's buckets are the device's), every rank
  // the same decision (allocation is collective; nullptr everywhere across nodes). Each
  // bucket is one collective allocation, so only where every rank has the same buckets: a
  // layout that differs is refused by the caller (check_same_on_all_ranks on layout()),
  // which must not hang in here first.
  shared_buckets_ = opts_.shared_buckets && dev_.host_memory();
  if (shared_buckets_) {
    std::int64_t elements = 0;
    for (const auto& t : tensors_) elements += t.numel();
    const auto buckets = static_cast<std::int64_t>(nb);
    Communicator& c = *comms_.host;
    shared_buckets_ = c.min_int64(buckets) == c.max_int64(buckets) && c.min_int64(elements) == c.max_int64(elements);
  }
  storage_.resize(nb);
  mirror_.resize(nb);
  views_.resize(nb);
  grad_ptr_.assign(tensors_.size(), nullptr);
  for (std::size_t b = 0; b < nb; ++b) {
    std::size_t count = 0;
    for (std::size_t i : assignment_[b]) count += static_cast<std::size_t>(tensors_[i].numel());
    if (shared_buckets_) {
      auto shared = SharedBuffer::allocate(*comms_.host, count * sizeof(float));
      shared_buckets_ = shared != nullptr;
      if (shared) storage_[b] = std::make_unique<SharedArray>(std::move(shared), count);
    }
    if (!storage_[b]) storage_[b] = dev_.zeros(count);
    if (staged_) mirror_[b] = dev_.host_mirror(count);
    BucketView& v = views_[b];
    v.index = static_cast<int>(b);
    v.data = staged_ ? mirror_[b]->data() : storage_[b]->data();
    v.kernels = dev_.host_memory() || staged_ ? nullptr : dev_.bucket_kernels();  // in place on a device
    v.count = count;
    std::size_t off = 0;
    for (std::size_t i : assignment_[b]) {
      const auto n = static_cast<std::size_t>(tensors_[i].numel());
      v.tensors.push_back(TensorView{tensors_[i].name, tensors_[i].shape, off, n});
      grad_ptr_[i] = storage_[b]->data() + off;
      off += n;
    }
  }
  dev_.prepare_buckets(nb);
  readiness_ = BucketReadiness(assignment_, tensors_.size());
  records_.resize(nb);
  stats_.resize(nb);
  GS_LOG(INFO) << "reducer: " << tensors_.size() << " tensors in " << nb << " buckets on " << dev_.name()
               << (dev_.host_memory() ? "" : staged_ ? " (staged through host memory)" : " (in place, device communicator)")
               << ", overlap " << (opts_.overlap ? "on" : "off");
  thread_ = std::thread([this] { comm_loop(); });
}

Reducer::~Reducer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_queue_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::vector<std::int64_t> Reducer::bucket_bytes() const {
  std::vector<std::int64_t> out;
  for (const auto& v : views_) out.push_back(static_cast<std::int64_t>(v.count * sizeof(float)));  // fp32 on every device
  return out;
}

std::string bucket_layout(std::int64_t bucket_bytes, std::int64_t first_bucket_bytes, std::size_t ntensors,
                          const std::vector<std::vector<std::size_t>>& assignment,
                          const std::vector<std::int64_t>& bytes_per_bucket) {
  std::ostringstream os;
  os << "bucket_bytes=" << bucket_bytes << " first_bucket_bytes=" << first_bucket_bytes << " tensors=" << ntensors
     << " buckets=" << assignment.size() << ":";
  for (std::size_t b = 0; b < assignment.size(); ++b)
    os << " [" << assignment[b].front() << ".." << assignment[b].back() << "]=" << bytes_per_bucket[b];
  return os.str();
}

std::string Reducer::layout() const {
  return bucket_layout(opts_.bucket_bytes, opts_.first_bucket_bytes, tensors_.size(), assignment_, bucket_bytes());
}

void Reducer::begin_backward(double t0, std::int64_t step, bool sync, float inv_scale) {
  const double t = now_s();
  GS_CHECK(!in_backward_, "reducer: begin_backward twice without finish_backward");
  GS_CHECK(opts_.unscale != Unscale::None || inv_scale == 1.f, "reducer: a loss scale (1/", inv_scale,
           ") without unscaling");
  in_backward_ = true;
  t0_ = t0;
  step_ = step;
  sync_ = sync;
  readiness_.reset();
  launch_wall_s_ = 0;
  if (sync_) {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = 0;
    comm_overhead_s_ = 0;
    inv_scale_ = inv_scale;
    found_inf_ = false;
    unscale_s_ = 0;
    for (std::size_t b = 0; b < views_.size(); ++b) {
      records_[b] = BucketRecord{static_cast<std::int64_t>(views_[b].count * sizeof(float)), 0, 0, 0, 0};
      stats_[b] = CompressStats{};
    }
  }
  train_overhead_s_ = now_s() - t;
}

void Reducer::mark_ready(std::size_t i) {
  const double t = now_s();
  GS_CHECK(in_backward_, "reducer: mark_ready(", i, ") outside backward");
  if (readiness_.mark(i, "reducer") && sync_) {
    const std::size_t b = readiness_.bucket_of(i);
    records_[b].ready_s = t - t0_;  // only this thread writes ready_s
    dev_.bucket_produced(b);        // cuda: the bucket's event, after its gradients' kernels
    if (opts_.overlap) {
      train_overhead_s_ += now_s() - t;
      timed_launch();
      return;
    }
  }
  train_overhead_s_ += now_s() - t;
}

// The reducer's share is the launch's CPU time on this thread: waking the communication
// thread is a futex syscall of a few microseconds, but on an oversubscribed machine the
// woken thread can preempt the waker for a whole time slice, which wall-clock time would
// charge to the reducer (that wall time is launch_wall_s_).
void Reducer::timed_launch() {
  if (!readiness_.launchable()) return;
  const double w = now_s(), c = thread_cpu_s();
  launch_ready_buckets();
  train_overhead_s_ += thread_cpu_s() - c;
  launch_wall_s_ += now_s() - w;
}

void Reducer::launch_ready_buckets() {
  for (std::size_t b; readiness_.pop_launchable(b);) push(b);
}

void Reducer::push(std::size_t b) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(b);
  }
  cv_queue_.notify_one();
}

StepComm Reducer::finish_backward() {
  double t = now_s();
  GS_CHECK(in_backward_, "reducer: finish_backward without begin_backward");
  in_backward_ = false;
  GS_CHECK(readiness_.marked() == tensors_.size(), "reducer: backward marked ", readiness_.marked(), " of ", tensors_.size(),
           " gradients ready (every parameter must get a gradient every step)");
  StepComm out;
  if (!sync_) {
    train_overhead_s_ += now_s() - t;
    out.overhead_s = train_overhead_s_;
    return out;
  }
  train_overhead_s_ += now_s() - t;
  timed_launch();  // everything when overlap is off; a no-op otherwise
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_done_.wait(lock, [&] { return done_ == views_.size(); });
    t = now_s();
    if (error_) {
      std::exception_ptr e = error_;
      error_ = nullptr;
      std::rethrow_exception(e);
    }
    out.buckets = records_;
    for (std::size_t b = 0; b < views_.size(); ++b) {
      out.stats.add(stats_[b]);
      out.comm_busy_s += records_[b].end_s - records_[b].start_s;
    }
    out.overhead_s = train_overhead_s_ + comm_overhead_s_;
    out.found_inf = found_inf_;
    out.unscale_s = unscale_s_;
  }
  out.overhead_s += now_s() - t;
  out.launch_wall_s = launch_wall_s_;
  return out;
}

bool Reducer::unscale_bucket(device::Device& work, std::size_t b, float inv_scale, bool zero_bad) {
  BucketView& v = views_[b];
  const bool bad = !work.unscale_check_finite(v.data, v.count, inv_scale);
  if (bad && zero_bad) work.fill_zero(v.data, v.count);
  return bad;
}

void Reducer::reduce_bucket(std::size_t b, std::int64_t step, float inv_scale, CompressStats& st, bool& bad,
                            double& unscale_s) {
  // The working copy: the host mirror (staged) or the bucket itself.
  device::Device& work = staged_ ? device::host_device() : dev_;
  BucketView& v = views_[b];
  if (staged_) dev_.download(storage_[b]->data(), v.data, v.count);
  if (opts_.unscale == Unscale::BeforeReduce) {
    const double u = now_s();
    bad = unscale_bucket(work, b, inv_scale, /*zero_bad=*/true);
    unscale_s += now_s() - u;
  }
  const bool in_place_on_device = !dev_.host_memory() && !staged_;
  compressor_.reduce(in_place_on_device ? *comms_.device : *comms_.host,
                     in_place_on_device ? *comms_.device_algo : *comms_.host_algo, v, step, st);
  if (opts_.unscale == Unscale::AfterReduce) {
    const double u = now_s();
    bad = unscale_bucket(work, b, inv_scale, /*zero_bad=*/false);
    unscale_s += now_s() - u;
  }
  if (staged_) dev_.upload(v.data, storage_[b]->data(), v.count);
}

void Reducer::comm_loop() {
  try {
    dev_.enter_comm_thread();
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::current_exception();  // every bucket is then only counted; finish rethrows
  }
  for (;;) {
    std::size_t b = 0;
    bool failed = false;
    std::int64_t step = 0;
    double t0 = 0;
    float inv_scale = 1.f;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_queue_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and nothing left to do
      b = queue_.front();
      queue_.pop_front();
      failed = error_ != nullptr;
      step = step_;
      t0 = t0_;
      inv_scale = inv_scale_;
    }
    double start = now_s();
    CompressStats st;
    bool bad = false;
    double unscale_s = 0;
    if (!failed) {  // after an error the remaining buckets are only counted, so finish returns
      try {
        dev_.wait_produced(b);  // cuda: the gradients' kernels have run
        start = now_s();
        reduce_bucket(b, step, inv_scale, st, bad, unscale_s);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
      }
    }
    const double end = now_s();
    {
      std::lock_guard<std::mutex> lock(mu_);
      records_[b].start_s = start - t0;
      records_[b].end_s = end - t0;
      records_[b].codec_s = st.encode_s + st.decode_s;
      stats_[b] = st;
      found_inf_ = found_inf_ || bad;
      unscale_s_ += unscale_s;
      ++done_;
      comm_overhead_s_ += now_s() - end;
    }
    cv_done_.notify_one();
  }
}

}  // namespace gradsync::train
