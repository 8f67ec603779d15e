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
// Clock: std::chrono::steady_clock is CLOCK_MONOTONIC, the clock of Python's
// time.perf_counter() on Linux, so the stamps share the recorder's time base.
#include <torch/extension.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
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
  std::vector<int64_t> params;  // the parameters' data pointers, while asked for
};

// Shared by the hook (the autograd thread), its futures' callbacks (the backend's threads)
// and Python (take(), between steps).
class BucketLog {
 public:
  size_t add(BucketRow row) {  // the row's slot, for set_end
    std::lock_guard<std::mutex> g(mu_);
    rows_.push_back(std::move(row));
    return base_ + rows_.size() - 1;
  }
  void set_end(size_t slot, double t) {
    std::lock_guard<std::mutex> g(mu_);
    if (slot >= base_ && slot - base_ < rows_.size()) rows_[slot - base_].end = t;
  }
  void backward_done(double t) {
    std::lock_guard<std::mutex> g(mu_);
    done_.push_back(t);
  }
  // ([(index, bytes, ready, start, end, last, params or None)], [backward-done times]); clears both.
  py::tuple take() {
    std::vector<BucketRow> rows;
    std::vector<double> done;
    {
      std::lock_guard<std::mutex> g(mu_);
      rows.swap(rows_);
      done.swap(done_);
      base_ += rows.size();
    }
    py::list out;
    for (const auto& r : rows) {
      py::object params = py::none();
      if (!r.params.empty()) params = py::cast(r.params);
      out.append(py::make_tuple(r.index, r.bytes, r.ready, r.start, r.end, r.last, params));
    }
    return py::make_tuple(out, py::cast(done));
  }
  std::atomic<bool> want_params{true};
  std::atomic<bool> recording{true};  // false: the hook only all-reduces (after the recorder's stop())

 private:
  std::mutex mu_;
  std::vector<BucketRow> rows_;
  std::vector<double> done_;
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
    if (log_->want_params.load(std::memory_order_relaxed)) {
      for (const auto& p : bucket.getParameters()) row.params.push_back(reinterpret_cast<int64_t>(p.data_ptr()));
    }
    if (row.last) {
      // Queued after DDP's own end-of-backward callback (queued at its first gradient): it
      // runs once DDP has waited for every bucket and written the gradients back.
      auto log = log_;
      torch::autograd::Engine::get_default_engine().queue_callback([log] { log->backward_done(now_s()); });
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
      .def("take", &BucketLog::take)
      .def_property(
          "want_params", [](const BucketLog& l) { return l.want_params.load(); },
          [](BucketLog& l, bool v) { l.want_params.store(v); })
      .def_property(
          "recording", [](const BucketLog& l) { return l.recording.load(); },
          [](BucketLog& l, bool v) { l.recording.store(v); });
  m.def("install", &install, py::arg("reducer"), py::arg("process_group"));
}
