// gradsync/cuda/device.hpp — which GPU this process uses, and whether there is one at all.
//
// Every program that accepts `--device cuda` asks cuda_device_count() first: it returns 0
// (never throws) when there is no driver, the driver is too old for this CUDA runtime
// ("driver version is insufficient" on the build machines) or no device is visible, and
// keeps CUDA's own reason for the message. require_cuda_device() turns that into the
// one-line refusal users see. GPU tests skip on cuda_device_count() == 0.
//
// Placement: one GPU per rank, chosen by node-local rank — SLURM_LOCALID when Slurm set it
// (srun), else the communicator's local_rank() — modulo the number of visible devices, so
// ranks may share a GPU when there are more ranks than GPUs (host-staged MPI allows that,
// NCCL does not: NcclCommunicator refuses two ranks on one GPU with a clear message).
//
// The CUDA check macro GS_CUDA and the RAII DeviceBuffer come from kernels/cuda_check.hpp
// (one check macro per C API); this header re-exports them.
#pragma once

#include <cstddef>
#include <string>

#include "core/error.hpp"
#include "kernels/cuda_check.hpp"

namespace gradsync {

// "No GPU here": a run-time condition of the machine, not a bad option. Programs print
// "<program>: error: no CUDA device found (<why>)" and exit 1.
class NoCudaDeviceError : public Error {
 public:
  explicit NoCudaDeviceError(const std::string& what) : Error(what) {}
};

// Number of usable CUDA devices; 0 when none (no driver, driver too old, none visible),
// with CUDA's reason in *why ("cudaGetDeviceCount: CUDA driver version is insufficient for
// CUDA runtime version"). Never throws; the result is computed once per process.
int cuda_device_count(std::string* why = nullptr);

// The reason cuda_device_count() returned 0 (empty when devices exist).
std::string cuda_unavailable_reason();

// Throws NoCudaDeviceError("no CUDA device found (<where>: <why>)") when there is none.
void require_cuda_device();

// The node-local rank used for placement: SLURM_LOCALID when set and numeric, else
// `local_rank` (the communicator's).
int placement_local_rank(int local_rank);

// Selects (cudaSetDevice) and returns device placement_local_rank(local_rank) % count.
// Throws NoCudaDeviceError without devices.
int select_cuda_device(int local_rank);

struct CudaDeviceInfo {
  int index = -1;
  std::string name;         // "NVIDIA H200"
  std::string pci_bus_id;   // "0000:19:00.0": tells GPUs of one host apart
  int cc_major = 0, cc_minor = 0;
  std::size_t total_bytes = 0;
};
CudaDeviceInfo cuda_device_info(int device);

// Device memory of the current device (cudaMemGetInfo): the footprint results record.
struct GpuMemory {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  std::size_t used_bytes() const { return total_bytes - free_bytes; }
};
GpuMemory gpu_memory_info();

// "CUDA runtime 13.0, driver 13.0" (driver "none" when cudaDriverGetVersion fails).
std::string cuda_version_text();

}  // namespace gradsync
