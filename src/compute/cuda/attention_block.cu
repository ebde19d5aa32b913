// Ring attention's block kernels on the GPU (compute/attention_block.hpp), in
// f32 and simple: one thread per query row (forward, dq) or key row (dk, dv),
// an online softmax over the keys, no shared memory. Every sum runs in a
// fixed order, with no atomics. Head sizes up to kMaxHead.
#include <cuda_runtime.h>

#include <math_constants.h>

#include "compute/cuda/attention_block_launch.hpp"

namespace trident::gpu {
namespace {

constexpr int kMaxHead = 256, kThreads = 128;

struct Head {
  int b, h, hs;
  float scale;
  __device__ Head(const AttentionBlock& a)
      : b(blockIdx.z), h(blockIdx.y), hs(a.width / a.heads), scale(rsqrtf(float(a.width / a.heads))) {}
  template <class R>
  __device__ auto row(const R& rows, int t) const {
    return rows.data + b * rows.seq + t * rows.row + std::size_t(h) * hs;
  }
};

__device__ float dot(const float* x, const float* y, int n) {
  float s = 0.f;
  for (int c = 0; c < n; ++c) s += x[c] * y[c];
  return s;
}

__global__ void block_forward(AttentionBlock a) {
  const Head hd(a);
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= a.queries) return;
  const float* q = hd.row(a.q, i);
  float m = -CUDART_INF_F, l = 0.f, acc[kMaxHead];
  for (int c = 0; c < hd.hs; ++c) acc[c] = 0.f;
  const int keys = a.causal ? min(a.keys, i + 1) : a.keys;
  for (int j = 0; j < keys; ++j) {
    const float s = dot(q, hd.row(a.k, j), hd.hs) * hd.scale;
    const float hi = fmaxf(m, s), corr = __expf(m - hi), p = __expf(s - hi);
    const float* v = hd.row(a.v, j);
    for (int c = 0; c < hd.hs; ++c) acc[c] = acc[c] * corr + p * v[c];
    l = l * corr + p;
    m = hi;
  }
  float* out = hd.row(a.out, i);
  float& lse = a.lse[hd.b * a.lse_seq + hd.h * a.lse_head + i];
  const float mine = m + logf(l);
  if (lse == -CUDART_INF_F) {
    for (int c = 0; c < hd.hs; ++c) out[c] = acc[c] / l;
  } else {
    const float hi = fmaxf(lse, mine);
    const float merged = hi + logf(expf(lse - hi) + expf(mine - hi));
    const float keep = expf(lse - merged), add = expf(mine - merged) / l;
    for (int c = 0; c < hd.hs; ++c) out[c] = out[c] * keep + acc[c] * add;
    lse = merged;
    return;
  }
  lse = mine;
}

// D_i = rowsum(dout_i * out_i) over the head's columns.
__device__ float row_dot(const AttentionBlock& a, const AttentionBlockGrads& g, const Head& hd,
                         int i) {
  return dot(hd.row(g.dout, i), hd.row(a.out, i), hd.hs);
}

__global__ void block_backward_dq(AttentionBlock a, AttentionBlockGrads g) {
  const Head hd(a);
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= a.queries) return;
  const float *q = hd.row(a.q, i), *dO = hd.row(g.dout, i);
  const float D = row_dot(a, g, hd, i), lse = a.lse[hd.b * a.lse_seq + hd.h * a.lse_head + i];
  float acc[kMaxHead];
  for (int c = 0; c < hd.hs; ++c) acc[c] = 0.f;
  const int keys = a.causal ? min(a.keys, i + 1) : a.keys;
  for (int j = 0; j < keys; ++j) {
    const float* k = hd.row(a.k, j);
    const float p = __expf(dot(q, k, hd.hs) * hd.scale - lse);
    const float dS = p * (dot(dO, hd.row(a.v, j), hd.hs) - D);
    for (int c = 0; c < hd.hs; ++c) acc[c] += dS * k[c];
  }
  float* dq = hd.row(g.dq, i);
  for (int c = 0; c < hd.hs; ++c) dq[c] += hd.scale * acc[c];
}

__global__ void block_backward_dkv(AttentionBlock a, AttentionBlockGrads g) {
  const Head hd(a);
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= a.keys) return;
  const float *k = hd.row(a.k, j), *v = hd.row(a.v, j);
  float dk[kMaxHead], dv[kMaxHead];
  for (int c = 0; c < hd.hs; ++c) dk[c] = dv[c] = 0.f;
  for (int i = a.causal ? j : 0; i < a.queries; ++i) {
    const float *q = hd.row(a.q, i), *dO = hd.row(g.dout, i);
    const float lse = a.lse[hd.b * a.lse_seq + hd.h * a.lse_head + i];
    const float p = __expf(dot(q, k, hd.hs) * hd.scale - lse);
    const float dS = p * (dot(dO, v, hd.hs) - row_dot(a, g, hd, i));
    for (int c = 0; c < hd.hs; ++c) {
      dv[c] += p * dO[c];
      dk[c] += dS * q[c];
    }
  }
  float *gk = hd.row(g.dk, j), *gv = hd.row(g.dv, j);
  for (int c = 0; c < hd.hs; ++c) {
    gk[c] += hd.scale * dk[c];
    gv[c] += dv[c];
  }
}

dim3 grid_of(int rows, const AttentionBlock& a) {
  return dim3((rows + kThreads - 1) / kThreads, a.heads, a.batch);
}

}  // namespace

bool attention_block_fits(int width, int heads) { return width / heads <= kMaxHead; }

void attention_block_forward(const AttentionBlock& a, cudaStream_t s) {
  block_forward<<<grid_of(a.queries, a), kThreads, 0, s>>>(a);
}

void attention_block_backward(const AttentionBlock& a, const AttentionBlockGrads& g,
                              cudaStream_t s) {
  block_backward_dq<<<grid_of(a.queries, a), kThreads, 0, s>>>(a, g);
  block_backward_dkv<<<grid_of(a.keys, a), kThreads, 0, s>>>(a, g);
}

}  // namespace trident::gpu
