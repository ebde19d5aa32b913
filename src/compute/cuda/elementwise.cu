// Element-wise kernels: GELU (tanh form, also fused with a 16-bit run's
// roundings), add, scale and AdamW. Grid-stride
// loops in fp32; each element is independent, so results are deterministic.
#include "compute/cuda/device_math.cuh"
#include "compute/cuda/launch.hpp"
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

// ComputeBackend::gelu_forward_rounded's passes in one: inp rounded to H in
// place (and its bf16 bits), out = gelu of it rounded to bf16 with its bits,
// or to H without.
template <class H>
__global__ void gelu_forward_rounded_kernel(float* out, std::uint16_t* bits, float* inp,
                                            std::uint16_t* inp_bits, std::size_t n) {
  TRIDENT_GRID_STRIDE(i, n) {
    const float x = stored<H>(inp[i]);
    inp[i] = x;
    if (inp_bits) inp_bits[i] = bf16_bits(x);
    const float y = gelu_of(x);
    if (bits) {
      out[i] = stored<__nv_bfloat16>(y);
      bits[i] = bf16_bits(y);
    } else {
      out[i] = stored<H>(y);
    }
  }
}

// ComputeBackend::gelu_backward_rounded's passes in one: dout rounded to H,
// dinp = 0 + gelu'(inp) dout rounded as above (dout is left as it was).
template <class H>
__global__ void gelu_backward_rounded_kernel(float* dinp, std::uint16_t* bits, const float* inp,
                                             const float* dout, std::size_t n) {
  TRIDENT_GRID_STRIDE(i, n) {
    const float d = 0.0f + gelu_slope(inp[i]) * stored<H>(dout[i]);
    if (bits) {
      dinp[i] = stored<__nv_bfloat16>(d);
      bits[i] = bf16_bits(d);
    } else {
      dinp[i] = stored<H>(d);
    }
  }
}

template <class S>
__global__ void add_kernel(S* out, const S* a, const S* b, std::size_t n) {
  TRIDENT_GRID_STRIDE(i, n) out[i] = from_f32<S>(to_f32(a[i]) + to_f32(b[i]));
}

template <class S>
__global__ void scale_kernel(S* x, float factor, std::size_t n) {
  TRIDENT_GRID_STRIDE(i, n) x[i] = from_f32<S>(to_f32(x[i]) * factor);
}

// Decoupled AdamW as compute/adamw_math.hpp writes it, each operation rounded
// on its own (the _rn intrinsics keep the compiler from fusing others), so
// the host's update (ZeRO-Offload) gives the same bits.
template <class S>
__global__ void adamw_kernel(S* param, const S* grad, float* m, float* v, std::size_t n,
                             AdamWScalars a, std::uint16_t* bf16) {
  TRIDENT_GRID_STRIDE(i, n) {
    const float g = __fmul_rn(to_f32(grad[i]), a.grad_scale);
    float p = __fmul_rn(to_f32(param[i]), a.decay);
    const float mi = __fmaf_rn(a.beta1, m[i], __fmul_rn(a.one_minus_beta1, g));
    const float vi = __fmaf_rn(a.beta2, v[i], __fmul_rn(__fmul_rn(a.one_minus_beta2, g), g));
    const float denom = __fmaf_rn(__fsqrt_rn(vi), a.inv_sqrt_bc2, a.eps);
    p = __fsub_rn(p, __fdiv_rn(__fmul_rn(a.step, mi), denom));
    m[i] = mi, v[i] = vi;
    param[i] = from_f32<S>(p);
    if (bf16) bf16[i] = bf16_bits(p);
  }
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
  const unsigned blocks = elementwise_blocks(n, kThreads);
  auto kernel = store_kind == kBF16 ? gelu_forward_rounded_kernel<__nv_bfloat16>
                                    : gelu_forward_rounded_kernel<__half>;
  kernel<<<blocks, kThreads, 0, s>>>(out, bits, inp, inp_bits, n);
}

void gelu_backward_rounded(float* dinp, std::uint16_t* bits, const float* inp, const float* dout,
                           std::size_t n, int store_kind, cudaStream_t s) {
  if (!n) return;
  const unsigned blocks = elementwise_blocks(n, kThreads);
  auto kernel = store_kind == kBF16 ? gelu_backward_rounded_kernel<__nv_bfloat16>
                                    : gelu_backward_rounded_kernel<__half>;
  kernel<<<blocks, kThreads, 0, s>>>(dinp, bits, inp, dout, n);
}

template <class S>
void add(S* out, const S* a, const S* b, std::size_t n, cudaStream_t s) {
  if (n) add_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, s>>>(out, a, b, n);
}

template <class S>
void scale(S* x, float factor, std::size_t n, cudaStream_t s) {
  if (n) scale_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, s>>>(x, factor, n);
}

template <class S>
void adamw(S* param, const S* grad, float* m, float* v, std::size_t n, float lr, float beta1,
           float beta2, float eps, float weight_decay, float bc1, float bc2, float grad_scale,
           std::uint16_t* bf16, cudaStream_t s) {
  if (!n) return;
  const AdamWScalars a = adamw_scalars(lr, beta1, beta2, eps, weight_decay, bc1, bc2, grad_scale);
  adamw_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, s>>>(param, grad, m, v, n, a, bf16);
}

#define TRIDENT_INSTANTIATE(S)                                                               \
  template void gelu_forward<S>(S*, const S*, std::size_t, cudaStream_t);                     \
  template void gelu_backward<S>(S*, const S*, const S*, std::size_t, cudaStream_t);          \
  template void add<S>(S*, const S*, const S*, std::size_t, cudaStream_t);                    \
  template void scale<S>(S*, float, std::size_t, cudaStream_t);                               \
  template void adamw<S>(S*, const S*, float*, float*, std::size_t, float, float, float, float, \
                         float, float, float, float, std::uint16_t*, cudaStream_t);
TRIDENT_GPU_STORAGE_TYPES(TRIDENT_INSTANTIATE)
#undef TRIDENT_INSTANTIATE

}  // namespace trident::gpu
