// Layer norm forward/backward and deterministic column sums. A warp owns a
// row (its statistics are warp reductions, fixed order). Parameter gradients
// (dw, db, and a linear layer's dbias) are column sums over all rows: blocks
// of 32 columns x 256 rows write fp32 partials, then one thread per column
// adds the chunks in order, so the bits never depend on scheduling.
#include "compute/cuda/device_math.cuh"
#include "compute/cuda/launch.hpp"

namespace trident::gpu {
namespace {

constexpr int kRowWarps = 8;           // rows per block in the row kernels
constexpr int kRowsPerChunk = 256;     // rows summed by one partial
constexpr int kColTile = 32, kRowLanes = 8;
constexpr float kLnEps = 1e-5f;

int chunks_of(int N) { return (N + kRowsPerChunk - 1) / kRowsPerChunk; }

// rounded (S = float only): out rounded to bf16 values, their bits to bits
// where it is not null.
template <class S>
__global__ void layernorm_forward_kernel(S* out, float* mean, float* rstd, const S* inp,
                                         const S* w, const S* b, int N, int C, bool rounded,
                                         std::uint16_t* bits) {
  const int row = blockIdx.x * kRowWarps + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (row >= N) return;
  const S* x = inp + std::size_t(row) * C;
  float s = 0;
  for (int c = lane; c < C; c += 32) s += to_f32(x[c]);
  const float m = warp_reduce(s, SumOp{}) / C;
  float v = 0;
  for (int c = lane; c < C; c += 32) {
    const float d = to_f32(x[c]) - m;
    v += d * d;
  }
  v = warp_reduce(v, SumOp{}) / C;
  const float r = 1.0f / sqrtf(v + kLnEps);
  S* o = out + std::size_t(row) * C;
  std::uint16_t* ob = bits ? bits + std::size_t(row) * C : nullptr;
  for (int c = lane; c < C; c += 32) {
    float y = (to_f32(x[c]) - m) * r * to_f32(w[c]) + to_f32(b[c]);
    if (rounded) {
      const __nv_bfloat16 h = from_f32<__nv_bfloat16>(y);
      y = to_f32(h);
      if (ob) ob[c] = __bfloat16_as_ushort(h);
    }
    o[c] = from_f32<S>(y);
  }
  if (lane == 0) mean[row] = m, rstd[row] = r;
}

template <class S>
__global__ void layernorm_dinp_kernel(S* dinp, const S* dout, const S* inp, const S* w,
                                      const float* mean, const float* rstd, int N, int C) {
  const int row = blockIdx.x * kRowWarps + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (row >= N) return;
  const std::size_t off = std::size_t(row) * C;
  const S *x = inp + off, *d = dout + off;
  const float m = mean[row], r = rstd[row];
  float dnorm_mean = 0, dnorm_norm_mean = 0;
  for (int c = lane; c < C; c += 32) {
    const float dn = to_f32(w[c]) * to_f32(d[c]);
    dnorm_mean += dn;
    dnorm_norm_mean += dn * (to_f32(x[c]) - m) * r;
  }
  dnorm_mean = warp_reduce(dnorm_mean, SumOp{}) / C;
  dnorm_norm_mean = warp_reduce(dnorm_norm_mean, SumOp{}) / C;
  S* dx = dinp + off;
  for (int c = lane; c < C; c += 32) {
    const float norm = (to_f32(x[c]) - m) * r;
    const float g = (to_f32(w[c]) * to_f32(d[c]) - dnorm_mean - norm * dnorm_norm_mean) * r;
    dx[c] = from_f32<S>(to_f32(dx[c]) + g);
  }
}

// The terms summed over rows: K values per (row, column).
template <class S>
struct BiasTerm {
  static constexpr int K = 1;
  const S* dout;
  __device__ void operator()(int i, int c, int C, float* acc) const {
    acc[0] += to_f32(dout[std::size_t(i) * C + c]);
  }
};
template <class S>
struct NormParamTerm {  // dw (x - mean) * rstd * dout, db dout
  static constexpr int K = 2;
  const S *dout, *inp;
  const float *mean, *rstd;
  __device__ void operator()(int i, int c, int C, float* acc) const {
    const std::size_t k = std::size_t(i) * C + c;
    const float d = to_f32(dout[k]);
    acc[0] += (to_f32(inp[k]) - mean[i]) * rstd[i] * d;
    acc[1] += d;
  }
};

// Block (32, 8) over 32 columns x one chunk of rows; partial k of chunk j at
// partial[(k * chunks + j) * C + c].
template <class Term>
__global__ void column_partials_kernel(float* partial, int N, int C, Term term) {
  constexpr int K = Term::K;
  __shared__ float sh[K][kRowLanes][kColTile + 1];
  const int c = blockIdx.x * kColTile + threadIdx.x, chunk = blockIdx.y;
  const int i0 = chunk * kRowsPerChunk, i1 = min(N, i0 + kRowsPerChunk);
  float acc[K] = {};
  if (c < C)
    for (int i = i0 + threadIdx.y; i < i1; i += kRowLanes) term(i, c, C, acc);
  for (int k = 0; k < K; ++k) sh[k][threadIdx.y][threadIdx.x] = acc[k];
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  for (int k = 0; k < K; ++k) {
    float s = 0;
    for (int y = 0; y < kRowLanes; ++y) s += sh[k][y][threadIdx.x];
    partial[(std::size_t(k) * gridDim.y + chunk) * C + c] = s;
  }
}

template <class S>
__global__ void column_finish_kernel(S* out, const float* partial, int chunks, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float s = 0;
  for (int j = 0; j < chunks; ++j) s += partial[std::size_t(j) * C + c];
  out[c] = from_f32<S>(to_f32(out[c]) + s);
}

template <class Term>
void column_partials(float* partial, int N, int C, Term term, cudaStream_t s) {
  const dim3 grid(unsigned((C + kColTile - 1) / kColTile), unsigned(chunks_of(N)));
  column_partials_kernel<<<grid, dim3(kColTile, kRowLanes), 0, s>>>(partial, N, C, term);
}

template <class S>
void column_finish(S* out, const float* partial, int N, int C, cudaStream_t s) {
  column_finish_kernel<<<unsigned((C + 255) / 256), 256, 0, s>>>(out, partial, chunks_of(N), C);
}

template <class S>
__global__ void add_bias_kernel(S* out, const S* bias, int OC) {
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= OC) return;
  const std::size_t i = std::size_t(blockIdx.x) * OC + c;
  out[i] = from_f32<S>(to_f32(out[i]) + to_f32(bias[c]));
}

template <class S>
void launch_forward(S* out, float* mean, float* rstd, const S* inp, const S* w, const S* b,
                    int N, int C, bool rounded, std::uint16_t* bits, cudaStream_t s) {
  if (N <= 0) return;
  const unsigned blocks = unsigned((N + kRowWarps - 1) / kRowWarps);
  layernorm_forward_kernel<<<blocks, kRowWarps * 32, 0, s>>>(out, mean, rstd, inp, w, b, N, C,
                                                              rounded, bits);
}

}  // namespace

