// Causal attention on bf16 tensor cores without the T x T matrix in device
// memory (FlashAttention-2, Dao 2023), for head sizes 32, 64 and 128. A block
// owns 64 rows (queries in forward and dQ, keys in dK/dV), its four warps 16
// each, and walks the other side's rows 64 at a time through shared memory.
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
#include "compute/cuda/launch.hpp"

namespace trident::gpu {
namespace {

constexpr int kRows = 64;  // a block's own rows, and the rows of each inner tile
constexpr int kWarps = 4;  // warp w owns rows 16w .. 16w + 15
constexpr int kThreads = kWarps * 32;
constexpr int kTiles = kRows / 8;  // n8 fragments across an inner tile's 64 rows
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

template <int D>
struct Shape {
  static constexpr int kLD = D + 8;  // shared-memory row stride: fragment loads hit 32 banks
  static constexpr std::size_t kTile = std::size_t(kRows) * kLD * sizeof(std::uint16_t);
  static constexpr std::size_t kForward = 3 * kTile;                               // Q, K, V
  static constexpr std::size_t kBackward = 4 * kTile + 2 * kRows * sizeof(float);  // + lse, D
};

// Fragments of mma.m16n8k16 (PTX ISA), lane = 4 g + q:
//   A (16 x 16): rows g and g + 8, columns 2q, 2q + 1 and 2q + 8, 2q + 9;
//   B (16 x 8): column g, rows 2q, 2q + 1 and 2q + 8, 2q + 9;
//   C (16 x 8, f32): rows g (c0, c1) and g + 8 (c2, c3), columns 2q, 2q + 1.
// Pairs are packed low half first.
__device__ __forceinline__ void mma(float* c, const std::uint32_t* a, std::uint32_t b0,
                                    std::uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ std::uint32_t pair_at(const std::uint16_t* p) {
  return *reinterpret_cast<const std::uint32_t*>(p);
}
__device__ __forceinline__ std::uint32_t pair_of(std::uint16_t lo, std::uint16_t hi) {
  return std::uint32_t(lo) | (std::uint32_t(hi) << 16);
}
__device__ __forceinline__ std::uint32_t bf16_pair(float lo, float hi) {
  return pair_of(bf16_bits(lo), bf16_bits(hi));
}

// Rows row0 .. row0 + 63 of a (T, ld) bf16 matrix into shared memory, zeros
// past T; every load issued before the first store.
template <int D>
__device__ __forceinline__ void load_rows(std::uint16_t* dst, const std::uint16_t* src,
                                          std::size_t ld, int row0, int T) {
  constexpr int kPieces = D / 8, kEach = kRows * kPieces / kThreads;  // 16-byte pieces
  uint4 v[kEach];
#pragma unroll
  for (int e = 0; e < kEach; ++e) {
    const int i = threadIdx.x + e * kThreads, r = i / kPieces, c = i % kPieces * 8;
    v[e] = row0 + r < T ? *reinterpret_cast<const uint4*>(src + std::size_t(row0 + r) * ld + c)
                        : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int e = 0; e < kEach; ++e) {
    const int i = threadIdx.x + e * kThreads, r = i / kPieces, c = i % kPieces * 8;
    *reinterpret_cast<uint4*>(dst + r * Shape<D>::kLD + c) = v[e];
  }
}

// The A fragments of a warp's 16 rows of D columns (rows kLD apart).
template <int D>
__device__ __forceinline__ void load_a(std::uint32_t (*a)[4], const std::uint16_t* rows, int g,
                                       int q) {
  constexpr int LD = Shape<D>::kLD;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const std::uint16_t* p = rows + g * LD + kk * 16 + 2 * q;
    a[kk][0] = pair_at(p), a[kk][1] = pair_at(p + 8 * LD);
    a[kk][2] = pair_at(p + 8), a[kk][3] = pair_at(p + 8 * LD + 8);
  }
}

// s (16 x 64) = A (16 x D) times tile^T, the tile's 64 rows of D in shared memory.
template <int D>
__device__ __forceinline__ void scores(float (*s)[4], const std::uint32_t (*a)[4],
                                       const std::uint16_t* tile, int g, int q) {
  constexpr int LD = Shape<D>::kLD;
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
    const std::uint16_t* row = tile + (j * 8 + g) * LD + 2 * q;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      mma(s[j], a[kk], pair_at(row + kk * 16), pair_at(row + kk * 16 + 8));
  }
}

// acc (16 x D) += P (16 x 64, C fragments, rounded to bf16 here) times the
// tile (64 rows of D in shared memory).
template <int D>
__device__ __forceinline__ void accumulate(float (*acc)[4], const float (*p)[4],
                                           const std::uint16_t* tile, int g, int q) {
  constexpr int LD = Shape<D>::kLD;
#pragma unroll
  for (int kk = 0; kk < kRows / 16; ++kk) {
    const std::uint32_t a[4] = {bf16_pair(p[2 * kk][0], p[2 * kk][1]),
                                bf16_pair(p[2 * kk][2], p[2 * kk][3]),
                                bf16_pair(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                                bf16_pair(p[2 * kk + 1][2], p[2 * kk + 1][3])};
    const std::uint16_t* col = tile + (kk * 16 + 2 * q) * LD + g;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      const std::uint16_t* c = col + n * 8;
      mma(acc[n], a, pair_of(c[0], c[LD]), pair_of(c[8 * LD], c[9 * LD]));
    }
  }
}

template <int D>
__global__ void __launch_bounds__(kThreads)
    flash_forward_kernel(float* out, float* lse, const std::uint16_t* qkv, int T, int C, int NH,
                         float scale) {
  constexpr int LD = Shape<D>::kLD;
  extern __shared__ __align__(16) unsigned char smem[];
  auto* q_s = reinterpret_cast<std::uint16_t*>(smem);
  std::uint16_t *k_s = q_s + kRows * LD, *v_s = k_s + kRows * LD;
  const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, q = threadIdx.x & 3;
  const int b = blockIdx.y / NH, h = blockIdx.y % NH;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kRows;  // the longest rows start first
  const std::size_t C3 = 3 * std::size_t(C);
  const std::uint16_t* head = qkv + std::size_t(b) * T * C3 + std::size_t(h) * D;
  load_rows<D>(q_s, head, C3, q0, T);
  __syncthreads();
  std::uint32_t qa[D / 16][4];
  load_a<D>(qa, q_s + warp * 16 * LD, g, q);

  float o[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // log2-domain max, this lane's sums
  const int t[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  const float scale2 = scale * kLog2e;
  const int key_end = min(T, q0 + kRows);
  for (int k0 = 0; k0 < key_end; k0 += kRows) {
    __syncthreads();  // every warp is done with the last tile
    load_rows<D>(k_s, head + C, C3, k0, T);
    load_rows<D>(v_s, head + 2 * std::size_t(C), C3, k0, T);
    __syncthreads();
    float s[kTiles][4];
    scores<D>(s, qa, k_s, g, q);
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
    accumulate<D>(o, s, v_s, g, q);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    if (t[i] >= T) continue;
    const float inv = 1.0f / l[i];
    float* row = out + (std::size_t(b) * T + t[i]) * C + std::size_t(h) * D + 2 * q;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      row[n * 8] = o[n][2 * i] * inv, row[n * 8 + 1] = o[n][2 * i + 1] * inv;
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
// r[1] of dst (row stride ld), rows at or past T skipped.
template <int D>
__device__ __forceinline__ void add_rows(float* dst, std::size_t ld, const int* r, int T,
                                         const float (*acc)[4], int q) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (r[i] >= T) continue;
    float* row = dst + std::size_t(r[i]) * ld + 2 * q;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      row[n * 8] += acc[n][2 * i], row[n * 8 + 1] += acc[n][2 * i + 1];
  }
}

// dK and dV of 64 keys: every query tile from the diagonal on.
template <int D>
__global__ void __launch_bounds__(kThreads)
    flash_key_grads_kernel(float* dqkv, const std::uint16_t* qkv, const std::uint16_t* dout,
                           const float* lse, const float* dots, int T, int C, int NH,
                           float scale) {
  constexpr int LD = Shape<D>::kLD;
  extern __shared__ __align__(16) unsigned char smem[];
  auto* k_s = reinterpret_cast<std::uint16_t*>(smem);
  std::uint16_t *v_s = k_s + kRows * LD, *q_s = v_s + kRows * LD, *do_s = q_s + kRows * LD;
  auto* lse_s = reinterpret_cast<float*>(do_s + kRows * LD);  // log2 domain
  float* dot_s = lse_s + kRows;
  const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, q = threadIdx.x & 3;
  const int b = blockIdx.y / NH, h = blockIdx.y % NH;
  const int j0 = blockIdx.x * kRows;  // the most query tiles start first
  const std::size_t C3 = 3 * std::size_t(C);
  const std::uint16_t* head = qkv + std::size_t(b) * T * C3 + std::size_t(h) * D;
  const std::uint16_t* dhead = dout + std::size_t(b) * T * C + std::size_t(h) * D;
  const std::size_t stats = (std::size_t(b) * NH + h) * T;
  load_rows<D>(k_s, head + C, C3, j0, T);
  load_rows<D>(v_s, head + 2 * std::size_t(C), C3, j0, T);
  __syncthreads();
  std::uint32_t ka[D / 16][4], va[D / 16][4];
  load_a<D>(ka, k_s + warp * 16 * LD, g, q);
  load_a<D>(va, v_s + warp * 16 * LD, g, q);
  float dk[D / 8][4] = {}, dv[D / 8][4] = {};
  const int key[2] = {j0 + warp * 16 + g, j0 + warp * 16 + g + 8};
  const float scale2 = scale * kLog2e;
  for (int i0 = j0; i0 < T; i0 += kRows) {
    __syncthreads();
    load_rows<D>(q_s, head, C3, i0, T);
    load_rows<D>(do_s, dhead, C, i0, T);
    for (int r = threadIdx.x; r < kRows; r += kThreads) {
      const bool in = i0 + r < T;
      lse_s[r] = in ? lse[stats + i0 + r] * kLog2e : 0.0f;
      dot_s[r] = in ? dots[stats + i0 + r] : 0.0f;
    }
    __syncthreads();
    float p[kTiles][4], ds[kTiles][4];  // S^T then P^T; dP^T then dS^T: keys by queries
    scores<D>(p, ka, q_s, g, q);
    scores<D>(ds, va, do_s, g, q);
#pragma unroll
    for (int j = 0; j < kTiles; ++j)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const int c = j * 8 + 2 * q + (x & 1), t = i0 + c;
        const float pr = key[x >> 1] <= t && t < T ? exp2f(p[j][x] * scale2 - lse_s[c]) : 0.0f;
        p[j][x] = pr;
        ds[j][x] = scale * pr * (ds[j][x] - dot_s[c]);
      }
    accumulate<D>(dv, p, do_s, g, q);   // dV += P^T dO
    accumulate<D>(dk, ds, q_s, g, q);   // dK += dS^T Q
  }
  float* grads = dqkv + std::size_t(b) * T * C3 + std::size_t(h) * D;
  add_rows<D>(grads + C, C3, key, T, dk, q);
  add_rows<D>(grads + 2 * std::size_t(C), C3, key, T, dv, q);
}

// dQ of 64 queries: every key tile up to the diagonal.
template <int D>
__global__ void __launch_bounds__(kThreads)
    flash_query_grads_kernel(float* dqkv, const std::uint16_t* qkv, const std::uint16_t* dout,
                             const float* lse, const float* dots, int T, int C, int NH,
                             float scale) {
  constexpr int LD = Shape<D>::kLD;
  extern __shared__ __align__(16) unsigned char smem[];
  auto* q_s = reinterpret_cast<std::uint16_t*>(smem);
  std::uint16_t *do_s = q_s + kRows * LD, *k_s = do_s + kRows * LD, *v_s = k_s + kRows * LD;
  const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, q = threadIdx.x & 3;
  const int b = blockIdx.y / NH, h = blockIdx.y % NH;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kRows;
  const std::size_t C3 = 3 * std::size_t(C);
  const std::uint16_t* head = qkv + std::size_t(b) * T * C3 + std::size_t(h) * D;
  const std::uint16_t* dhead = dout + std::size_t(b) * T * C + std::size_t(h) * D;
  const std::size_t stats = (std::size_t(b) * NH + h) * T;
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
  for (int k0 = 0; k0 < key_end; k0 += kRows) {
    __syncthreads();
    load_rows<D>(k_s, head + C, C3, k0, T);
    load_rows<D>(v_s, head + 2 * std::size_t(C), C3, k0, T);
    __syncthreads();
    float s[kTiles][4], dp[kTiles][4];
    scores<D>(s, qa, k_s, g, q);
    scores<D>(dp, da, v_s, g, q);
#pragma unroll
    for (int j = 0; j < kTiles; ++j)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const int i = x >> 1, key = k0 + j * 8 + 2 * q + (x & 1);
        const float pr = key <= t[i] && key < T ? exp2f(s[j][x] * scale2 - L[i]) : 0.0f;
        s[j][x] = scale * pr * (dp[j][x] - Dt[i]);  // dS
      }
    accumulate<D>(dq, s, k_s, g, q);  // dQ += dS K
  }
  add_rows<D>(dqkv + std::size_t(b) * T * C3 + std::size_t(h) * D, C3, t, T, dq, q);
}

using GradKernel = void (*)(float*, const std::uint16_t*, const std::uint16_t*, const float*,
                            const float*, int, int, int, float);

template <int D>
void backward_for(float* dqkv, const std::uint16_t* qkv, const std::uint16_t* dout,
                  const float* lse, const float* dots, int B, int T, int C, int NH,
                  cudaStream_t s) {
  const dim3 grid(unsigned((T + kRows - 1) / kRows), unsigned(B * NH));
  constexpr std::size_t smem = Shape<D>::kBackward;
  for (GradKernel k :
       {GradKernel(flash_key_grads_kernel<D>), GradKernel(flash_query_grads_kernel<D>)}) {
    cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    k<<<grid, kThreads, smem, s>>>(dqkv, qkv, dout, lse, dots, T, C, NH, 1.0f / sqrtf(float(D)));
  }
}

template <int D>
void forward_for(float* out, float* lse, const std::uint16_t* qkv, int B, int T, int C, int NH,
                 cudaStream_t s) {
  const dim3 grid(unsigned((T + kRows - 1) / kRows), unsigned(B * NH));
  constexpr std::size_t smem = Shape<D>::kForward;
  cudaFuncSetAttribute(flash_forward_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       int(smem));
  flash_forward_kernel<D><<<grid, kThreads, smem, s>>>(out, lse, qkv, T, C, NH,
                                                      1.0f / sqrtf(float(D)));
}

}  // namespace

