// gradsync_torch native hook: DDP's all-reduce of a bucket, timed, as a C++ communication hook.
//
// Purpose: the recorder needs every bucket's ready/start/end. A Python communication hook
// gives them but costs about 1 ms a step for the example CNN at 1 MB buckets on 2 ranks
// (PyTorch's own Python allreduce_hook costs the same: gradsync_torch.overhead
// --plain-hook allreduce), which is more than issue 12's 2% budget against DDP's built-in
// all-reduce. This hook does what DDP's built-in ALLREDUCE hook does (c10d's
// AllReduceCommHook: the bucket divided by the world size, then all-reduced on the DDP
// model's process group) and stamps the times in C++; Python reads them once a step.
// Used only when the user passes no hook and buckets overlap backward (recorder.py).
//
// Where the process group takes collective hooks (c10d Hooks.hpp, torch 2.15), the recorder
// registers no communication hook at all (install_observer): DDP then runs its own
// all-reduce, which divides each gradient while copying it into its bucket, where any comm
// hook divides the bucket in a pass of its own (117-128 us a step for the example at 4.7 MB
// on this project's 2-core host). A pre-hook on the process group stamps each all-reduce DDP
// issues from inside a backward (its bucket's launch, in bucket order), the post-hook
// stamps the end from the work's future.
//
// Clock: std::chrono::steady_clock is CLOCK_MONOTONIC, the clock of Python's
// time.perf_counter() on Linux, so the stamps share the recorder's time base.
#include <torch/extension.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/graph_task.h>
#if __has_include(<torch/csrc/distributed/c10d/Hooks.hpp>)
#include <torch/csrc/distributed/c10d/Hooks.hpp>
#define GRADSYNC_PG_HOOKS 1  // a torch whose process groups take collective hooks (2.15)
#endif
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct BucketRow {
  int64_t index = 0;
  int64_t bytes = 0;
  double ready = 0, start = 0, end = 0;
  bool last = false;
  int64_t buffer = 0;           // the bucket buffer's data pointer
  std::vector<int64_t> params;  // the parameters' data pointers, while asked for
};

// Shared by the hook (the autograd thread), its futures' callbacks (the backend's threads)
// and Python (take(), between steps).
class BucketLog : public std::enable_shared_from_this<BucketLog> {
 public:
  size_t add(BucketRow row) {  // the row's slot, for set_end
    std::lock_guard<std::mutex> g(mu_);
    rows_.push_back(std::move(row));
    return base_ + rows_.size() - 1;
  }
  void set_end(size_t slot, double t) {
    {
      std::lock_guard<std::mutex> g(mu_);
      if (slot >= base_ && slot - base_ < rows_.size()) rows_[slot - base_].end = t;
    }
    ended_.notify_all();
  }
  void backward_done(double t) {
    std::lock_guard<std::mutex> g(mu_);
    done_.push_back(t);
  }
  // From inside a backward that DDP takes part in: an autograd callback queued after DDP's
  // own end-of-backward callback (DDP queues it at its first gradient), so it runs once DDP
  // has waited for every bucket and written the gradients back; it stamps backward_done.
  void queue_backward_done() {
    auto self = shared_from_this();
    torch::autograd::Engine::get_default_engine().queue_callback([self] { self->backward_done(now_s()); });
  }
  // Stamps the moment the first gradient reaches `output` (the start of backward) with a C++
  // tensor hook: the recorder's forward post-hook calls it once a step (a Python tensor hook
  // cost about 35 us a step to register on this project's 2-core host).
  void stamp_first_grad(const at::Tensor& output) {
    auto self = shared_from_this();
    output.register_hook([self](const at::TensorBase&) {
      std::lock_guard<std::mutex> g(self->mu_);
      if (self->first_grad_ == 0) self->first_grad_ = now_s();
    });
  }
  // Whether a first gradient was stamped since the last take(): a synchronized backward ran
  // (the recorder asks at each forward: one that follows it without an optimizer step ends
  // the step as skipped).
  bool grad_seen() {
    std::lock_guard<std::mutex> g(mu_);
    return first_grad_ != 0;
  }
  // ([(index, bytes, ready, start, end, last, params or None, buffer)], [backward-done times],
  // first-gradient time or 0); clears them.
  // A future's waiters wake before its callbacks run (c10::ivalue::Future::markCompleted),
  // so an end stamped by a callback may trail DDP's wait by microseconds: take() gives the
  // rows up to `wait_s` to be stamped (an end still 0 then stays 0: the recorder writes NaN).
  py::tuple take(double wait_s) {
    std::vector<BucketRow> rows;
    std::vector<double> done;
    double first_grad = 0;
    auto ended = [this] {
      for (const auto& r : rows_)
        if (r.end == 0) return false;
      return true;
    };
    auto swap_out = [&] {
      rows.swap(rows_);
      done.swap(done_);
      std::swap(first_grad, first_grad_);
      base_ += rows.size();
    };
    {
      std::unique_lock<std::mutex> g(mu_);
      if (ended()) {
        swap_out();
      } else {
        g.unlock();
        py::gil_scoped_release nogil;
        g.lock();
        ended_.wait_for(g, std::chrono::duration<double>(wait_s), ended);
        swap_out();
      }
    }
    py::list out;
    for (const auto& r : rows) {
      py::object params = py::none();
      if (!r.params.empty()) params = py::cast(r.params);
      out.append(py::make_tuple(r.index, r.bytes, r.ready, r.start, r.end, r.last, params, r.buffer));
    }
    return py::make_tuple(out, py::cast(done), first_grad);
  }
  std::atomic<bool> want_params{true};
  std::atomic<bool> recording{true};  // false: the hook only all-reduces (after the recorder's stop())

