// Token and position embeddings, forward and backward. The backward kernels
// add each token's gradient into its row in token order, exactly the order of
// the CPU loops, so the result is deterministic (and equal to the CPU's).
#include <algorithm>

#include "compute/cuda/device_math.cuh"
#include "compute/cuda/launch.hpp"

namespace trident::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = 32;  // vocabulary rows owned by one backward block, at most
constexpr std::size_t kChunkBytes = 96 << 10;  // a block's rows in shared memory, at most
// A backward block scans every token for its rows: the widest block scans
// them in the fewest steps, which bound its time (a block's rows are few).
constexpr int kScanThreads = 1024;

// Grid (N, column tiles): block x is a token, threads walk its columns.
template <class S, class W>
__global__ void embedding_forward_kernel(S* out, const std::int32_t* tok, const W* wte, int lo,
                                         int count, int C) {
  const int n = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int row = tok[n] - lo;
  out[std::size_t(n) * C + c] =
      from_f32<S>((row >= 0 && row < count) ? to_f32(wte[std::size_t(row) * C + c]) : 0.0f);
}

// One block per chunk of shard rows. The block scans the tokens a tile at a
// time, compacts those in its chunk in token order (warp ballots), then adds
// their gradient rows one after another, into the chunk's rows held in shared
// memory (kShared) or in place; thread t owns columns t, t + blockDim, ...,
// so no two threads touch one element and each sum runs in token order. The
// rows of kBatch tokens are read before any is added: a frequent token's many
// rows cost a memory latency per batch, not per row.
template <class S, bool kShared>
__global__ void __launch_bounds__(kScanThreads)
    embedding_backward_kernel(S* dwte, const S* dout, const std::int32_t* tok, int lo, int count,
                              int N, int C, int rows_per_block) {
  constexpr int kBatch = 16;
  extern __shared__ float sums[];  // kShared: the chunk's rows
  __shared__ int hit_token[kScanThreads], hit_row[kScanThreads];
  __shared__ int warp_hits[kScanThreads / 32];
  const int first = lo + blockIdx.x * rows_per_block;
  const int last = lo + min(count, int(blockIdx.x + 1) * rows_per_block);  // exclusive
  const std::size_t chunk = std::size_t(last - first) * C;
  S* rows = dwte + std::size_t(first - lo) * C;
  if (kShared)
    for (std::size_t i = threadIdx.x; i < chunk; i += kScanThreads) sums[i] = to_f32(rows[i]);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int base = 0; base < N; base += kScanThreads) {
    const int n = base + threadIdx.x;
    const int t = n < N ? tok[n] : -1;
    const bool hit = t >= first && t < last;
    const unsigned mask = __ballot_sync(0xffffffffu, hit);
    if (lane == 0) warp_hits[warp] = __popc(mask);
    __syncthreads();
    int before = 0, total = 0;
    for (int w = 0; w < kScanThreads / 32; ++w) {
      before += w < warp ? warp_hits[w] : 0;
      total += warp_hits[w];
    }
    if (hit) {
      const int k = before + __popc(mask & ((1u << lane) - 1u));
      hit_token[k] = n, hit_row[k] = t - first;
    }
    __syncthreads();
    for (int k0 = 0; k0 < total; k0 += kBatch) {
      const int nk = min(kBatch, total - k0);
      for (int c = threadIdx.x; c < C; c += kScanThreads) {
        float v[kBatch];
#pragma unroll
        for (int u = 0; u < kBatch; ++u)
          v[u] = u < nk ? to_f32(dout[std::size_t(hit_token[k0 + u]) * C + c]) : 0.0f;
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          if (u >= nk) break;
          const std::size_t at = std::size_t(hit_row[k0 + u]) * C + c;
          if (kShared) sums[at] = to_f32(from_f32<S>(sums[at] + v[u]));
          else rows[at] = from_f32<S>(to_f32(rows[at]) + v[u]);
        }
      }
    }
    __syncthreads();  // the hit lists are rewritten by the next tile
  }
  if (kShared)
    for (std::size_t i = threadIdx.x; i < chunk; i += kScanThreads) rows[i] = from_f32<S>(sums[i]);
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

void embedding_forward_bits(float* out, const std::int32_t* tok, const std::uint16_t* wte, int lo,
                            int count, int N, int C, cudaStream_t s) {
  if (N <= 0 || C <= 0) return;
  embedding_forward_kernel<<<row_grid(N, C), kThreads, 0, s>>>(
      out, tok, reinterpret_cast<const __nv_bfloat16*>(wte), lo, count, C);
}

template <class S>
void embedding_backward(S* dwte, const S* dout, const std::int32_t* tok, int lo, int count, int N,
                        int C, cudaStream_t s) {
  if (N <= 0 || C <= 0 || count <= 0) return;
  const std::size_t row_bytes = std::size_t(C) * sizeof(float);
  if (row_bytes > kChunkBytes) {  // rows too wide to hold: sums in place
    embedding_backward_kernel<S, false><<<unsigned(count), kScanThreads, 0, s>>>(
        dwte, dout, tok, lo, count, N, C, 1);
    return;
  }
  const int rows = int(std::min<std::size_t>(kRowsPerBlock, kChunkBytes / row_bytes));
  const std::size_t smem = std::size_t(rows) * row_bytes;
  cudaFuncSetAttribute(embedding_backward_kernel<S, true>,
                       cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  const unsigned blocks = unsigned((count + rows - 1) / rows);
  embedding_backward_kernel<S, true><<<blocks, kScanThreads, smem, s>>>(dwte, dout, tok, lo, count,
                                                                        N, C, rows);
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
