// Vocab-parallel softmax cross-entropy in three phases (see backend.hpp), one
// block per token row. Row sums are block reductions of fixed shape.
#include <type_traits>

#include "compute/cuda/device_math.cuh"
#include "compute/cuda/launch.hpp"
#include "compute/cuda/vector_access.cuh"

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

// Row maximum and sum of exp(z - maximum) in one read of the row: each thread
// keeps its own maximum and sum (rescaled when its maximum grows), then the
// block combines them against the row's maximum. vec4: the row read four
// values per load (f32 rows of a multiple of 4, 16-byte aligned).
__device__ __forceinline__ void online_add(float x, float& mx, float& sum) {
  if (x == -INFINITY) return;  // adds nothing (and -inf - -inf is NaN)
  if (x > mx) {
    sum = sum * expf(mx - x) + 1.0f;
    mx = x;
  } else {
    sum += expf(x - mx);
  }
}

template <class S>
__global__ void xent_stats_kernel(float* row_max, float* packed, const S* logits,
                                  const std::int32_t* targets, int N, int V, int valid,
                                  bool vec4) {
  const int i = blockIdx.x;
  const S* z = logits + std::size_t(i) * V;
  float mx = -INFINITY, sum = 0.0f;
  int j = threadIdx.x;
  if constexpr (std::is_same_v<S, float>) {
    if (vec4) {
      const int groups = valid / 4;
      for (int g = threadIdx.x; g < groups; g += kThreads) {
        float x[4];
        load(x, z + 4 * g);
#pragma unroll
        for (int k = 0; k < 4; ++k) online_add(x[k], mx, sum);
      }
      j = 4 * groups + threadIdx.x;
    }
  }
  for (; j < valid; j += kThreads) online_add(to_f32(z[j]), mx, sum);
  const float row = block_reduce(mx, MaxOp{}, -INFINITY);
  sum = mx == -INFINITY ? 0.0f : sum * expf(mx - row);
  sum = block_reduce(sum, SumOp{}, 0.0f);
  if (threadIdx.x != 0) return;
  row_max[i] = row;
  packed[i] = sum;
  const int t = targets[i];
  packed[N + i] = (t >= 0 && t < valid) ? to_f32(z[t]) : 0.0f;
}

// One element's gradient: dloss * (softmax - onehot), 0 in the padding.
__device__ __forceinline__ float xent_grad(float z, int j, int t, int valid, float lse,
                                           float dloss, bool round_bf16) {
  float d = 0.0f;  // padding takes no part in the loss
  if (j < valid) {
    d = expf(z - lse) * dloss;
    if (j == t) d -= dloss;
  }
  return round_bf16 ? to_f32(from_f32<__nv_bfloat16>(d)) : d;
}

// dlogits may alias logits: each element is read, then written, by one thread.
// round_bf16: dlogits rounded to bf16 values (what round_to leaves). vec4 as
// for the statistics (dlogits aligned as the logits).
template <class S>
__global__ void xent_finish_kernel(float* losses, S* dlogits, const S* logits,
                                   const float* row_max, const float* packed,
                                   const std::int32_t* targets, int lo, int N, int V, int valid,
                                   float dloss, bool round_bf16, bool vec4) {
  const int i = blockIdx.x;
  const float lse = row_max[i] + logf(packed[i]);
  if (threadIdx.x == 0) losses[i] = lse - packed[N + i];
  if (!dlogits) return;
  const std::size_t off = std::size_t(i) * V;
  const int t = targets[i] - lo;
  int j = threadIdx.x;
  if constexpr (std::is_same_v<S, float>) {
    if (vec4) {
      for (int g = threadIdx.x; g < V / 4; g += kThreads) {
        float x[4];
        load(x, logits + off + 4 * g);
#pragma unroll
        for (int k = 0; k < 4; ++k) x[k] = xent_grad(x[k], 4 * g + k, t, valid, lse, dloss, round_bf16);
        store(dlogits + off + 4 * g, x);
      }
      return;
    }
  }
  for (; j < V; j += kThreads)
    dlogits[off + j] =
        from_f32<S>(xent_grad(to_f32(logits[off + j]), j, t, valid, lse, dloss, round_bf16));
}

// Rows of V f32 values read (and written) four at a time: V a multiple of 4
// and the matrices 16-byte aligned.
template <class S>
bool rows_vectorizable(const S* logits, const S* dlogits, int V) {
  if constexpr (!std::is_same_v<S, float>) return false;
  else return vectorizable(std::size_t(V), {logits, dlogits});
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
void xent_stats(float* row_max, float* packed, const S* logits, const std::int32_t* targets,
                int N, int V, int valid, cudaStream_t s) {
  if (N <= 0) return;
  const bool vec4 = rows_vectorizable(logits, static_cast<const S*>(nullptr), V);
  xent_stats_kernel<<<unsigned(N), kThreads, 0, s>>>(row_max, packed, logits, targets, N, V,
                                                     valid, vec4);
}

template <class S>
void xent_finish(float* losses, S* dlogits, const S* logits, const float* row_max,
                 const float* packed, const std::int32_t* targets, int lo, int N, int V,
                 int valid, float dloss, bool round_bf16, cudaStream_t s) {
  if (N <= 0) return;
  const bool vec4 = rows_vectorizable(logits, dlogits, V);
  xent_finish_kernel<<<unsigned(N), kThreads, 0, s>>>(losses, dlogits, logits, row_max, packed,
                                                      targets, lo, N, V, valid, dloss, round_bf16,
                                                      vec4);
}

#define TRIDENT_INSTANTIATE(S)                                                                  \
  template void xent_max<S>(float*, const S*, int, int, int, cudaStream_t);                      \
  template void xent_sums<S>(float*, const S*, const float*, const std::int32_t*, int, int, int, \
                             int, cudaStream_t);                                                 \
  template void xent_stats<S>(float*, float*, const S*, const std::int32_t*, int, int, int,    \
                              cudaStream_t);                                                     \
  template void xent_finish<S>(float*, S*, const S*, const float*, const float*,                \
                               const std::int32_t*, int, int, int, int, float, bool,         \
                               cudaStream_t);
TRIDENT_GPU_STORAGE_TYPES(TRIDENT_INSTANTIATE)
#undef TRIDENT_INSTANTIATE

}  // namespace trident::gpu
