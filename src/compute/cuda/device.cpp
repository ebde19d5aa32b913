#include "compute/cuda/device.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "core/error.hpp"

namespace trident {

int cuda_device_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (why) *why = fmt::format("{}: {}", cudaGetErrorName(e), cudaGetErrorString(e));
    return 0;
  }
  if (n == 0 && why) *why = "no CUDA device is visible";
  return n;
}

int pick_cuda_device(int local_rank, int rank, const std::string& host) {
  std::string why;
  const int n = cuda_device_count(&why);
  if (n == 0)
    throw RuntimeFailure(fmt::format(
        "system.device = \"cuda\" but rank {} on {} sees no CUDA device ({}); run on a GPU node "
        "(check CUDA_VISIBLE_DEVICES and the job's GPU request) or set system.device = \"cpu\"",
        rank, host, why));
  return local_rank % n;
}

std::string cuda_device_summary(int device) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
    cudaGetLastError();
    return "(properties unavailable)";
  }
  return fmt::format("{}, sm_{}{}, {:.1f} GiB, PCI {}", p.name, p.major, p.minor,
                     double(p.totalGlobalMem) / double(1ull << 30), cuda_device_bus_id(device));
}

std::string cuda_device_bus_id(int device) {
  char id[32] = {};
  if (cudaDeviceGetPCIBusId(id, sizeof id, device) != cudaSuccess) {
    cudaGetLastError();
    return fmt::format("device{}", device);
  }
  return id;
}

}  // namespace trident