template <class S>
void layernorm_forward(S* out, float* mean, float* rstd, const S* inp, const S* w, const S* b,
                       int N, int C, cudaStream_t s) {
  launch_forward(out, mean, rstd, inp, w, b, N, C, false, nullptr, s);
}

void layernorm_forward_rounded(float* out, std::uint16_t* bits, float* mean, float* rstd,
                               const float* inp, const float* w, const float* b, int N, int C,
                               cudaStream_t s) {
  launch_forward(out, mean, rstd, inp, w, b, N, C, true, bits, s);
}

std::size_t layernorm_backward_scratch(int N, int C) { return 2 * std::size_t(chunks_of(N)) * C; }

template <class S>
void layernorm_backward(S* dinp, S* dw, S* db, const S* dout, const S* inp, const S* w,
                        const float* mean, const float* rstd, int N, int C, float* scratch,
                        cudaStream_t s) {
  if (N <= 0) return;
  const unsigned blocks = unsigned((N + kRowWarps - 1) / kRowWarps);
  if (dinp)
    layernorm_dinp_kernel<<<blocks, kRowWarps * 32, 0, s>>>(dinp, dout, inp, w, mean, rstd, N, C);
  if (!dw) return;
  column_partials(scratch, N, C, NormParamTerm<S>{dout, inp, mean, rstd}, s);
  column_finish(dw, scratch, N, C, s);
  column_finish(db, scratch + std::size_t(chunks_of(N)) * C, N, C, s);
}

std::size_t bias_backward_scratch(int N, int OC) { return std::size_t(chunks_of(N)) * OC; }

template <class S>
void bias_backward(S* dbias, const S* dout, int N, int OC, float* scratch, cudaStream_t s) {
  if (N <= 0) return;
  column_partials(scratch, N, OC, BiasTerm<S>{dout}, s);
  column_finish(dbias, scratch, N, OC, s);
}

void bias_backward_bits(float* dbias, const std::uint16_t* dout, int N, int OC, float* scratch,
                        cudaStream_t s) {
  if (N <= 0) return;
  const auto* d = reinterpret_cast<const __nv_bfloat16*>(dout);
  column_partials(scratch, N, OC, BiasTerm<__nv_bfloat16>{d}, s);
  column_finish(dbias, scratch, N, OC, s);
}

template <class S>
void add_bias(S* out, const S* bias, int N, int OC, cudaStream_t s) {
  if (N <= 0) return;
  add_bias_kernel<<<dim3(unsigned(N), unsigned((OC + 255) / 256)), 256, 0, s>>>(out, bias, OC);
}

#define TRIDENT_INSTANTIATE(S)                                                                   \
  template void layernorm_forward<S>(S*, float*, float*, const S*, const S*, const S*, int, int,  \
                                     cudaStream_t);                                               \
  template void layernorm_backward<S>(S*, S*, S*, const S*, const S*, const S*, const float*,     \
                                      const float*, int, int, float*, cudaStream_t);              \
  template void bias_backward<S>(S*, const S*, int, int, float*, cudaStream_t);                   \
  template void add_bias<S>(S*, const S*, int, int, cudaStream_t);
TRIDENT_GPU_STORAGE_TYPES(TRIDENT_INSTANTIATE)
#undef TRIDENT_INSTANTIATE

}  // namespace trident::gpu
