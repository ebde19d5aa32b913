#include "compute/cpu/cpu_llama_ops.hpp"

#include "compute/cpu/llama_kernels.hpp"

namespace trident::cpu {
namespace {

struct CpuRotaryTable final : RotaryTable {
  explicit CpuRotaryTable(RopeTable t) : table(std::move(t)) {}
  RopeTable table;
};

const RopeTable& table_of(const RotaryTable& t) {
  return static_cast<const CpuRotaryTable&>(t).table;
}

class CpuLlamaOps final : public LlamaOps {
 public:
  void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int N, int C,
                       float eps) override {
    cpu::rmsnorm_forward(out, rstd, inp, w, N, C, eps);
  }
  void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp,
                        const float* w, const float* rstd, int N, int C) override {
    cpu::rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C);
  }
  std::unique_ptr<RotaryTable> make_rotary_table(int positions, int hs, double theta) override {
    return std::make_unique<CpuRotaryTable>(make_rope_table(positions, hs, theta));
  }
  void rope_forward(float* x, const RotaryTable& table, int B, int T, int heads, int hs,
                    std::size_t ld, int pos0) override {
    cpu::rope_forward(x, table_of(table), B, T, heads, hs, ld, pos0);
  }
  void rope_backward(float* dx, const RotaryTable& table, int B, int T, int heads, int hs,
                     std::size_t ld, int pos0) override {
    cpu::rope_backward(dx, table_of(table), B, T, heads, hs, ld, pos0);
  }
  void swiglu_forward(float* out, const float* inp, int N, int F) override {
    cpu::swiglu_forward(out, inp, N, F);
  }
  void swiglu_backward(float* dinp, const float* dout, const float* inp, int N, int F) override {
    cpu::swiglu_backward(dinp, dout, inp, N, F);
  }
  void gqa_attention_forward(float* out, float* lse, const float* qkv, int B, int T, int NH,
                             int KVH, int hs) override {
    cpu::gqa_attention_forward(out, lse, qkv, B, T, NH, KVH, hs);
  }
  void gqa_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                              const float* lse, int B, int T, int NH, int KVH, int hs) override {
    cpu::gqa_attention_backward(dqkv, dout, qkv, out, lse, B, T, NH, KVH, hs);
  }
};

}  // namespace

std::unique_ptr<LlamaOps> make_cpu_llama_ops() { return std::make_unique<CpuLlamaOps>(); }

}  // namespace trident::cpu
