// Per-op device time: CUDA events recorded around each backend op on the
// compute stream, resolved in batches (so timing does not serialise the
// stream) and printed as a table at the end of a run. Off unless enabled
// (TRIDENT_KERNEL_TIMES=1); when off, begin/end cost one branch.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compute/cuda/cuda_check.hpp"

namespace trident {

class KernelTimer {
 public:
  KernelTimer(cudaStream_t stream, const CudaSite& site, bool enabled);
  ~KernelTimer();
  KernelTimer(const KernelTimer&) = delete;
  KernelTimer& operator=(const KernelTimer&) = delete;

  bool enabled() const { return enabled_; }
  void begin(const char* op);  // op: a string literal
  void end();
  // "op calls total_ms mean_us share" rows, largest total first; empty when off.
  std::string report();
  void reset();  // drops what was timed so far (set-up and warm-up)

 private:
  struct Mark {
    const char* op;
    cudaEvent_t start, stop;
  };
  struct Total {
    std::uint64_t calls = 0;
    double ms = 0;
  };
  cudaEvent_t take();
  void resolve();  // waits for recorded marks and adds them to the totals

  cudaStream_t stream_;
  CudaSite site_;
  bool enabled_;
  std::vector<Mark> marks_;
  std::vector<cudaEvent_t> free_;
  const char* open_ = nullptr;
  cudaEvent_t open_start_ = nullptr;
  std::map<std::string, Total> totals_;
};

}  // namespace trident
