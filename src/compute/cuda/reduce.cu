// Sum of squares in fp64, deterministic: the number of blocks depends only on
// n, each block reduces a fixed strided set of elements in a fixed tree, and a
// single block adds the partials in order.
#include "compute/cuda/device_math.cuh"
#include "compute/cuda/launch.hpp"

namespace trident::gpu {
namespace {

constexpr unsigned kThreads = 256, kFinalThreads = 1024;
constexpr std::size_t kPerBlock = 1 << 16;  // elements per block before the cap
constexpr unsigned kMaxBlocks = 1024;

unsigned blocks_for(std::size_t n) {
  const std::size_t b = (n + kPerBlock - 1) / kPerBlock;
  return unsigned(b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b));
}

template <class S>
__global__ void sum_squares_partial_kernel(double* partial, const S* x, std::size_t n) {
  double acc = 0;
  for (std::size_t i = std::size_t(blockIdx.x) * kThreads + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * kThreads) {
    const double v = to_f32(x[i]);
    acc += v * v;
  }
  acc = block_reduce(acc, SumOp{}, 0.0);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void sum_partials_kernel(double* result, const double* partial, unsigned count) {
  double acc = 0;
  for (unsigned i = threadIdx.x; i < count; i += kFinalThreads) acc += partial[i];
  acc = block_reduce(acc, SumOp{}, 0.0);
  if (threadIdx.x == 0) *result = acc;
}

}  // namespace

std::size_t sum_squares_scratch(std::size_t n) { return blocks_for(n); }

template <class S>
void sum_squares(double* result, const S* x, std::size_t n, double* scratch, cudaStream_t s) {
  const unsigned blocks = blocks_for(n);
  sum_squares_partial_kernel<<<blocks, kThreads, 0, s>>>(scratch, x, n);
  sum_partials_kernel<<<1, kFinalThreads, 0, s>>>(result, scratch, blocks);
}

#define TRIDENT_INSTANTIATE(S) \
  template void sum_squares<S>(double*, const S*, std::size_t, double*, cudaStream_t);
TRIDENT_GPU_STORAGE_TYPES(TRIDENT_INSTANTIATE)
#undef TRIDENT_INSTANTIATE

}  // namespace trident::gpu
