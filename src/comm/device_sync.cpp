#include "comm/device_sync.hpp"

#include <string>

namespace trident {

bool is_device_memory(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();  // older drivers report unregistered host memory as an error
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

EventPool::~EventPool() {
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
}

cudaEvent_t EventPool::take() {
  if (!free_.empty()) {
    cudaEvent_t e = free_.back();
    free_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  cuda_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), site_, "cudaEventCreate");
  return e;
}

cudaEvent_t EventPool::record(cudaStream_t stream, const char* what) {
  cudaEvent_t e = take();
  cuda_check(cudaEventRecord(e, stream), site_, what);
  return e;
}

bool EventPool::done(cudaEvent_t e, const std::string& what) const {
  const cudaError_t r = cudaEventQuery(e);
  if (r == cudaSuccess) return true;
  if (r == cudaErrorNotReady) return false;
  cuda_fail(r, site_, what);
}

PinnedPool::~PinnedPool() {
  // A buffer still busy belongs to an operation that never completed (the
  // job is failing): leave it to the process exit rather than free it under MPI.
  for (Buffer& b : buffers_)
    if (!b.busy) cudaFreeHost(b.data);
}

char* PinnedPool::take(std::size_t bytes) {
  Buffer* best = nullptr;  // the smallest free buffer that fits
  for (Buffer& b : buffers_)
    if (!b.busy && b.bytes >= bytes && (!best || b.bytes < best->bytes)) best = &b;
  if (!best) {
    std::size_t n = 4096;
    while (n < bytes) n *= 2;  // powers of two: few distinct sizes, good reuse
    void* p = nullptr;
    cuda_check(cudaMallocHost(&p, n), site_, "cudaMallocHost (staging buffer)");
    buffers_.push_back(Buffer{static_cast<char*>(p), n, false});
    best = &buffers_.back();
  }
  best->busy = true;
  return best->data;
}

void PinnedPool::give(char* p) {
  for (Buffer& b : buffers_)
    if (b.data == p) b.busy = false;
}

}  // namespace trident
