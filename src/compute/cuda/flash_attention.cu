// Causal attention on bf16 tensor cores without the T x T matrix in device
// memory (FlashAttention-2, Dao 2023), for head sizes 32, 64 and 128. A block
// owns 64 rows (queries in forward and dQ, keys in dK/dV), its four warps 16
// each, and walks the other side's rows 64 at a time through shared memory,
// two tiles deep (cp.async copies the next tile while this one is used).
// Products are mma.sync m16n8k16 bf16 tiles with f32 sums, and a warp's
// scores stay in its registers: the softmax runs on them in f32 (exp2, the
// scale's log2(e) folded in), and probabilities go from one product's output
// fragments straight into the next one's input fragments, rounded to bf16
// where the CPU's tiles round them (forward: the unnormalised probabilities,
// summed unrounded; backward: P and dS = scale P (dP - D)). Backward runs
// dK/dV and dQ as two kernels, each recomputing the probabilities, so every
// gradient element has one owner and its sums run in a fixed order: no
// atomics, the same bits every run.
#include <cstdint>

#include "compute/cuda/device_math.cuh"
#include "compute/cuda/flash_tiles.cuh"
#include "compute/cuda/launch.hpp"

namespace trident::gpu {
namespace {

using namespace flash;

template <int D>
__global__ void __launch_bounds__(kThreads, 3)
    flash_forward_kernel(float* out, float* lse, const std::uint16_t* qkv, int T, int C, int NH,
                         float scale, bool rounded, std::uint16_t* bits) {
  constexpr int LD = Shape<D>::kLD;
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int kTileElems = kRows * LD;
  auto* q_s = reinterpret_cast<std::uint16_t*>(smem);
  std::uint16_t *k_s = q_s + kTileElems, *v_s = k_s + 2 * kTileElems;  // two tiles each
  const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, q = threadIdx.x & 3;
  const int b = blockIdx.y / NH, h = blockIdx.y % NH;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kRows;  // the longest rows start first
  const std::size_t C3 = 3 * std::size_t(C);
  const std::uint16_t* head = qkv + std::size_t(b) * T * C3 + std::size_t(h) * D;
  // Tile j's K and V go to buffer j & 1, copied while tile j - 1 is used.
  auto fetch = [&](int k0, int buf) {
    load_rows_async<D>(k_s + buf * kTileElems, head + C, C3, k0, T);
    load_rows_async<D>(v_s + buf * kTileElems, head + 2 * std::size_t(C), C3, k0, T);
    cp_async_commit();
  };
  fetch(0, 0);
  load_rows<D>(q_s, head, C3, q0, T);
  __syncthreads();
  std::uint32_t qa[D / 16][4];
  load_a<D>(qa, q_s + warp * 16 * LD, g, q);

  float o[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // log2-domain max, this lane's sums
  const int t[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  const float scale2 = scale * kLog2e;
  const int key_end = min(T, q0 + kRows);
  for (int k0 = 0, buf = 0; k0 < key_end; k0 += kRows, buf ^= 1) {
    cp_async_wait<0>();
    __syncthreads();  // this tile is in; every warp is done with the last one
    if (k0 + kRows < key_end) fetch(k0 + kRows, buf ^ 1);
    const std::uint16_t *k_t = k_s + buf * kTileElems, *v_t = v_s + buf * kTileElems;
    float s[kTiles][4];
    scores<D>(s, qa, k_t);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int seen = min(t[i] + 1, T) - k0;  // keys k0 + c with c < seen
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < kTiles; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[j][2 * i + e];
          x = j * 8 + 2 * q + e < seen ? x * scale2 : -INFINITY;
          mx = fmaxf(mx, x);
        }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[i], mx);
      const float m_ref = m_new == -INFINITY ? 0.0f : m_new;  // a row with no key yet
      const float corr = exp2f(m[i] - m_ref);  // rescales what earlier tiles summed
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < kTiles; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) sum += s[j][2 * i + e] = exp2f(s[j][2 * i + e] - m_ref);
      l[i] = l[i] * corr + sum;
      m[i] = m_new;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) o[n][2 * i] *= corr, o[n][2 * i + 1] *= corr;
    }
    accumulate<D>(o, s, v_t);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    if (t[i] >= T) continue;
    const float inv = 1.0f / l[i];
    const std::size_t at = (std::size_t(b) * T + t[i]) * C + std::size_t(h) * D + 2 * q;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      put_pair(out + at + n * 8, bits_at(bits, at + n * 8), o[n][2 * i] * inv,
               o[n][2 * i + 1] * inv, rounded);
    if (q == 0) lse[(std::size_t(b) * NH + h) * T + t[i]] = m[i] * kLn2 + logf(l[i]);
  }
}

