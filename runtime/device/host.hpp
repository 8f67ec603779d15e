// gradsync/device/host.hpp — the host side of the device seam (device.hpp): gradients and
// parameters in host memory, work ordered by the calling thread, the CPU kernels
// (kernels/cpu_kernels.hpp), host optimizers (train/optimizer.hpp), the emulated generator
// of train/emulated.hpp and the Eigen networks for real compute. Every build has it.
#pragma once

#include <memory>

#include "device/device.hpp"

namespace gradsync::device {

// The host device (stateless; one per process is enough, but any number may exist).
std::unique_ptr<Device> make_host_device();
// A process-wide host device, for code paths that always run on the host (tests, staging).
Device& host_device();

}  // namespace gradsync::device
