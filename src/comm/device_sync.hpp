// What the device-buffer communicators (NCCL, host-staged MPI) share: telling
// device from host buffers, a pool of CUDA events (an op is ordered after the
// compute stream by recording an event there and waiting on it, and completes
// when its own event has fired), and a pool of pinned host buffers.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

#include "compute/cuda/cuda_check.hpp"

namespace trident {

// True for memory cudaMalloc (or cudaMallocManaged) returned; false for host
// memory, pinned or not, which goes to MPI directly.
bool is_device_memory(const void* p);

class EventPool {
 public:
  explicit EventPool(const CudaSite& site) : site_(site) {}
  ~EventPool();
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;
  cudaEvent_t take();  // timing disabled: the cheapest event
  void give(cudaEvent_t e) { free_.push_back(e); }
  // An event recorded now on `stream`.
  cudaEvent_t record(cudaStream_t stream, const char* what);
  // true once `e` has fired; throws (naming `what`) on a CUDA error.
  bool done(cudaEvent_t e, const std::string& what) const;

 private:
  CudaSite site_;
  std::vector<cudaEvent_t> free_;
};

// Page-locked host buffers for staging copies, reused across operations.
class PinnedPool {
 public:
  explicit PinnedPool(const CudaSite& site) : site_(site) {}
  ~PinnedPool();
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;
  char* take(std::size_t bytes);  // a free buffer of at least `bytes`
  void give(char* p);

 private:
  struct Buffer {
    char* data;
    std::size_t bytes;
    bool busy;
  };
  CudaSite site_;
  std::vector<Buffer> buffers_;
};

}  // namespace trident
