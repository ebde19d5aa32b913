// Token and position embeddings, forward and backward. The backward kernels
// add each token's gradient into its row in token order, exactly the order of
// the CPU loops, so the result is deterministic (and equal to the CPU's).
#include "compute/cuda/device_math.cuh"
#include "compute/cuda/launch.hpp"

namespace trident::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = 32;  // vocabulary rows owned by one backward block

// Grid (N, column tiles): block x is a token, threads walk its columns.
template <class S>
__global__ void embedding_forward_kernel(S* out, const std::int32_t* tok, const S* wte, int lo,
                                         int count, int C) {
  const int n = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int row = tok[n] - lo;
  out[std::size_t(n) * C + c] =
      (row >= 0 && row < count) ? wte[std::size_t(row) * C + c] : from_f32<S>(0.0f);
}

// One block per chunk of kRowsPerBlock shard rows. The block scans the tokens
// a tile at a time, compacts those in its chunk in token order (warp ballots),
// then adds their gradient rows one after another; thread t owns columns
// t, t + blockDim, ..., so no two threads touch one element.
template <class S>
__global__ void embedding_backward_kernel(S* dwte, const S* dout, const std::int32_t* tok, int lo,
                                          int count, int N, int C) {
  __shared__ int hits[kThreads];
  __shared__ int warp_hits[kThreads / 32];
  const int first = lo + blockIdx.x * kRowsPerBlock;
  const int last = lo + min(count, int(blockIdx.x + 1) * kRowsPerBlock);  // exclusive
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int base = 0; base < N; base += kThreads) {
    const int n = base + threadIdx.x;
    const bool hit = n < N && tok[n] >= first && tok[n] < last;
    const unsigned mask = __ballot_sync(0xffffffffu, hit);
    if (lane == 0) warp_hits[warp] = __popc(mask);
    __syncthreads();
    int before = 0, total = 0;
    for (int w = 0; w < kThreads / 32; ++w) {
      before += w < warp ? warp_hits[w] : 0;
      total += warp_hits[w];
    }
    if (hit) hits[before + __popc(mask & ((1u << lane) - 1u))] = n;
    __syncthreads();
    for (int k = 0; k < total; ++k) {
      const int m = hits[k];
      S* dst = dwte + std::size_t(tok[m] - lo) * C;
      const S* src = dout + std::size_t(m) * C;
      for (int c = threadIdx.x; c < C; c += kThreads)
        dst[c] = from_f32<S>(to_f32(dst[c]) + to_f32(src[c]));
    }
    __syncthreads();  // hits and warp_hits are rewritten by the next tile
  }
}

template <class S>
__global__ void position_forward_kernel(S* out, const S* wpe, int T, int first, int C) {
  const int n = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const std::size_t i = std::size_t(n) * C + c;
  out[i] = from_f32<S>(to_f32(out[i]) + to_f32(wpe[std::size_t((first + n) % T) * C + c]));
}

// Grid (T, column tiles): position p sums the tokens n = p - first (mod T),
// p - first + T, ... in increasing order.
template <class S>
__global__ void position_backward_kernel(S* dwpe, const S* dout, int N, int T, int first, int C) {
  const int p = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int n0 = ((p - first) % T + T) % T;
  if (n0 >= N) return;
  S* dst = dwpe + std::size_t(p) * C + c;
  float acc = to_f32(*dst);
  for (int n = n0; n < N; n += T) acc += to_f32(dout[std::size_t(n) * C + c]);
  *dst = from_f32<S>(acc);
}

dim3 row_grid(int rows, int C) { return dim3(unsigned(rows), unsigned((C + kThreads - 1) / kThreads)); }

}  // namespace

template <class S>
void embedding_forward(S* out, const std::int32_t* tok, const S* wte, int lo, int count, int N,
                       int C, cudaStream_t s) {
  if (N <= 0 || C <= 0) return;
  embedding_forward_kernel<<<row_grid(N, C), kThreads, 0, s>>>(out, tok, wte, lo, count, C);
}

template <class S>
void embedding_backward(S* dwte, const S* dout, const std::int32_t* tok, int lo, int count, int N,
                        int C, cudaStream_t s) {
  if (N <= 0 || C <= 0 || count <= 0) return;
  const unsigned blocks = unsigned((count + kRowsPerBlock - 1) / kRowsPerBlock);
  embedding_backward_kernel<<<blocks, kThreads, 0, s>>>(dwte, dout, tok, lo, count, N, C);
}

template <class S>
void position_forward(S* out, const S* wpe, int N, int T, int first, int C, cudaStream_t s) {
  if (N <= 0 || C <= 0) return;
  position_forward_kernel<<<row_grid(N, C), kThreads, 0, s>>>(out, wpe, T, first, C);
}

template <class S>
void position_backward(S* dwpe, const S* dout, int N, int T, int first, int C, cudaStream_t s) {
  if (N <= 0 || C <= 0) return;
  position_backward_kernel<<<row_grid(T, C), kThreads, 0, s>>>(dwpe, dout, N, T, first, C);
}

#define TRIDENT_INSTANTIATE(S)                                                                   \
  template void embedding_forward<S>(S*, const std::int32_t*, const S*, int, int, int, int,       \
                                     cudaStream_t);                                               \
  template void embedding_backward<S>(S*, const S*, const std::int32_t*, int, int, int, int,      \
                                      cudaStream_t);                                              \
  template void position_forward<S>(S*, const S*, int, int, int, int, cudaStream_t);              \
  template void position_backward<S>(S*, const S*, int, int, int, int, cudaStream_t);
TRIDENT_GPU_STORAGE_TYPES(TRIDENT_INSTANTIATE)
#undef TRIDENT_INSTANTIATE

}  // namespace trident::gpu
