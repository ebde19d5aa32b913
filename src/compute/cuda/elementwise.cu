// Element-wise kernels: GELU (tanh form, also fused with a 16-bit run's
// roundings), add, scale and AdamW. Grid-stride
// loops in fp32; each element is independent, so results are deterministic.
#include <algorithm>
#include <type_traits>

#include "compute/cuda/device_math.cuh"
#include "compute/cuda/launch.hpp"
#include "compute/cuda/vector_access.cuh"
#include "compute/adamw_math.hpp"

namespace trident::gpu {
namespace {

constexpr unsigned kThreads = 256;
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2/pi)

#define TRIDENT_GRID_STRIDE(i, n)                                                  \
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += std::size_t(gridDim.x) * blockDim.x)

__device__ __forceinline__ float gelu_of(float x) {
  return 0.5f * x * (1.0f + tanhf(kGeluK * (x + 0.044715f * x * x * x)));
}

__device__ __forceinline__ float gelu_slope(float x) {
  const float th = tanhf(kGeluK * (x + 0.044715f * x * x * x));
  const float sech2 = 1.0f - th * th;
  return 0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluK * (1.0f + 3.0f * 0.044715f * x * x);
}

// x as a 16-bit store type H holds it.
template <class H>
__device__ __forceinline__ float stored(float x) {
  return to_f32(from_f32<H>(x));
}

template <class S>
__global__ void gelu_forward_kernel(S* out, const S* inp, std::size_t n) {
  TRIDENT_GRID_STRIDE(i, n) out[i] = from_f32<S>(gelu_of(to_f32(inp[i])));
}

template <class S>
__global__ void gelu_backward_kernel(S* dinp, const S* inp, const S* dout, std::size_t n) {
  TRIDENT_GRID_STRIDE(i, n) {
    dinp[i] = from_f32<S>(to_f32(dinp[i]) + gelu_slope(to_f32(inp[i])) * to_f32(dout[i]));
  }
}

// Bf16Operands::gelu_forward_rounded's passes in one: inp rounded to H in
// place (and its bf16 bits), out = gelu of it rounded to bf16 with its bits,
// or to H without; out null: the bits alone (inp null too: read from
// inp_bits). W elements per access.
template <class H, int W>
__global__ void gelu_forward_rounded_kernel(float* out, std::uint16_t* bits, float* inp,
                                            std::uint16_t* inp_bits, std::size_t groups) {
  TRIDENT_GRID_STRIDE(g, groups) {
    const std::size_t i = g * W;
    float x[W], y[W];
    std::uint16_t xb[W], yb[W];
    if (inp) {
      load(x, inp + i);
    } else {  // the input is its bf16 bits
      load(xb, inp_bits + i);
#pragma unroll
      for (int k = 0; k < W; ++k) x[k] = __bfloat162float(__ushort_as_bfloat16(xb[k]));
    }
#pragma unroll
    for (int k = 0; k < W; ++k) {
      x[k] = stored<H>(x[k]);
      xb[k] = bf16_bits(x[k]);
      const float v = gelu_of(x[k]);
      y[k] = bits ? stored<__nv_bfloat16>(v) : stored<H>(v);
      yb[k] = bf16_bits(v);
    }
    if (out) store(inp + i, x), store(out + i, y);
    if (inp_bits && inp) store(inp_bits + i, xb);
    if (bits) store(bits + i, yb);
  }
}

// Bf16Operands::gelu_backward_rounded's passes in one: dout rounded to H,
// dinp = 0 + gelu'(inp) dout rounded as above (dout is left as it was); inp
// read from its bf16 bits where they are given. W elements per access.
template <class H, int W>
__global__ void gelu_backward_rounded_kernel(float* dinp, std::uint16_t* bits, const float* inp,
                                             const std::uint16_t* inp_bits, const float* dout,
                                             std::size_t groups) {
  TRIDENT_GRID_STRIDE(g, groups) {
    const std::size_t i = g * W;
    float x[W], d[W];
    std::uint16_t db[W];
    if (inp_bits) {
      std::uint16_t xb[W];
      load(xb, inp_bits + i);
#pragma unroll
      for (int k = 0; k < W; ++k) x[k] = __bfloat162float(__ushort_as_bfloat16(xb[k]));
    } else {
      load(x, inp + i);
    }
    load(d, dout + i);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float v = 0.0f + gelu_slope(x[k]) * stored<H>(d[k]);
      d[k] = bits ? stored<__nv_bfloat16>(v) : stored<H>(v);
      db[k] = bf16_bits(v);
    }
    store(dinp + i, d);
    if (bits) store(bits + i, db);
  }
}

