// The Llama block's kernels (llama_launch.hpp): RMSNorm, RoPE over q and k
// in one pass, SwiGLU, and grouped-query causal attention. A warp owns a row
// wherever a row is reduced, so sums are warp butterflies in a fixed order.
#include <stdexcept>
#include <string>

#include "compute/cuda/device_math.cuh"
#include "compute/cuda/llama_launch.hpp"

namespace trident::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int kRowWarps = kThreads / 32;              // rows per block in the row kernels
constexpr int kLaneValues = kGqaMaxHeadSize / 32;     // head elements a lane holds

unsigned row_blocks(std::size_t rows) { return unsigned((rows + kRowWarps - 1) / kRowWarps); }

__global__ void rmsnorm_forward_kernel(float* out, float* rstd, const float* inp,
                                       const float* w, int N, int C, float eps) {
  const int row = blockIdx.x * kRowWarps + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (row >= N) return;
  const float* x = inp + std::size_t(row) * C;
  float ss = 0;
  for (int c = lane; c < C; c += 32) ss += x[c] * x[c];
  const float r = 1.0f / sqrtf(warp_reduce(ss, SumOp{}) / C + eps);
  float* o = out + std::size_t(row) * C;
  for (int c = lane; c < C; c += 32) o[c] = x[c] * r * w[c];
  if (lane == 0) rstd[row] = r;
}

__global__ void rmsnorm_dinp_kernel(float* dinp, const float* dout, const float* inp,
                                    const float* w, const float* rstd, int N, int C) {
  const int row = blockIdx.x * kRowWarps + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (row >= N) return;
  const std::size_t off = std::size_t(row) * C;
  const float *x = inp + off, *g = dout + off;
  const float r = rstd[row];
  float dot = 0;
  for (int c = lane; c < C; c += 32) dot += w[c] * g[c] * x[c] * r;
  dot = warp_reduce(dot, SumOp{}) / C;
  float* dx = dinp + off;
  for (int c = lane; c < C; c += 32) dx[c] += r * (w[c] * g[c] - x[c] * r * dot);
}

// One thread per column walks the rows in order: coalesced and deterministic.
__global__ void rmsnorm_dweight_kernel(float* dw, const float* dout, const float* inp,
                                       const float* rstd, int N, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float sum = 0;
  for (int i = 0; i < N; ++i) {
    const std::size_t e = std::size_t(i) * C + c;
    sum += inp[e] * rstd[i] * dout[e];
  }
  dw[c] += sum;
}

// One thread per (row, head, pair): (x[i], x[i + half]) rotated by sign * angle.
__global__ void rope_kernel(float* x, const float* cos_t, const float* sin_t, int T, int heads,
                            int half, std::size_t ld, int pos0, float sign, std::size_t pairs) {
  for (std::size_t p = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; p < pairs;
       p += std::size_t(gridDim.x) * blockDim.x) {
    const int i = int(p % half);
    const std::size_t head = p / half;
    const std::size_t row = head / heads;
    const int t = int(row % T);
    float* lo = x + row * ld + (head % heads) * 2 * half;
    const std::size_t a = std::size_t(pos0 + t) * half + i;
    const float c = cos_t[a], s = sign * sin_t[a];
    const float x0 = lo[i], x1 = lo[i + half];
    lo[i] = x0 * c - x1 * s;
    lo[i + half] = x1 * c + x0 * s;
  }
}

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

__global__ void swiglu_forward_kernel(float* out, const float* inp, int F, std::size_t n) {
  for (std::size_t e = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; e < n;
       e += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t i = e / F, j = e % F;
    const float a = inp[i * 2 * F + j], b = inp[i * 2 * F + F + j];
    out[e] = a * sigmoid(a) * b;
  }
}

__global__ void swiglu_backward_kernel(float* dinp, const float* dout, const float* inp, int F,
                                       std::size_t n) {
  for (std::size_t e = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; e < n;
       e += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t i = e / F, j = e % F, ao = i * 2 * F + j;
    const float a = inp[ao], b = inp[ao + F], g = dout[e], s = sigmoid(a);
    dinp[ao] += g * b * s * (1.0f + a * (1.0f - s));
    dinp[ao + F] += g * a * s;
  }
}

// Where a batch's heads start in qkv (rows `row` floats apart).
struct Heads {
  int NH, KVH, hs, group, row;
  __device__ int q(int h) const { return h * hs; }
  __device__ int k(int h) const { return (NH + h / group) * hs; }
  __device__ int v(int h) const { return (NH + KVH + h / group) * hs; }
};

// a . b over a head, every lane holding the sum.
__device__ __forceinline__ float head_dot(const float* a, const float* b, int hs, int lane) {
  float s = 0;
  for (int d = lane; d < hs; d += 32) s += a[d] * b[d];
  return warp_reduce(s, SumOp{});
}

