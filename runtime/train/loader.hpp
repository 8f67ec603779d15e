// gradsync/train/loader.hpp — batches for the training loop, built by worker threads ahead
// of time (PyTorch DataLoader's num_workers / prefetch_factor, in threads).
//
// The loader hands out micro-batches 0, 1, 2, ... strictly in order. Micro-batch k is
// batch (k mod batches_per_epoch) of epoch (k div batches_per_epoch) of this rank's
// DistributedSampler share. Building a batch = sampling indices, generating the samples
// (real compute) and then the emulated loading cost: a sleep of batch * data_time_s
// (one sleep per batch: sleeps of a few microseconds per sample would be dominated by
// timer slack), standing for I/O and decoding that do not use the CPU.
//
// workers == 0: next() builds the batch itself, in the training thread, so all of it is
// on the critical path. workers > 0: W threads build batches concurrently, at most
// `prefetch` batches ahead of the consumer (handed out + in flight <= consumed + prefetch);
// next() waits only if its batch is not done yet. The trainer measures that wait (data_s).
//
// Errors in a worker are rethrown by next(). The destructor stops and joins the workers.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "train/dataset.hpp"
#include "train/sampler.hpp"

namespace gradsync::train {

struct Batch {
  std::int64_t index = 0;             // micro-batch number, from 0
  std::int64_t epoch = 0;
  std::vector<std::int64_t> samples;  // dataset indices (train split)
  std::vector<float> x;               // samples * sample_size, empty without a data set
  std::vector<std::int32_t> y;        // labels, empty without a data set
};

struct LoaderOptions {
  std::int64_t batch = 1;              // samples per micro-batch
  std::int64_t batches_per_epoch = 1;  // micro-batches per epoch (<= samples_per_rank / batch)
  std::int64_t total_batches = 0;      // micro-batches in the run
  int workers = 0;
  int prefetch = 2;                    // batches ahead of the consumer (workers > 0)
  double data_time_s = 0;              // emulated loading cost per sample
};

class Loader {
 public:
  // `dataset` may be null (emulated compute: indices only, plus the emulated cost).
  // Both references must outlive the loader.
  Loader(const DistributedSampler& sampler, const SyntheticDataset* dataset, LoaderOptions opts);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // The next micro-batch (blocks until it is built). At most total_batches calls.
  Batch next();

 private:
  Batch build(std::int64_t k) const;
  void worker_loop();

  const DistributedSampler& sampler_;
  const SyntheticDataset* dataset_;
  LoaderOptions opts_;
  std::int64_t consumed_ = 0;  // batches handed out by next()

  // Worker state, guarded by mu_.
  std::mutex mu_;
  std::condition_variable cv_work_, cv_ready_;
  std::int64_t claimed_ = 0;  // next batch a worker may claim
  std::map<std::int64_t, Batch> ready_;
  std::exception_ptr error_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace gradsync::train