template <class S>
__global__ void add_kernel(S* out, const S* a, const S* b, std::size_t n) {
  TRIDENT_GRID_STRIDE(i, n) out[i] = from_f32<S>(to_f32(a[i]) + to_f32(b[i]));
}

// f32 residual adds, four elements per access.
__global__ void add4_kernel(float* out, const float* a, const float* b, std::size_t groups) {
  TRIDENT_GRID_STRIDE(g, groups) {
    float x[4], y[4];
    load(x, a + 4 * g);
    load(y, b + 4 * g);
#pragma unroll
    for (int k = 0; k < 4; ++k) x[k] += y[k];
    store(out + 4 * g, x);
  }
}

template <class S>
__global__ void scale_kernel(S* x, float factor, std::size_t n) {
  TRIDENT_GRID_STRIDE(i, n) x[i] = from_f32<S>(to_f32(x[i]) * factor);
}

// Decoupled AdamW as compute/adamw_math.hpp writes it, each operation rounded
// on its own (the _rn intrinsics keep the compiler from fusing others), so
// the host's update (ZeRO-Offload) gives the same bits.
__device__ __forceinline__ void adamw_element(float* param, const float* grad, float* m,
                                              float* v, std::size_t i, const AdamWScalars& a,
                                              std::uint16_t* bf16) {
  const float g = __fmul_rn(grad[i], a.grad_scale);
  float p = __fmul_rn(param[i], a.decay);
  const float mi = __fmaf_rn(a.beta1, m[i], __fmul_rn(a.one_minus_beta1, g));
  const float vi = __fmaf_rn(a.beta2, v[i], __fmul_rn(__fmul_rn(a.one_minus_beta2, g), g));
  const float denom = __fmaf_rn(__fsqrt_rn(vi), a.inv_sqrt_bc2, a.eps);
  p = __fsub_rn(p, __fdiv_rn(__fmul_rn(a.step, mi), denom));
  m[i] = mi, v[i] = vi;
  param[i] = p;
  if (bf16) bf16[i] = bf16_bits(p);
}

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, std::size_t n,
                             AdamWScalars a, std::uint16_t* bf16) {
  TRIDENT_GRID_STRIDE(i, n) adamw_element(param, grad, m, v, i, a, bf16);
}

// One block per chunk of the plan, the chunk's span deciding the decay.
__global__ void adamw_chunks_kernel(float* param, const float* grad, float* m, float* v,
                                    const AdamWChunk* chunks, AdamWScalars decayed,
                                    AdamWScalars plain, std::uint16_t* bf16) {
  const AdamWChunk c = chunks[blockIdx.x];
  const AdamWScalars& a = c.decay ? decayed : plain;
  for (unsigned j = threadIdx.x; j < c.n; j += kThreads)
    adamw_element(param, grad, m, v, c.offset + j, a, bf16);
}

#undef TRIDENT_GRID_STRIDE

}  // namespace

template <class S>
void gelu_forward(S* out, const S* inp, std::size_t n, cudaStream_t s) {
  if (n) gelu_forward_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, s>>>(out, inp, n);
}

template <class S>
void gelu_backward(S* dinp, const S* inp, const S* dout, std::size_t n, cudaStream_t s) {
  if (n)
    gelu_backward_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, s>>>(dinp, inp, dout, n);
}

void gelu_forward_rounded(float* out, std::uint16_t* bits, float* inp, std::uint16_t* inp_bits,
                          std::size_t n, int store_kind, cudaStream_t s) {
  if (!n) return;
  const bool vec4 = vectorizable(n, {out, inp}, {bits, inp_bits});
  const unsigned blocks = elementwise_blocks(vec4 ? n / 4 : n, kThreads);
  auto kernel = store_kind == kBF16 ? (vec4 ? gelu_forward_rounded_kernel<__nv_bfloat16, 4>
                                            : gelu_forward_rounded_kernel<__nv_bfloat16, 1>)
                                    : (vec4 ? gelu_forward_rounded_kernel<__half, 4>
                                            : gelu_forward_rounded_kernel<__half, 1>);
  kernel<<<blocks, kThreads, 0, s>>>(out, bits, inp, inp_bits, vec4 ? n / 4 : n);
}

