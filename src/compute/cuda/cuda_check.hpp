// Checks for every CUDA runtime and cuBLAS call: a failure throws
// RuntimeFailure naming the operation, the rank and the device. Kernel
// launches are asynchronous, so a fault inside a kernel surfaces at the next
// checked call; run with CUDA_LAUNCH_BLOCKING=1 to pin it on its launch.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string_view>

namespace trident {

// Who is calling: the world rank and its device, for error messages.
struct CudaSite {
  int rank = 0;
  int device = 0;
};

[[noreturn]] void cuda_fail(const CudaSite& at, std::string_view op, std::string_view what);
[[noreturn]] void cuda_fail(cudaError_t e, const CudaSite& at, std::string_view op);
[[noreturn]] void cublas_fail(cublasStatus_t s, const CudaSite& at, std::string_view op);

inline void cuda_check(cudaError_t e, const CudaSite& at, std::string_view op) {
  if (e != cudaSuccess) cuda_fail(e, at, op);
}
inline void cublas_check(cublasStatus_t s, const CudaSite& at, std::string_view op) {
  if (s != CUBLAS_STATUS_SUCCESS) cublas_fail(s, at, op);
}

}  // namespace trident