// D_t = dO_t . O_t for every (b, h, t), one warp each.
__global__ void row_dots_kernel(float* dots, const float* dout, const float* out, int T, int C,
                                int NH, int hs, std::size_t rows) {
  const std::size_t row = std::size_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int lane = threadIdx.x & 31;
  const int t = int(row % T), h = int(row / T % NH);
  const std::size_t b = row / T / NH;
  const std::size_t at = (b * T + t) * C + std::size_t(h) * hs;
  float sum = 0.0f;
  for (int d = lane; d < hs; d += 32) sum += dout[at + d] * out[at + d];
  sum = warp_reduce(sum, SumOp{});
  if (lane == 0) dots[row] = sum;
}

// A warp's 16 rows of D gradient columns (C fragments) added into rows r[0],
// r[1] of dst (row stride ld), rows at or past T skipped. rounded: written
// as the sum into zeros (-0 becomes +0) rounded to bf16 values, their bits
// to the same places of bits where it is not null.
template <int D>
__device__ __forceinline__ void add_rows(float* dst, std::uint16_t* bits, bool rounded,
                                         std::size_t ld, const int* r, int T,
                                         const float (*acc)[4], int q) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (r[i] >= T) continue;
    const std::size_t at = std::size_t(r[i]) * ld + 2 * q;
    float* row = dst + at;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      if (rounded)
        put_pair(row + n * 8, bits_at(bits, at + n * 8), 0.0f + acc[n][2 * i],
                 0.0f + acc[n][2 * i + 1], true);
      else
        row[n * 8] += acc[n][2 * i], row[n * 8 + 1] += acc[n][2 * i + 1];
    }
  }
}

// dK and dV of 64 keys: every query tile from the diagonal on.
template <int D>
__global__ void __launch_bounds__(kThreads, 3)
    flash_key_grads_kernel(float* dqkv, const std::uint16_t* qkv, const std::uint16_t* dout,
                           const float* lse, const float* dots, int T, int C, int NH,
                           float scale, bool rounded, std::uint16_t* bits) {
  constexpr int LD = Shape<D>::kLD;
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int kTileElems = kRows * LD;
  auto* k_s = reinterpret_cast<std::uint16_t*>(smem);
  std::uint16_t *v_s = k_s + kTileElems, *q_s = v_s + kTileElems;  // Q and dO: two tiles each
  std::uint16_t* do_s = q_s + 2 * kTileElems;
  auto* lse_s = reinterpret_cast<float*>(do_s + 2 * kTileElems);  // log2 domain; two tiles
  float* dot_s = lse_s + 2 * kRows;
  const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, q = threadIdx.x & 3;
  const int b = blockIdx.y / NH, h = blockIdx.y % NH;
  const int j0 = blockIdx.x * kRows;  // the most query tiles start first
  const std::size_t C3 = 3 * std::size_t(C);
  const std::uint16_t* head = qkv + std::size_t(b) * T * C3 + std::size_t(h) * D;
  const std::uint16_t* dhead = dout + std::size_t(b) * T * C + std::size_t(h) * D;
  const std::size_t stats = (std::size_t(b) * NH + h) * T;
  // Query tile i0's Q, dO, lse and D go to buffer `buf`, copied while the
  // tile before it is used.
  auto fetch = [&](int i0, int buf) {
    load_rows_async<D>(q_s + buf * kTileElems, head, C3, i0, T);
    load_rows_async<D>(do_s + buf * kTileElems, dhead, C, i0, T);
    cp_async_commit();
    for (int r = threadIdx.x; r < kRows; r += kThreads) {
      const bool in = i0 + r < T;
      lse_s[buf * kRows + r] = in ? lse[stats + i0 + r] * kLog2e : 0.0f;
      dot_s[buf * kRows + r] = in ? dots[stats + i0 + r] : 0.0f;
    }
  };
  fetch(j0, 0);
  load_rows<D>(k_s, head + C, C3, j0, T);
  load_rows<D>(v_s, head + 2 * std::size_t(C), C3, j0, T);
  __syncthreads();
  std::uint32_t ka[D / 16][4], va[D / 16][4];
  load_a<D>(ka, k_s + warp * 16 * LD, g, q);
  load_a<D>(va, v_s + warp * 16 * LD, g, q);
  float dk[D / 8][4] = {}, dv[D / 8][4] = {};
  const int key[2] = {j0 + warp * 16 + g, j0 + warp * 16 + g + 8};
  const float scale2 = scale * kLog2e;
  for (int i0 = j0, buf = 0; i0 < T; i0 += kRows, buf ^= 1) {
    cp_async_wait<0>();
    __syncthreads();  // this tile is in; every warp is done with the last one
    if (i0 + kRows < T) fetch(i0 + kRows, buf ^ 1);
    const std::uint16_t *q_t = q_s + buf * kTileElems, *do_t = do_s + buf * kTileElems;
    const float *lse_t = lse_s + buf * kRows, *dot_t = dot_s + buf * kRows;
    float p[kTiles][4], ds[kTiles][4];  // S^T then P^T; dP^T then dS^T: keys by queries
    scores<D>(p, ka, q_t);
    scores<D>(ds, va, do_t);
#pragma unroll
    for (int j = 0; j < kTiles; ++j)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const int c = j * 8 + 2 * q + (x & 1), t = i0 + c;
        const float pr = key[x >> 1] <= t && t < T ? exp2f(p[j][x] * scale2 - lse_t[c]) : 0.0f;
        p[j][x] = pr;
        ds[j][x] = scale * pr * (ds[j][x] - dot_t[c]);
      }
    accumulate<D>(dv, p, do_t);   // dV += P^T dO
    accumulate<D>(dk, ds, q_t);   // dK += dS^T Q
  }
  const std::size_t at = std::size_t(b) * T * C3 + std::size_t(h) * D;
  std::uint16_t* kb = bits_at(bits, at + C);
  std::uint16_t* vb = bits_at(bits, at + 2 * std::size_t(C));
  add_rows<D>(dqkv + at + C, kb, rounded, C3, key, T, dk, q);
  add_rows<D>(dqkv + at + 2 * std::size_t(C), vb, rounded, C3, key, T, dv, q);
}

