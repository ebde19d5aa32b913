// CudaBackend's Llama ops (compute/llama_ops.hpp) on the kernels of
// llama_launch.hpp. The rotary table is built on the host with the CPU's
// values (cpu::make_rope_table) and copied to the device once.
#include <utility>

#include "compute/cpu/llama_kernels.hpp"
#include "compute/cuda/cuda_backend.hpp"
#include "compute/cuda/llama_launch.hpp"

namespace trident {
namespace {

class CudaRotaryTable final : public RotaryTable {
 public:
  CudaRotaryTable(const cpu::RopeTable& t, const CudaSite& site) : site_(site) {
    const std::size_t bytes = t.cos.size() * sizeof(float);
    cuda_check(cudaMalloc(&memory_, 2 * bytes + sizeof(float)), site_, "cudaMalloc (rope table)");
    float* cos = static_cast<float*>(memory_);
    float* sin = cos + t.cos.size();
    cuda_check(cudaMemcpy(cos, t.cos.data(), bytes, cudaMemcpyHostToDevice), site_, "rope table");
    cuda_check(cudaMemcpy(sin, t.sin.data(), bytes, cudaMemcpyHostToDevice), site_, "rope table");
    view = {cos, sin, t.positions, t.half};
  }
  ~CudaRotaryTable() override { cudaFree(memory_); }
  CudaRotaryTable(const CudaRotaryTable&) = delete;
  CudaRotaryTable& operator=(const CudaRotaryTable&) = delete;
  gpu::RopeTableView view;

 private:
  CudaSite site_;
  void* memory_ = nullptr;
};

const gpu::RopeTableView& view_of(const RotaryTable& t) {
  return static_cast<const CudaRotaryTable&>(t).view;
}

}  // namespace

void CudaBackend::rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w,
                                  int N, int C, float eps) {
  run("rmsnorm_forward", [&] { gpu::rmsnorm_forward(out, rstd, inp, w, N, C, eps, stream_); });
}

void CudaBackend::rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp,
                                   const float* w, const float* rstd, int N, int C) {
  run("rmsnorm_backward",
      [&] { gpu::rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C, stream_); });
}

std::unique_ptr<RotaryTable> CudaBackend::make_rotary_table(int positions, int hs,
                                                            double theta) {
  return std::make_unique<CudaRotaryTable>(cpu::make_rope_table(positions, hs, theta), site_);
}

void CudaBackend::rope_forward(float* x, const RotaryTable& table, int B, int T, int heads,
                               int hs, std::size_t ld, int pos0) {
  run("rope_forward",
      [&] { gpu::rope_forward(x, view_of(table), B, T, heads, hs, ld, pos0, stream_); });
}

void CudaBackend::rope_backward(float* dx, const RotaryTable& table, int B, int T, int heads,
                                int hs, std::size_t ld, int pos0) {
  run("rope_backward",
      [&] { gpu::rope_backward(dx, view_of(table), B, T, heads, hs, ld, pos0, stream_); });
}

void CudaBackend::swiglu_forward(float* out, const float* inp, int N, int F) {
  run("swiglu_forward", [&] { gpu::swiglu_forward(out, inp, N, F, stream_); });
}

void CudaBackend::swiglu_backward(float* dinp, const float* dout, const float* inp, int N,
                                  int F) {
  run("swiglu_backward", [&] { gpu::swiglu_backward(dinp, dout, inp, N, F, stream_); });
}

void CudaBackend::gqa_attention_forward(float* out, float* lse, const float* qkv, int B, int T,
                                        int NH, int KVH, int hs) {
  run("gqa_attention_forward",
      [&] { gpu::gqa_attention_forward(out, lse, qkv, B, T, NH, KVH, hs, stream_); });
}

void CudaBackend::gqa_attention_backward(float* dqkv, const float* dout, const float* qkv,
                                         const float* out, const float* lse, int B, int T,
                                         int NH, int KVH, int hs) {
  auto* dots = static_cast<float*>(scratch(std::size_t(B) * NH * T * sizeof(float)));
  run("gqa_attention_backward", [&] {
    gpu::gqa_attention_backward(dqkv, dout, qkv, out, lse, dots, B, T, NH, KVH, hs, stream_);
  });
}

}  // namespace trident
