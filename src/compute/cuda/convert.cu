// Storage conversions between f32 and bf16/fp16 (round to nearest even, as
// core/half.hpp on the CPU), and f32 values rounded in place to what a 16-bit
// type holds. Element-wise, so deterministic.
#include "compute/cuda/device_math.cuh"
#include "compute/cuda/launch.hpp"

namespace trident::gpu {
namespace {

constexpr unsigned kThreads = 256;

template <class D, class S>
__global__ void convert_kernel(D* dst, const S* src, std::size_t n) {
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    dst[i] = from_f32<D>(to_f32(src[i]));
}

template <class H>
__global__ void round_kernel(float* x, std::size_t n) {
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    x[i] = to_f32(from_f32<H>(x[i]));
}

// dst = src rounded to bf16 values, and their bits where bits is not null.
__global__ void round_bf16_kernel(float* dst, std::uint16_t* bits, const float* src,
                                  std::size_t n) {
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const __nv_bfloat16 h = from_f32<__nv_bfloat16>(src[i]);
    dst[i] = to_f32(h);
    if (bits) bits[i] = __bfloat16_as_ushort(h);
  }
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
  if (src_kind == kF32 && dst_kind == kBF16) launch_convert<__nv_bfloat16, float>(dst, src, n, s);
  else if (src_kind == kF32 && dst_kind == kF16) launch_convert<__half, float>(dst, src, n, s);
  else if (src_kind == kBF16 && dst_kind == kF32) launch_convert<float, __nv_bfloat16>(dst, src, n, s);
  else if (src_kind == kF16 && dst_kind == kF32) launch_convert<float, __half>(dst, src, n, s);
  else return false;
  return true;
}

bool round_to(float* x, int kind, std::size_t n, cudaStream_t s) {
  if (!n || kind == kF32) return true;
  if (kind == kBF16) round_kernel<__nv_bfloat16><<<elementwise_blocks(n, kThreads), kThreads, 0, s>>>(x, n);
  else if (kind == kF16) round_kernel<__half><<<elementwise_blocks(n, kThreads), kThreads, 0, s>>>(x, n);
  else return false;
  return true;
}

void round_to_bf16(float* dst, std::uint16_t* bits, const float* src, std::size_t n,
                   cudaStream_t s) {
  if (!n) return;
  round_bf16_kernel<<<elementwise_blocks(n, kThreads), kThreads, 0, s>>>(dst, bits, src, n);
}

}  // namespace trident::gpu
