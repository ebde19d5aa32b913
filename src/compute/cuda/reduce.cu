// Sums of squares of many tensors in fp64, in two launches for any number of
// them, deterministic: each tensor is cut into chunks of kChunk elements (by
// its length alone), one block per chunk reduces a fixed strided set in a
// fixed tree, then one block per tensor adds its chunks' partials in order.
#include <algorithm>

#include "compute/cuda/device_math.cuh"
#include "compute/cuda/launch.hpp"

namespace trident::gpu {
namespace {

constexpr unsigned kThreads = 256;
constexpr std::size_t kChunk = std::size_t(kThreads) * 128;

__global__ void chunk_sums_kernel(double* partial, const SumSquaresChunk* chunks) {
  const SumSquaresChunk c = chunks[blockIdx.x];
  double acc = 0;
  for (unsigned i = threadIdx.x; i < c.n; i += kThreads) {
    const double v = c.x[i];
    acc += v * v;
  }
  acc = block_reduce(acc, SumOp{}, 0.0);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void tensor_sums_kernel(double* results, const double* partial,
                                   const unsigned* first_chunk) {
  const unsigned first = first_chunk[blockIdx.x], last = first_chunk[blockIdx.x + 1];
  double acc = 0;
  for (unsigned i = first + threadIdx.x; i < last; i += kThreads) acc += partial[i];
  acc = block_reduce(acc, SumOp{}, 0.0);
  if (threadIdx.x == 0) results[blockIdx.x] = acc;
}

}  // namespace

std::size_t sum_squares_chunk_count(std::size_t n) { return n ? (n + kChunk - 1) / kChunk : 1; }

void sum_squares_plan(const float* const* xs, const std::size_t* ns, std::size_t count,
                      SumSquaresChunk* chunks, unsigned* first_chunk) {
  unsigned at = 0;
  for (std::size_t i = 0; i < count; ++i) {
    first_chunk[i] = at;
    const std::size_t k = sum_squares_chunk_count(ns[i]);
    for (std::size_t j = 0; j < k; ++j) {
      const std::size_t begin = j * kChunk;
      chunks[at++] = {xs[i] + begin, unsigned(ns[i] > begin ? std::min(kChunk, ns[i] - begin) : 0)};
    }
  }
  first_chunk[count] = at;
}

void sum_squares_each(double* results, double* partial, const SumSquaresChunk* chunks,
                      std::size_t n_chunks, const unsigned* first_chunk, std::size_t count,
                      cudaStream_t s) {
  if (!count) return;
  chunk_sums_kernel<<<unsigned(n_chunks), kThreads, 0, s>>>(partial, chunks);
  tensor_sums_kernel<<<unsigned(count), kThreads, 0, s>>>(results, partial, first_chunk);
}

}  // namespace trident::gpu
