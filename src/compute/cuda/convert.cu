// Storage conversions between f32 and bf16/fp16 (round to nearest even, as
// core/half.hpp on the CPU), and f32 values rounded in place to what a 16-bit
// type holds. Element-wise, so deterministic; the bf16 ones four elements per
// access where the pointers allow.
#include "compute/cuda/device_math.cuh"
#include "compute/cuda/launch.hpp"
#include "compute/cuda/vector_access.cuh"

namespace trident::gpu {
namespace {

constexpr unsigned kThreads = 256;

template <class D, class S>
__global__ void convert_kernel(D* dst, const S* src, std::size_t n) {
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    dst[i] = from_f32<D>(to_f32(src[i]));
}

template <class H, int W>
__global__ void round_kernel(float* x, std::size_t groups) {
  for (std::size_t g = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; g < groups;
       g += std::size_t(gridDim.x) * blockDim.x) {
    float v[W];
    load(v, x + g * W);
#pragma unroll
    for (int k = 0; k < W; ++k) v[k] = to_f32(from_f32<H>(v[k]));
    store(x + g * W, v);
  }
}

template <class H>
void launch_round(float* x, std::size_t n, cudaStream_t s) {
  if (vectorizable(n, {x}))
    round_kernel<H, 4><<<elementwise_blocks(n / 4, kThreads), kThreads, 0, s>>>(x, n / 4);
  else
    round_kernel<H, 1><<<elementwise_blocks(n, kThreads), kThreads, 0, s>>>(x, n);
}

// dst = src rounded to bf16 values, and their bits where bits is not null;
// W elements per access.
template <int W>
__global__ void round_bf16_kernel(float* dst, std::uint16_t* bits, const float* src,
                                  std::size_t groups) {
  for (std::size_t g = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; g < groups;
       g += std::size_t(gridDim.x) * blockDim.x) {
    float v[W];
    std::uint16_t b[W];
    load(v, src + g * W);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const __nv_bfloat16 h = from_f32<__nv_bfloat16>(v[k]);
      v[k] = to_f32(h);
      b[k] = __bfloat16_as_ushort(h);
    }
    store(dst + g * W, v);
    if (bits) store(bits + g * W, b);
  }
}

// f32 to bf16 bits (round to nearest even) and bits to f32 (exact).
struct Pack {
  __device__ std::uint16_t operator()(float x) const { return bf16_bits(x); }
};
struct Widen {
  __device__ float operator()(std::uint16_t b) const {
    return __bfloat162float(__ushort_as_bfloat16(b));
  }
};

// dst = op(src), W elements per access.
template <int W, class In, class Out, class Op>
__global__ void bf16_convert_kernel(Out* dst, const In* src, std::size_t groups, Op op) {
  for (std::size_t g = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; g < groups;
       g += std::size_t(gridDim.x) * blockDim.x) {
    In v[W];
    Out o[W];
    load(v, src + g * W);
#pragma unroll
    for (int k = 0; k < W; ++k) o[k] = op(v[k]);
    store(dst + g * W, o);
  }
}

template <class In, class Out, class Op>
void launch_bf16_convert(Out* dst, const In* src, std::size_t n, bool vec4, Op op,
                         cudaStream_t s) {
  const std::size_t groups = vec4 ? n / 4 : n;
  const unsigned blocks = elementwise_blocks(groups, kThreads);
  if (vec4) bf16_convert_kernel<4><<<blocks, kThreads, 0, s>>>(dst, src, groups, op);
  else bf16_convert_kernel<1><<<blocks, kThreads, 0, s>>>(dst, src, groups, op);
}

template <class D, class S>
void launch_convert(void* dst, const void* src, std::size_t n, cudaStream_t s) {
  convert_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, s>>>(
      static_cast<D*>(dst), static_cast<const S*>(src), n);
}

}  // namespace

bool convert(void* dst, int dst_kind, const void* src, int src_kind, std::size_t n,
             cudaStream_t s) {
  if (!n) return true;
  if ((src_kind == kF32 && dst_kind == kBF16) || (src_kind == kBF16 && dst_kind == kF32)) {
    const bool to_bits = dst_kind == kBF16;
    auto* f32 = static_cast<const float*>(to_bits ? src : dst);
    auto* bits = static_cast<const std::uint16_t*>(to_bits ? dst : src);
    const bool vec4 = vectorizable(n, {f32}, {bits});
    if (to_bits)
      launch_bf16_convert(static_cast<std::uint16_t*>(dst), static_cast<const float*>(src), n,
                          vec4, Pack{}, s);
    else
      launch_bf16_convert(static_cast<float*>(dst), static_cast<const std::uint16_t*>(src), n,
                          vec4, Widen{}, s);
    return true;
  }
  if (src_kind == kF32 && dst_kind == kBF16) launch_convert<__nv_bfloat16, float>(dst, src, n, s);
  else if (src_kind == kF32 && dst_kind == kF16) launch_convert<__half, float>(dst, src, n, s);
  else if (src_kind == kBF16 && dst_kind == kF32) launch_convert<float, __nv_bfloat16>(dst, src, n, s);
  else if (src_kind == kF16 && dst_kind == kF32) launch_convert<float, __half>(dst, src, n, s);
  else return false;
  return true;
}

bool round_to(float* x, int kind, std::size_t n, cudaStream_t s) {
  if (!n || kind == kF32) return true;
  if (kind == kBF16) launch_round<__nv_bfloat16>(x, n, s);
  else if (kind == kF16) launch_round<__half>(x, n, s);
  else return false;
  return true;
}

void round_to_bf16(float* dst, std::uint16_t* bits, const float* src, std::size_t n,
                   cudaStream_t s) {
  if (!n) return;
  const bool vec4 = vectorizable(n, {dst, src}, {bits});
  const std::size_t groups = vec4 ? n / 4 : n;
  const unsigned blocks = elementwise_blocks(groups, kThreads);
  if (vec4) round_bf16_kernel<4><<<blocks, kThreads, 0, s>>>(dst, bits, src, groups);
  else round_bf16_kernel<1><<<blocks, kThreads, 0, s>>>(dst, bits, src, groups);
}

}  // namespace trident::gpu