bool flash_attention_fits(int C, int NH) {
  if (NH <= 0 || C % NH) return false;
  const int hs = C / NH;
  return hs == 32 || hs == 64 || hs == 128;
}

void flash_attention_forward(float* out, float* lse, const std::uint16_t* qkv, int B, int T,
                             int C, int NH, cudaStream_t s) {
  if (B <= 0 || T <= 0) return;
  switch (C / NH) {
    case 32: return forward_for<32>(out, lse, qkv, B, T, C, NH, s);
    case 64: return forward_for<64>(out, lse, qkv, B, T, C, NH, s);
    case 128: return forward_for<128>(out, lse, qkv, B, T, C, NH, s);
  }
}

void flash_attention_backward(float* dqkv, const std::uint16_t* qkv, const std::uint16_t* dout,
                              const float* dout_values, const float* out, const float* lse,
                              float* dots, int B, int T, int C, int NH, cudaStream_t s) {
  if (B <= 0 || T <= 0) return;
  const std::size_t rows = std::size_t(B) * NH * T;
  row_dots_kernel<<<unsigned((rows + kWarps - 1) / kWarps), kThreads, 0, s>>>(
      dots, dout_values, out, T, C, NH, C / NH, rows);
  switch (C / NH) {
    case 32: return backward_for<32>(dqkv, qkv, dout, lse, dots, B, T, C, NH, s);
    case 64: return backward_for<64>(dqkv, qkv, dout, lse, dots, B, T, C, NH, s);
    case 128: return backward_for<128>(dqkv, qkv, dout, lse, dots, B, T, C, NH, s);
  }
}

}  // namespace trident::gpu