 private:
  std::mutex mu_;
  std::condition_variable ended_;
  std::vector<BucketRow> rows_;
  std::vector<double> done_;
  double first_grad_ = 0;
  size_t base_ = 0;  // slots already taken
};

class TimedAllReduceHook : public c10d::CppCommHookInterface<c10::intrusive_ptr<c10d::ProcessGroup>> {
 public:
  TimedAllReduceHook(const c10::intrusive_ptr<c10d::ProcessGroup>& pg, std::shared_ptr<BucketLog> log)
      : CppCommHookInterface(pg), log_(std::move(log)) {}

  c10::intrusive_ptr<c10::ivalue::Future> runHook(c10d::GradBucket& bucket) override {
    if (!log_->recording.load(std::memory_order_relaxed)) {
      std::vector<at::Tensor> tensors = {bucket.getBufferRef()};
      tensors[0] /= state_->getSize();
      return state_->allreduce(tensors)->getFuture();
    }
    BucketRow row;
    row.ready = now_s();
    row.index = static_cast<int64_t>(bucket.getIndex());
    row.last = bucket.isLast();
    at::Tensor& buffer = bucket.getBufferRef();
    row.bytes = buffer.numel() * buffer.element_size();
    row.buffer = reinterpret_cast<int64_t>(buffer.data_ptr());
    if (log_->want_params.load(std::memory_order_relaxed)) {
      for (const auto& p : bucket.getParameters()) row.params.push_back(reinterpret_cast<int64_t>(p.data_ptr()));
    }
    if (row.last) {
      log_->queue_backward_done();
    }
    row.start = now_s();
    const size_t slot = log_->add(std::move(row));
    std::vector<at::Tensor> tensors = {buffer};
    tensors[0] /= state_->getSize();  // as AllReduceCommHook: divide first (no fp16 overflow)
    auto fut = state_->allreduce(tensors)->getFuture();
    auto log = log_;
    // then(), not a callback: DDP waits for the returned future, so the end is stamped
    // before DDP (and the recorder, at the optimizer step) sees the bucket complete.
    return fut->then(
        [log, slot](c10::ivalue::Future& f) {
          log->set_end(slot, now_s());
          return c10::IValue(f.value().toTensorVector()[0]);
        },
        c10::TensorType::get());
  }

 private:
  std::shared_ptr<BucketLog> log_;
};

// DDP's own all-reduces, observed on the process group: the all-reduces issued from inside a
// backward (autograd's current graph task) with a floating-point tensor are the buckets, in
// launch (= index) order; DDP's unused-parameter map (int) and collectives outside backward
// (the user's, the recorder's) are not. Only while armed (the recorder arms it at the
// recorded model's forward and disarms it at its optimizer step): another model on the
// same process group is not seen, and pays one flag test per collective. Rows carry their
// order in the backward as index and the buffer's address; the recorder checks both
// against DDP's buckets. Hooks fire on the thread that issues the collective (DDP: the
// autograd thread); the end comes from the work's future. Built only where torch has the
// hooks (GRADSYNC_PG_HOOKS); elsewhere the module has no install_observer (native.py).
#ifdef GRADSYNC_PG_HOOKS
class PgObserver {
 public:
  PgObserver(c10::intrusive_ptr<c10d::ProcessGroup> pg, std::shared_ptr<BucketLog> log, int64_t hook_id)
      : pg_(std::move(pg)), log_(std::move(log)), id_(hook_id) {}

