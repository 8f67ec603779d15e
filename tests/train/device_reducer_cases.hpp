// The device-independent check of the one Reducer on a Device (device/device.hpp): the same
// gradients go through a Reducer on the host device and through a Reducer on `dev`, for
// every compressor (and the mixed-precision unscaling), 3 steps so that error feedback and
// PowerSGD's warm start carry state; the averaged gradients and the wire statistics must
// agree. Included by tests/train/test_device_reducer_mpi.cpp (a host-memory device that
// takes the staged path: bit-identical) and tests/gpu/test_device_reducer_cuda_mpi.cpp (the
// CUDA device: bit-identical when staged; within rounding for NCCL's in-place reduction).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "algos/allreduce.hpp"
#include "comm/communicator.hpp"
#include "compress/compressor.hpp"
#include "core/timer.hpp"
#include "device/device.hpp"
#include "train/reducer.hpp"

namespace gradsync::test {

// Every registry compressor, with the keys that change its path (the default start=10: only
// plain steps in 3; compressed from the first or second step, warm start off, error
// feedback off, threads (host only), a coarse QSGD).
inline const std::vector<std::string>& every_compressor_spec() {
  static const std::vector<std::string> specs = {"none",
                                                 "fp16",
                                                 "bf16",
                                                 "powersgd:rank=2",
                                                 "powersgd:rank=2,start=0",
                                                 "powersgd:rank=1,start=1,warm_start=0",
                                                 "powersgd:rank=2,start=0,error_feedback=0,threads=2",
                                                 "qsgd:levels=16",
                                                 "qsgd:levels=4,bucket=64",
                                                 "onebit",
                                                 "topk:ratio=0.1"};
  return specs;
}

inline std::vector<models::TensorSpec> device_test_tensors() {
  // 7 tensors, matrices and vectors, 3..4000 elements: 1 KiB buckets give several odd ones.
  return {{"a.weight", {10, 40}}, {"a.bias", {10}}, {"b.weight", {100, 40}}, {"b.bias", {100}},
          {"c.weight", {3, 7}},   {"c.bias", {3}},  {"d.weight", {33, 17}}};
}

// Deterministic gradient values that differ by rank, tensor, element and step, with a
// shared low-rank part (what PowerSGD and top-k can use) and signs of both kinds.
inline float device_test_value(int rank, std::size_t tensor, std::size_t j, std::int64_t step) {
  const float shared = std::sin(0.37f * static_cast<float>(j) + static_cast<float>(tensor + 3 * step));
  const float own = 0.25f * std::cos(1.3f * static_cast<float>(j * (rank + 2)) + static_cast<float>(step));
  return 0.01f * static_cast<float>(tensor + 1) * (shared + own);
}

struct DeviceCase {
  std::string spec;
  train::Unscale unscale = train::Unscale::None;
  float inv_scale = 1.f;
};

// Runs `c` on the host and on `dev` over sub-communicators of `world`; `tol` is the
// relative tolerance of each element (0: bit-identical).
// `in_place_algo_name` is the algorithm on the device communicator (the trainer's: "mpi", the
// library's native call; a host-memory test device can use "ring" to match the host bits).
// `make_in_place_algo`, when given, builds that algorithm instead (tests of the event hand-off).
inline void expect_device_matches_host(
    Communicator& world, device::Device& dev, const std::string& backend, const DeviceCase& c, double tol,
    const std::string& in_place_algo_name = "mpi",
    const std::function<std::unique_ptr<AllreduceAlgorithm>(Communicator&)>& make_in_place_algo = {}) {
  SCOPED_TRACE("compressor " + c.spec + " on " + dev.name() + "/" + backend);
  const auto tensors = device_test_tensors();
  train::ReducerOptions ro;
  ro.bucket_bytes = 1024;
  ro.first_bucket_bytes = 256;
  ro.unscale = c.unscale;

  auto host_comm = world.split(0, world.rank());
  auto host_algo = make_allreduce("ring", *host_comm);
  auto host_comp = make_compressor(c.spec, 7, world.rank());
  train::Reducer host(*host_comm, *host_algo, *host_comp, tensors, ro);

  auto dev_comm = world.split(0, world.rank());
  auto dev_algo = make_allreduce("ring", *dev_comm);
  std::unique_ptr<Communicator> in_place = dev.make_communicator(*dev_comm, backend);
  std::unique_ptr<AllreduceAlgorithm> in_place_algo;
  if (in_place)
    in_place_algo = make_in_place_algo ? make_in_place_algo(*in_place) : make_allreduce(in_place_algo_name, *in_place);
  auto dev_comp = make_compressor(c.spec, 7, world.rank());
  train::Reducer on_dev(dev, train::ReducerComms{dev_comm.get(), dev_algo.get(), in_place.get(), in_place_algo.get()},
                        *dev_comp, tensors, ro);
  ASSERT_EQ(host.layout(), on_dev.layout());
  ASSERT_EQ(on_dev.staged(), !dev.host_memory() && !(in_place && dev_comp->accepts_device_memory()));

  std::vector<float> values, back;
  for (std::int64_t step = 0; step < 3; ++step) {
    const float inv = step == 0 ? 1.f : c.inv_scale;
    host.begin_backward(now_s(), step, true, c.unscale == train::Unscale::None ? 1.f : inv);
    on_dev.begin_backward(now_s(), step, true, c.unscale == train::Unscale::None ? 1.f : inv);
    for (std::size_t i = tensors.size(); i-- > 0;) {
      const auto n = static_cast<std::size_t>(tensors[i].numel());
      values.resize(n);
      for (std::size_t j = 0; j < n; ++j) values[j] = device_test_value(world.rank(), i, j, step);
      std::copy(values.begin(), values.end(), host.grad(i));
      dev.upload(values.data(), on_dev.grad(i), n);
      host.mark_ready(i);
      on_dev.mark_ready(i);
    }
    const train::StepComm h = host.finish_backward();
    const train::StepComm d = on_dev.finish_backward();
    dev.synchronize();
    EXPECT_EQ(h.found_inf, d.found_inf) << "step " << step;
    EXPECT_EQ(h.stats.uncompressed_bytes, d.stats.uncompressed_bytes) << "step " << step;
    EXPECT_EQ(h.stats.compressed_bytes, d.stats.compressed_bytes) << "step " << step;
    if (!in_place) {
      EXPECT_EQ(h.stats.wire_bytes, d.stats.wire_bytes) << "step " << step;
    }
    EXPECT_EQ(h.buckets.size(), d.buckets.size());
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const auto n = static_cast<std::size_t>(tensors[i].numel());
      back.resize(n);
      dev.download(on_dev.grad(i), back.data(), n);
      for (std::size_t j = 0; j < n; ++j) {
        const float want = host.grad(i)[j];
        if (tol == 0) {
          ASSERT_EQ(want, back[j]) << "step " << step << " tensor " << i << " element " << j;
        } else {
          ASSERT_NEAR(want, back[j], tol * std::max(1e-3f, std::abs(want)))
              << "step " << step << " tensor " << i << " element " << j;
        }
      }
    }
  }
}

// Every compressor, then mixed precision: unscaling after the half casts and before the
// others (loss scale 1/inv = 4 from the second step).
inline std::vector<DeviceCase> every_device_case() {
  std::vector<DeviceCase> cases;
  for (const auto& s : every_compressor_spec()) cases.push_back({s, train::Unscale::None, 1.f});
  cases.push_back({"fp16", train::Unscale::AfterReduce, 0.25f});
  cases.push_back({"bf16", train::Unscale::AfterReduce, 0.25f});
  cases.push_back({"powersgd:rank=2,start=1", train::Unscale::BeforeReduce, 0.25f});
  cases.push_back({"topk:ratio=0.1", train::Unscale::BeforeReduce, 0.25f});
  return cases;
}

}  // namespace gradsync::test