// dQ of 64 queries: every key tile up to the diagonal.
template <int D>
__global__ void __launch_bounds__(kThreads, 3)
    flash_query_grads_kernel(float* dqkv, const std::uint16_t* qkv, const std::uint16_t* dout,
                             const float* lse, const float* dots, int T, int C, int NH,
                             float scale, bool rounded, std::uint16_t* bits) {
  constexpr int LD = Shape<D>::kLD;
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int kTileElems = kRows * LD;
  auto* q_s = reinterpret_cast<std::uint16_t*>(smem);
  std::uint16_t *do_s = q_s + kTileElems, *k_s = do_s + kTileElems;  // K and V: two tiles each
  std::uint16_t* v_s = k_s + 2 * kTileElems;
  const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, q = threadIdx.x & 3;
  const int b = blockIdx.y / NH, h = blockIdx.y % NH;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kRows;
  const std::size_t C3 = 3 * std::size_t(C);
  const std::uint16_t* head = qkv + std::size_t(b) * T * C3 + std::size_t(h) * D;
  const std::uint16_t* dhead = dout + std::size_t(b) * T * C + std::size_t(h) * D;
  const std::size_t stats = (std::size_t(b) * NH + h) * T;
  auto fetch = [&](int k0, int buf) {  // as in forward
    load_rows_async<D>(k_s + buf * kTileElems, head + C, C3, k0, T);
    load_rows_async<D>(v_s + buf * kTileElems, head + 2 * std::size_t(C), C3, k0, T);
    cp_async_commit();
  };
  fetch(0, 0);
  load_rows<D>(q_s, head, C3, q0, T);
  load_rows<D>(do_s, dhead, C, q0, T);
  __syncthreads();
  std::uint32_t qa[D / 16][4], da[D / 16][4];
  load_a<D>(qa, q_s + warp * 16 * LD, g, q);
  load_a<D>(da, do_s + warp * 16 * LD, g, q);
  const int t[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  float L[2], Dt[2];  // log-sum-exp (log2 domain) and D of rows g and g + 8
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    L[i] = t[i] < T ? lse[stats + t[i]] * kLog2e : 0.0f;
    Dt[i] = t[i] < T ? dots[stats + t[i]] : 0.0f;
  }
  float dq[D / 8][4] = {};
  const float scale2 = scale * kLog2e;
  const int key_end = min(T, q0 + kRows);
  for (int k0 = 0, buf = 0; k0 < key_end; k0 += kRows, buf ^= 1) {
    cp_async_wait<0>();
    __syncthreads();
    if (k0 + kRows < key_end) fetch(k0 + kRows, buf ^ 1);
    const std::uint16_t *k_t = k_s + buf * kTileElems, *v_t = v_s + buf * kTileElems;
    float s[kTiles][4], dp[kTiles][4];
    scores<D>(s, qa, k_t);
    scores<D>(dp, da, v_t);
#pragma unroll
    for (int j = 0; j < kTiles; ++j)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const int i = x >> 1, key = k0 + j * 8 + 2 * q + (x & 1);
        const float pr = key <= t[i] && key < T ? exp2f(s[j][x] * scale2 - L[i]) : 0.0f;
        s[j][x] = scale * pr * (dp[j][x] - Dt[i]);  // dS
      }
    accumulate<D>(dq, s, k_t);  // dQ += dS K
  }
  const std::size_t at = std::size_t(b) * T * C3 + std::size_t(h) * D;
  add_rows<D>(dqkv + at, bits_at(bits, at), rounded, C3, t, T, dq, q);
}

