#include "cuda/device.hpp"

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>

namespace gradsync {

namespace {

struct Probe {
  int count = 0;
  std::string why;
};

// cudaGetDeviceCount once per process. Its failure is not sticky, but clear it anyway so
// that the next CUDA call of a caller that ignores the answer reports its own error.
const Probe& probe() {
  static const Probe p = [] {
    Probe r;
    int n = 0;
    const cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess) {
      r.why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(rc);
      cudaGetLastError();
    } else if (n <= 0) {
      r.why = "cudaGetDeviceCount: no CUDA device is visible";
      const char* vis = std::getenv("CUDA_VISIBLE_DEVICES");
      if (vis) r.why += std::string(" (CUDA_VISIBLE_DEVICES=") + vis + ")";
    } else {
      r.count = n;
    }
    return r;
  }();
  return p;
}

std::string version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

}  // namespace

int cuda_device_count(std::string* why) {
  const Probe& p = probe();
  if (why) *why = p.why;
  return p.count;
}

std::string cuda_unavailable_reason() { return probe().why; }

void require_cuda_device() {
  std::string why;
  if (cuda_device_count(&why) == 0) throw NoCudaDeviceError("no CUDA device found (" + where() + ": " + why + ")");
}

int placement_local_rank(int local_rank) {
  const char* s = std::getenv("SLURM_LOCALID");
  if (s && *s) {
    char* end = nullptr;
    const long v = std::strtol(s, &end, 10);
    if (end && *end == '\0' && v >= 0 && v < (1L << 30)) return static_cast<int>(v);
  }
  return local_rank;
}

int select_cuda_device(int local_rank) {
  require_cuda_device();
  const int dev = placement_local_rank(local_rank) % cuda_device_count();
  GS_CUDA(cudaSetDevice(dev));
  return dev;
}

CudaDeviceInfo cuda_device_info(int device) {
  CudaDeviceInfo info;
  info.index = device;
  cudaDeviceProp prop;
  std::memset(&prop, 0, sizeof prop);
  GS_CUDA(cudaGetDeviceProperties(&prop, device));
  info.name = prop.name;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.total_bytes = prop.totalGlobalMem;
  char bus[64] = {0};
  GS_CUDA(cudaDeviceGetPCIBusId(bus, static_cast<int>(sizeof bus - 1), device));
  info.pci_bus_id = bus;
  return info;
}

GpuMemory gpu_memory_info() {
  GpuMemory m;
  GS_CUDA(cudaMemGetInfo(&m.free_bytes, &m.total_bytes));
  return m;
}

std::string cuda_version_text() {
  int rt = 0, drv = 0;
  std::string s = "CUDA runtime ";
  s += cudaRuntimeGetVersion(&rt) == cudaSuccess ? version_text(rt) : std::string("unknown");
  s += ", driver ";
  if (cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0) s += version_text(drv);
  else s += "none";
  cudaGetLastError();
  return s;
}

}  // namespace gradsync