  void attach(const std::shared_ptr<PgObserver>& self) {
    pg_->registerPreHook(id_, [self](const c10d::PreHookArgs& a) { self->pre(a); });
    pg_->registerPostHook(id_, [self](const c10d::PostHookArgs& a) { self->post(a); });
    attached_ = true;
  }
  // Unregisters both hooks (between steps: c10d expects registration outside collectives).
  void detach() {
    if (!attached_) return;
    pg_->unregisterPreHook(id_);
    pg_->unregisterPostHook(id_);
    attached_ = false;
  }

  std::atomic<bool> armed{false};

 private:
  void pre(const c10d::PreHookArgs& a) {
    if (!armed.load(std::memory_order_relaxed)) return;
    if (a.name != c10d::HookOpName::ALLREDUCE || a.input_tensors.size() != 1) return;
    const int task = torch::autograd::get_current_graph_task_id();
    if (task < 0 || !at::isFloatingType(a.input_tensors[0].scalar_type())) return;
    BucketRow row;
    row.ready = row.start = now_s();
    const at::Tensor& t = a.input_tensors[0];
    row.bytes = t.numel() * t.element_size();
    row.buffer = reinterpret_cast<int64_t>(t.data_ptr());
    std::lock_guard<std::mutex> g(mu_);
    if (task != task_) {
      task_ = task;  // the backward's first bucket
      order_ = 0;
      log_->queue_backward_done();
    }
    row.index = order_++;
    slots_[a.op_id] = log_->add(std::move(row));
  }

  void post(const c10d::PostHookArgs& a) {
    size_t slot;
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = slots_.find(a.op_id);
      if (it == slots_.end()) return;
      slot = it->second;
      slots_.erase(it);
    }
    auto log = log_;
    if (!a.work) {  // issued synchronously: already done
      log->set_end(slot, now_s());
      return;
    }
    a.work->getFuture()->addCallback([log, slot](c10::ivalue::Future&) { log->set_end(slot, now_s()); });
  }

  c10::intrusive_ptr<c10d::ProcessGroup> pg_;
  std::shared_ptr<BucketLog> log_;
  const int64_t id_;
  bool attached_ = false;
  std::mutex mu_;
  int task_ = -1;
  int64_t order_ = 0;
  std::unordered_map<int64_t, size_t> slots_;  // op_id -> row slot, between pre and post
};

// Registers the observer on a DDP model's process group; (log, observer).
py::tuple install_observer(const py::object& process_group, int64_t hook_id) {
  auto pg = process_group.cast<c10::intrusive_ptr<c10d::ProcessGroup>>();
  auto log = std::make_shared<BucketLog>();
  auto obs = std::make_shared<PgObserver>(pg, log, hook_id);
  obs->attach(obs);
  return py::make_tuple(log, obs);
}
#endif  // GRADSYNC_PG_HOOKS

// Registers the hook on a DDP model's reducer (model.reducer) with its process group
// (model.process_group); DDP takes one hook, so this fails if one is registered.
std::shared_ptr<BucketLog> install(const py::object& reducer, const py::object& process_group) {
  auto r = reducer.cast<std::shared_ptr<c10d::Reducer>>();
  auto pg = process_group.cast<c10::intrusive_ptr<c10d::ProcessGroup>>();
  auto log = std::make_shared<BucketLog>();
  r->register_comm_hook(std::make_unique<TimedAllReduceHook>(pg, log));
  return log;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  py::class_<BucketLog, std::shared_ptr<BucketLog>>(m, "BucketLog")
      .def("take", &BucketLog::take, py::arg("wait_s") = 0.0)
      .def("stamp_first_grad", &BucketLog::stamp_first_grad, py::arg("output"))
      .def_property_readonly("grad_seen", &BucketLog::grad_seen)
      .def_property(
          "want_params", [](const BucketLog& l) { return l.want_params.load(); },
          [](BucketLog& l, bool v) { l.want_params.store(v); })
      .def_property(
          "recording", [](const BucketLog& l) { return l.recording.load(); },
          [](BucketLog& l, bool v) { l.recording.store(v); });
  m.def("install", &install, py::arg("reducer"), py::arg("process_group"));
#ifdef GRADSYNC_PG_HOOKS
  py::class_<PgObserver, std::shared_ptr<PgObserver>>(m, "PgObserver")
      .def("detach", &PgObserver::detach)
      .def_property(
          "armed", [](const PgObserver& o) { return o.armed.load(); },
          [](PgObserver& o, bool v) { o.armed.store(v); });
  m.def("install_observer", &install_observer, py::arg("process_group"), py::arg("hook_id"));
#endif
}
