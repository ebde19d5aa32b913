#include "compute/cuda/cuda_check.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace trident {

void cuda_fail(const CudaSite& at, std::string_view op, std::string_view what) {
  throw RuntimeFailure(
      fmt::format("{} failed on rank {} (CUDA device {}): {}", op, at.rank, at.device, what));
}

void cuda_fail(cudaError_t e, const CudaSite& at, std::string_view op) {
  cudaGetLastError();  // clear a non-sticky error so the message is not repeated elsewhere
  cuda_fail(at, op, fmt::format("{}: {}", cudaGetErrorName(e), cudaGetErrorString(e)));
}

void cublas_fail(cublasStatus_t s, const CudaSite& at, std::string_view op) {
  cuda_fail(at, op, fmt::format("cuBLAS {}", cublasGetStatusString(s)));
}

}  // namespace trident