// A warp per (b, h, t): online softmax over keys 0..t (FlashAttention's
// running max and sum, one key at a time).
__global__ void gqa_forward_kernel(float* out, float* lse, const float* qkv, int B, int T,
                                   Heads at, float scale) {
  const std::size_t w = blockIdx.x * std::size_t(kRowWarps) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (w >= std::size_t(B) * at.NH * T) return;
  const int t = int(w % T), h = int(w / T % at.NH), b = int(w / T / at.NH);
  const float* base = qkv + std::size_t(b) * T * at.row;
  const float* q = base + std::size_t(t) * at.row + at.q(h);
  float acc[kLaneValues] = {}, m = -INFINITY, l = 0;
  for (int j = 0; j <= t; ++j) {
    const float* kj = base + std::size_t(j) * at.row + at.k(h);
    const float* vj = base + std::size_t(j) * at.row + at.v(h);
    const float s = head_dot(q, kj, at.hs, lane) * scale;
    const float mx = fmaxf(m, s), corr = expf(m - mx), p = expf(s - mx);
    l = l * corr + p;
    m = mx;
    for (int e = 0; e < kLaneValues && lane + 32 * e < at.hs; ++e)
      acc[e] = acc[e] * corr + p * vj[lane + 32 * e];
  }
  float* o = out + (std::size_t(b) * T + t) * at.NH * at.hs + at.q(h);
  for (int e = 0; e < kLaneValues && lane + 32 * e < at.hs; ++e) o[lane + 32 * e] = acc[e] / l;
  if (lane == 0) lse[(std::size_t(b) * at.NH + h) * T + t] = m + logf(l);
}

// A warp per (b, h, t): D_t = dO_t . O_t into dots, then dQ_t over keys 0..t.
__global__ void gqa_dq_kernel(float* dqkv, float* dots, const float* dout, const float* qkv,
                              const float* out, const float* lse, int B, int T, Heads at,
                              float scale) {
  const std::size_t w = blockIdx.x * std::size_t(kRowWarps) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (w >= std::size_t(B) * at.NH * T) return;
  const int t = int(w % T), h = int(w / T % at.NH), b = int(w / T / at.NH);
  const std::size_t C = std::size_t(at.NH) * at.hs, oo = (std::size_t(b) * T + t) * C + at.q(h);
  const float D = head_dot(dout + oo, out + oo, at.hs, lane);
  if (lane == 0) dots[w] = D;
  const std::size_t base = std::size_t(b) * T * at.row;
  const float* q = qkv + base + std::size_t(t) * at.row + at.q(h);
  const float L = lse[w];
  float dq[kLaneValues] = {};
  for (int j = 0; j <= t; ++j) {
    const float* kj = qkv + base + std::size_t(j) * at.row + at.k(h);
    const float* vj = qkv + base + std::size_t(j) * at.row + at.v(h);
    const float p = expf(head_dot(q, kj, at.hs, lane) * scale - L);
    const float ds = p * (head_dot(dout + oo, vj, at.hs, lane) - D) * scale;
    for (int e = 0; e < kLaneValues && lane + 32 * e < at.hs; ++e) dq[e] += ds * kj[lane + 32 * e];
  }
  float* g = dqkv + base + std::size_t(t) * at.row + at.q(h);
  for (int e = 0; e < kLaneValues && lane + 32 * e < at.hs; ++e) g[lane + 32 * e] += dq[e];
}

// A warp per (b, key/value head, j): dK_j and dV_j over the group's query
// heads in order, each over queries j..T-1.
__global__ void gqa_dkv_kernel(float* dqkv, const float* dots, const float* dout,
                               const float* qkv, const float* lse, int B, int T, Heads at,
                               float scale) {
  const std::size_t w = blockIdx.x * std::size_t(kRowWarps) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (w >= std::size_t(B) * at.KVH * T) return;
  const int j = int(w % T), g = int(w / T % at.KVH), b = int(w / T / at.KVH);
  const std::size_t C = std::size_t(at.NH) * at.hs, base = std::size_t(b) * T * at.row;
  const int h0 = g * at.group;
  const float* kj = qkv + base + std::size_t(j) * at.row + at.k(h0);
  const float* vj = qkv + base + std::size_t(j) * at.row + at.v(h0);
  float dk[kLaneValues] = {}, dv[kLaneValues] = {};
  for (int h = h0; h < h0 + at.group; ++h) {
    const std::size_t stats = (std::size_t(b) * at.NH + h) * T;
    for (int t = j; t < T; ++t) {
      const float* q = qkv + base + std::size_t(t) * at.row + at.q(h);
      const float* go = dout + (std::size_t(b) * T + t) * C + at.q(h);
      const float p = expf(head_dot(q, kj, at.hs, lane) * scale - lse[stats + t]);
      const float ds = p * (head_dot(go, vj, at.hs, lane) - dots[stats + t]) * scale;
      for (int e = 0; e < kLaneValues && lane + 32 * e < at.hs; ++e) {
        dk[e] += ds * q[lane + 32 * e];
        dv[e] += p * go[lane + 32 * e];
      }
    }
  }
  float* gk = dqkv + base + std::size_t(j) * at.row + at.k(h0);
  float* gv = dqkv + base + std::size_t(j) * at.row + at.v(h0);
  for (int e = 0; e < kLaneValues && lane + 32 * e < at.hs; ++e) {
    gk[lane + 32 * e] += dk[e];
    gv[lane + 32 * e] += dv[e];
  }
}

