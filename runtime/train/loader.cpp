// gradsync/train/loader.cpp — see loader.hpp.
#include "train/loader.hpp"

#include <chrono>

#include "core/error.hpp"

namespace gradsync::train {

Loader::Loader(const DistributedSampler& sampler, const SyntheticDataset* dataset, LoaderOptions opts)
    : sampler_(sampler), dataset_(dataset), opts_(opts) {
  GS_USAGE_CHECK(opts_.batch > 0, "loader: batch must be positive");
  GS_USAGE_CHECK(opts_.batches_per_epoch > 0 && opts_.batches_per_epoch * opts_.batch <= sampler_.samples_per_rank(),
                 "loader: ", opts_.batches_per_epoch, " batches of ", opts_.batch, " do not fit in the ",
                 sampler_.samples_per_rank(), " samples of this rank's share");
  GS_USAGE_CHECK(opts_.workers >= 0, "--loader-workers must be >= 0");
  GS_USAGE_CHECK(opts_.workers == 0 || opts_.prefetch >= 1, "--prefetch must be >= 1 with loader workers");
  for (int i = 0; i < opts_.workers; ++i) threads_.emplace_back([this] { worker_loop(); });
}

Loader::~Loader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  for (auto& t : threads_) t.join();
}

Batch Loader::build(std::int64_t k) const {
  const auto start = std::chrono::steady_clock::now();
  Batch b;
  b.index = k;
  b.epoch = k / opts_.batches_per_epoch;
  const std::int64_t first = (k % opts_.batches_per_epoch) * opts_.batch;
  b.samples.resize(static_cast<std::size_t>(opts_.batch));
  sampler_.indices(b.epoch, first, opts_.batch, b.samples.data());
  if (dataset_) {
    const std::int64_t n = dataset_->sample_size();
    b.x.resize(static_cast<std::size_t>(opts_.batch * n));
    b.y.resize(static_cast<std::size_t>(opts_.batch));
    for (std::int64_t i = 0; i < opts_.batch; ++i)
      b.y[static_cast<std::size_t>(i)] =
          dataset_->sample(Split::Train, b.samples[static_cast<std::size_t>(i)], b.x.data() + i * n);
  }
  if (opts_.data_time_s > 0) {
    // The emulated cost is the *total* time of the batch: generation above counts toward it.
    const auto cost = std::chrono::duration<double>(opts_.data_time_s * static_cast<double>(opts_.batch));
    std::this_thread::sleep_until(start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(cost));
  }
  return b;
}

void Loader::worker_loop() {
  for (;;) {
    std::int64_t k = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_work_.wait(lock, [&] {
        return stop_ || (claimed_ < opts_.total_batches && claimed_ < consumed_ + opts_.prefetch);
      });
      if (stop_) return;
      k = claimed_++;
    }
    try {
      Batch b = build(k);
      std::lock_guard<std::mutex> lock(mu_);
      ready_.emplace(k, std::move(b));
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
    cv_ready_.notify_all();
  }
}

Batch Loader::next() {
  GS_CHECK(consumed_ < opts_.total_batches, "loader: asked for batch ", consumed_, " of ", opts_.total_batches);
  if (threads_.empty()) return build(consumed_++);
  Batch b;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_ready_.wait(lock, [&] { return error_ || ready_.count(consumed_) != 0; });
    if (error_) std::rethrow_exception(error_);
    auto it = ready_.find(consumed_);
    b = std::move(it->second);
    ready_.erase(it);
    ++consumed_;
  }
  cv_work_.notify_all();  // a slot in the prefetch window opened
  return b;
}

}  // namespace gradsync::train
