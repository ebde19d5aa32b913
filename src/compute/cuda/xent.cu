// Vocab-parallel softmax cross-entropy in three phases (see backend.hpp), one
// block per token row. Row sums are block reductions of fixed shape.
#include "compute/cuda/device_math.cuh"
#include "compute/cuda/launch.hpp"

namespace trident::gpu {
namespace {

constexpr int kThreads = 256;

template <class S>
__global__ void xent_max_kernel(float* row_max, const S* logits, int V, int valid) {
  const S* z = logits + std::size_t(blockIdx.x) * V;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < valid; j += kThreads) mx = fmaxf(mx, to_f32(z[j]));
  mx = block_reduce(mx, MaxOp{}, -INFINITY);
  if (threadIdx.x == 0) row_max[blockIdx.x] = mx;
}

template <class S>
__global__ void xent_sums_kernel(float* packed, const S* logits, const float* row_max,
                                 const std::int32_t* targets, int lo, int N, int V, int valid) {
  const int i = blockIdx.x;
  const S* z = logits + std::size_t(i) * V;
  const float mx = row_max[i];
  float sum = 0;
  for (int j = threadIdx.x; j < valid; j += kThreads) sum += expf(to_f32(z[j]) - mx);
  sum = block_reduce(sum, SumOp{}, 0.0f);
  if (threadIdx.x != 0) return;
  packed[i] = sum;
  const int t = targets[i] - lo;
  packed[N + i] = (t >= 0 && t < valid) ? to_f32(z[t]) : 0.0f;
}

// dlogits may alias logits: each element is read, then written, by one thread.
// round_bf16: dlogits rounded to bf16 values (what round_to leaves).
template <class S>
__global__ void xent_finish_kernel(float* losses, S* dlogits, const S* logits,
                                   const float* row_max, const float* packed,
                                   const std::int32_t* targets, int lo, int N, int V, int valid,
                                   float dloss, bool round_bf16) {
  const int i = blockIdx.x;
  const float lse = row_max[i] + logf(packed[i]);
  if (threadIdx.x == 0) losses[i] = lse - packed[N + i];
  if (!dlogits) return;
  const std::size_t off = std::size_t(i) * V;
  const int t = targets[i] - lo;
  for (int j = threadIdx.x; j < V; j += kThreads) {
    float d = 0.0f;  // padding takes no part in the loss
    if (j < valid) {
      d = expf(to_f32(logits[off + j]) - lse) * dloss;
      if (j == t) d -= dloss;
    }
    if (round_bf16) d = to_f32(from_f32<__nv_bfloat16>(d));
    dlogits[off + j] = from_f32<S>(d);
  }
}

}  // namespace

template <class S>
void xent_max(float* row_max, const S* logits, int N, int V, int valid, cudaStream_t s) {
  if (N > 0) xent_max_kernel<<<unsigned(N), kThreads, 0, s>>>(row_max, logits, V, valid);
}

template <class S>
void xent_sums(float* packed, const S* logits, const float* row_max, const std::int32_t* targets,
               int lo, int N, int V, int valid, cudaStream_t s) {
  if (N > 0)
    xent_sums_kernel<<<unsigned(N), kThreads, 0, s>>>(packed, logits, row_max, targets, lo, N, V,
                                                      valid);
}

template <class S>
void xent_finish(float* losses, S* dlogits, const S* logits, const float* row_max,
                 const float* packed, const std::int32_t* targets, int lo, int N, int V,
                 int valid, float dloss, bool round_bf16, cudaStream_t s) {
  if (N > 0)
    xent_finish_kernel<<<unsigned(N), kThreads, 0, s>>>(losses, dlogits, logits, row_max, packed,
                                                        targets, lo, N, V, valid, dloss,
                                                        round_bf16);
}

#define TRIDENT_INSTANTIATE(S)                                                                  \
  template void xent_max<S>(float*, const S*, int, int, int, cudaStream_t);                      \
  template void xent_sums<S>(float*, const S*, const float*, const std::int32_t*, int, int, int, \
                             int, cudaStream_t);                                                 \
  template void xent_finish<S>(float*, S*, const S*, const float*, const float*,                \
                               const std::int32_t*, int, int, int, int, float, bool,         \
                               cudaStream_t);
TRIDENT_GPU_STORAGE_TYPES(TRIDENT_INSTANTIATE)
#undef TRIDENT_INSTANTIATE

}  // namespace trident::gpu