using GradKernel = void (*)(float*, const std::uint16_t*, const std::uint16_t*, const float*,
                            const float*, int, int, int, float, bool, std::uint16_t*);

template <int D>
void backward_for(float* dqkv, const std::uint16_t* qkv, const std::uint16_t* dout,
                  const float* lse, const float* dots, int B, int T, int C, int NH, bool rounded,
                  std::uint16_t* bits, cudaStream_t s) {
  const dim3 grid(unsigned((T + kRows - 1) / kRows), unsigned(B * NH));
  constexpr std::size_t smem = Shape<D>::kBackward;
  for (GradKernel k :
       {GradKernel(flash_key_grads_kernel<D>), GradKernel(flash_query_grads_kernel<D>)}) {
    cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    k<<<grid, kThreads, smem, s>>>(dqkv, qkv, dout, lse, dots, T, C, NH, 1.0f / sqrtf(float(D)),
                                   rounded, bits);
  }
}

template <int D>
void forward_for(float* out, float* lse, const std::uint16_t* qkv, int B, int T, int C, int NH,
                 bool rounded, std::uint16_t* bits, cudaStream_t s) {
  const dim3 grid(unsigned((T + kRows - 1) / kRows), unsigned(B * NH));
  constexpr std::size_t smem = Shape<D>::kForward;
  cudaFuncSetAttribute(flash_forward_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       int(smem));
  flash_forward_kernel<D><<<grid, kThreads, smem, s>>>(out, lse, qkv, T, C, NH,
                                                      1.0f / sqrtf(float(D)), rounded, bits);
}

}  // namespace

bool flash_attention_fits(int C, int NH) {
  if (NH <= 0 || C % NH) return false;
  const int hs = C / NH;
  return hs == 32 || hs == 64 || hs == 128;
}

void flash_attention_forward(float* out, float* lse, const std::uint16_t* qkv, int B, int T,
                             int C, int NH, bool rounded, std::uint16_t* bits, cudaStream_t s) {
  if (B <= 0 || T <= 0) return;
  switch (C / NH) {
    case 32: return forward_for<32>(out, lse, qkv, B, T, C, NH, rounded, bits, s);
    case 64: return forward_for<64>(out, lse, qkv, B, T, C, NH, rounded, bits, s);
    case 128: return forward_for<128>(out, lse, qkv, B, T, C, NH, rounded, bits, s);
  }
}

void flash_attention_backward(float* dqkv, const std::uint16_t* qkv, const std::uint16_t* dout,
                              const float* dout_values, const float* out, const float* lse,
                              float* dots, int B, int T, int C, int NH, bool rounded,
                              std::uint16_t* bits, cudaStream_t s) {
  if (B <= 0 || T <= 0) return;
  const std::size_t rows = std::size_t(B) * NH * T;
  row_dots_kernel<<<unsigned((rows + kWarps - 1) / kWarps), kThreads, 0, s>>>(
      dots, dout_values, out, T, C, NH, C / NH, rows);
  switch (C / NH) {
    case 32: return backward_for<32>(dqkv, qkv, dout, lse, dots, B, T, C, NH, rounded, bits, s);
    case 64: return backward_for<64>(dqkv, qkv, dout, lse, dots, B, T, C, NH, rounded, bits, s);
    case 128: return backward_for<128>(dqkv, qkv, dout, lse, dots, B, T, C, NH, rounded, bits, s);
  }
}

}  // namespace trident::gpu