void gelu_backward_rounded(float* dinp, std::uint16_t* bits, const float* inp,
                           const std::uint16_t* inp_bits, const float* dout, std::size_t n,
                           int store_kind, cudaStream_t s) {
  if (!n) return;
  const bool vec4 = vectorizable(n, {dinp, inp, dout}, {bits, inp_bits});
  const unsigned blocks = elementwise_blocks(vec4 ? n / 4 : n, kThreads);
  auto kernel = store_kind == kBF16 ? (vec4 ? gelu_backward_rounded_kernel<__nv_bfloat16, 4>
                                            : gelu_backward_rounded_kernel<__nv_bfloat16, 1>)
                                    : (vec4 ? gelu_backward_rounded_kernel<__half, 4>
                                            : gelu_backward_rounded_kernel<__half, 1>);
  kernel<<<blocks, kThreads, 0, s>>>(dinp, bits, inp, inp_bits, dout, vec4 ? n / 4 : n);
}

template <class S>
void add(S* out, const S* a, const S* b, std::size_t n, cudaStream_t s) {
  if (!n) return;
  if constexpr (std::is_same_v<S, float>) {
    if (vectorizable(n, {out, a, b})) {
      add4_kernel<<<elementwise_blocks(n / 4, kThreads), kThreads, 0, s>>>(out, a, b, n / 4);
      return;
    }
  }
  add_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, s>>>(out, a, b, n);
}

template <class S>
void scale(S* x, float factor, std::size_t n, cudaStream_t s) {
  if (n) scale_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, s>>>(x, factor, n);
}

void adamw(float* param, const float* grad, float* m, float* v, std::size_t n, float lr,
           float beta1, float beta2, float eps, float weight_decay, float bc1, float bc2,
           float grad_scale, std::uint16_t* bf16, cudaStream_t s) {
  if (!n) return;
  const AdamWScalars a = adamw_scalars(lr, beta1, beta2, eps, weight_decay, bc1, bc2, grad_scale);
  adamw_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, s>>>(param, grad, m, v, n, a, bf16);
}

std::vector<AdamWChunk> adamw_plan(const AdamWSpan* spans, std::size_t count) {
  std::vector<AdamWChunk> plan;
  for (std::size_t i = 0; i < count; ++i)
    for (std::size_t at = 0; at < spans[i].n; at += kAdamWChunk)
      plan.push_back({spans[i].offset + at, unsigned(std::min(kAdamWChunk, spans[i].n - at)),
                      spans[i].decay ? 1u : 0u});
  return plan;
}

void adamw_chunks(float* param, const float* grad, float* m, float* v, const AdamWChunk* chunks,
                  std::size_t n_chunks, float lr, float beta1, float beta2, float eps,
                  float weight_decay, float bc1, float bc2, float grad_scale,
                  std::uint16_t* bf16, cudaStream_t s) {
  if (!n_chunks) return;
  const AdamWScalars decayed =
      adamw_scalars(lr, beta1, beta2, eps, weight_decay, bc1, bc2, grad_scale);
  const AdamWScalars plain = adamw_scalars(lr, beta1, beta2, eps, 0.0f, bc1, bc2, grad_scale);
  adamw_chunks_kernel<<<unsigned(n_chunks), kThreads, 0, s>>>(param, grad, m, v, chunks, decayed,
                                                              plain, bf16);
}

#define TRIDENT_INSTANTIATE(S)                                                               \
  template void gelu_forward<S>(S*, const S*, std::size_t, cudaStream_t);                     \
  template void gelu_backward<S>(S*, const S*, const S*, std::size_t, cudaStream_t);          \
  template void add<S>(S*, const S*, const S*, std::size_t, cudaStream_t);                    \
  template void scale<S>(S*, float, std::size_t, cudaStream_t);
TRIDENT_GPU_STORAGE_TYPES(TRIDENT_INSTANTIATE)
#undef TRIDENT_INSTANTIATE

}  // namespace trident::gpu