Heads heads_of(int NH, int KVH, int hs) {
  if (KVH <= 0 || NH % KVH != 0 || hs > kGqaMaxHeadSize)
    throw std::invalid_argument("gqa attention: kv heads " + std::to_string(KVH) +
                                " must divide the heads " + std::to_string(NH) +
                                " and the head size " + std::to_string(hs) + " be at most " +
                                std::to_string(kGqaMaxHeadSize));
  return Heads{NH, KVH, hs, NH / KVH, (NH + 2 * KVH) * hs};
}

void rope_launch(float* x, const RopeTableView& table, int B, int T, int heads, int hs,
                 std::size_t ld, int pos0, float sign, cudaStream_t stream) {
  if (hs != 2 * table.half || pos0 < 0 || pos0 + T > table.positions)
    throw std::out_of_range("rope: positions [" + std::to_string(pos0) + ", " +
                            std::to_string(pos0 + T) + ") of head size " + std::to_string(hs) +
                            " outside the table's " + std::to_string(table.positions));
  const std::size_t pairs = std::size_t(B) * T * heads * table.half;
  if (pairs == 0) return;
  rope_kernel<<<elementwise_blocks(pairs, kThreads), kThreads, 0, stream>>>(
      x, table.cos, table.sin, T, heads, table.half, ld, pos0, sign, pairs);
}

}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                     float eps, cudaStream_t stream) {
  if (N == 0) return;
  rmsnorm_forward_kernel<<<row_blocks(N), kThreads, 0, stream>>>(out, rstd, inp, weight, N, C,
                                                                 eps);
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int N, int C, cudaStream_t stream) {
  if (N == 0) return;
  if (dinp)
    rmsnorm_dinp_kernel<<<row_blocks(N), kThreads, 0, stream>>>(dinp, dout, inp, weight, rstd, N,
                                                                C);
  if (dweight)
    rmsnorm_dweight_kernel<<<(C + kThreads - 1) / kThreads, kThreads, 0, stream>>>(
        dweight, dout, inp, rstd, N, C);
}

void rope_forward(float* x, const RopeTableView& table, int B, int T, int heads, int hs,
                  std::size_t ld, int pos0, cudaStream_t stream) {
  rope_launch(x, table, B, T, heads, hs, ld, pos0, 1.0f, stream);
}

void rope_backward(float* dx, const RopeTableView& table, int B, int T, int heads, int hs,
                   std::size_t ld, int pos0, cudaStream_t stream) {
  rope_launch(dx, table, B, T, heads, hs, ld, pos0, -1.0f, stream);
}

void swiglu_forward(float* out, const float* inp, int N, int F, cudaStream_t stream) {
  const std::size_t n = std::size_t(N) * F;
  if (n == 0) return;
  swiglu_forward_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(out, inp, F, n);
}

void swiglu_backward(float* dinp, const float* dout, const float* inp, int N, int F,
                     cudaStream_t stream) {
  const std::size_t n = std::size_t(N) * F;
  if (n == 0) return;
  swiglu_backward_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(dinp, dout, inp,
                                                                                   F, n);
}

void gqa_attention_forward(float* out, float* lse, const float* qkv, int B, int T, int NH, int KVH,
                           int hs, cudaStream_t stream) {
  const Heads at = heads_of(NH, KVH, hs);
  const std::size_t rows = std::size_t(B) * NH * T;
  if (rows == 0) return;
  gqa_forward_kernel<<<row_blocks(rows), kThreads, 0, stream>>>(out, lse, qkv, B, T, at,
                                                                1.0f / sqrtf(float(hs)));
}

void gqa_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                            const float* lse, float* dots, int B, int T, int NH, int KVH, int hs,
                            cudaStream_t stream) {
  const Heads at = heads_of(NH, KVH, hs);
  const std::size_t rows = std::size_t(B) * NH * T, kv_rows = std::size_t(B) * KVH * T;
  if (rows == 0) return;
  const float scale = 1.0f / sqrtf(float(hs));
  gqa_dq_kernel<<<row_blocks(rows), kThreads, 0, stream>>>(dqkv, dots, dout, qkv, out, lse, B, T,
                                                           at, scale);
  gqa_dkv_kernel<<<row_blocks(kv_rows), kThreads, 0, stream>>>(dqkv, dots, dout, qkv, lse, B, T,
                                                               at, scale);
}

}  // namespace trident::gpu
