// The Llama block's CUDA kernels (compute/cuda/llama_launch.hpp) against the
// CPU kernels (compute/cpu/llama_kernels.hpp) on random inputs: RMSNorm, RoPE
// on the fused qkv at a position offset, SwiGLU, and grouped-query attention
// (GQA and MQA, T past the CPU's tile). Outputs start as NaN, so an element a
// kernel fails to write fails the test; gradients start non-zero, so a kernel
// that writes instead of adding fails too.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "compute/cpu/llama_kernels.hpp"
#include "compute/cuda/llama_launch.hpp"
#include "gpu/gpu_test_support.hpp"

using namespace trident;
using namespace trident::testing;

namespace {

// The kernels run on the legacy default stream; the backend's copies may run
// on its own, so every hand-over between them waits for the device.
void settle() { ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess); }

class CudaLlama : public ::testing::Test {
 protected:
  std::unique_ptr<CudaBackend> gpu = make_test_gpu();
  DeviceArrays d{*gpu};
};

TEST_F(CudaLlama, RmsNorm) {
  const int N = 300, C = 97;
  const auto x = random_vector(std::size_t(N) * C, 1, -3, 3), w = random_vector(C, 2);
  const auto g = random_vector(x.size(), 3), dx0 = random_vector(x.size(), 4),
             dw0 = random_vector(C, 5);
  auto out = nan_vector(x.size()), rstd = nan_vector(N), dx = dx0, dw = dw0;
  cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
  cpu::rmsnorm_backward(dx.data(), dw.data(), g.data(), x.data(), w.data(), rstd.data(), N, C);
  float *go = d.poisoned(x.size()), *gr = d.poisoned(N), *gdx = d.upload(dx0), *gdw = d.upload(dw0);
  const float *gx = d.upload(x), *gw = d.upload(w), *gg = d.upload(g);
  settle();
  gpu::rmsnorm_forward(go, gr, gx, gw, N, C, 1e-5f, nullptr);
  gpu::rmsnorm_backward(gdx, gdw, gg, gx, gw, gr, N, C, nullptr);
  settle();
  EXPECT_TRUE(matches_cpu(d.download(go, x.size()), out));
  EXPECT_TRUE(matches_cpu(d.download(gr, N), rstd));
  EXPECT_TRUE(matches_cpu(d.download(gdx, x.size()), dx));
  EXPECT_TRUE(matches_cpu(d.download(gdw, C), dw));
}

TEST_F(CudaLlama, RopeOnQueriesAndKeysAtAnOffset) {
  const int B = 2, T = 19, NH = 6, KVH = 2, hs = 12, pos0 = 40;
  const std::size_t ld = std::size_t(NH + 2 * KVH) * hs;
  const auto table = cpu::make_rope_table(64, hs, 500000.0);
  const gpu::RopeTableView view{d.upload(table.cos), d.upload(table.sin), table.positions,
                                table.half};
  const auto x = random_vector(B * T * ld, 6);
  auto fwd = x, bwd = x;
  cpu::rope_forward(fwd.data(), table, B, T, NH + KVH, hs, ld, pos0);
  cpu::rope_backward(bwd.data(), table, B, T, NH + KVH, hs, ld, pos0);
  float *gf = d.upload(x), *gb = d.upload(x);
  settle();
  gpu::rope_forward(gf, view, B, T, NH + KVH, hs, ld, pos0, nullptr);
  gpu::rope_backward(gb, view, B, T, NH + KVH, hs, ld, pos0, nullptr);
  settle();
  EXPECT_TRUE(matches_cpu(d.download(gf, x.size()), fwd));
  EXPECT_TRUE(matches_cpu(d.download(gb, x.size()), bwd));
  EXPECT_THROW(gpu::rope_forward(gf, view, B, T, NH + KVH, hs, ld, 50, nullptr),
               std::out_of_range);
}

TEST_F(CudaLlama, SwiGlu) {
  const int N = 77, F = 131;
  const auto inp = random_vector(std::size_t(N) * 2 * F, 7, -6, 6);
  const auto g = random_vector(std::size_t(N) * F, 8), dinp0 = random_vector(inp.size(), 9);
  auto out = nan_vector(std::size_t(N) * F), dinp = dinp0;
  cpu::swiglu_forward(out.data(), inp.data(), N, F);
  cpu::swiglu_backward(dinp.data(), g.data(), inp.data(), N, F);
  float *go = d.poisoned(out.size()), *gd = d.upload(dinp0);
  const float *gi = d.upload(inp), *gg = d.upload(g);
  settle();
  gpu::swiglu_forward(go, gi, N, F, nullptr);
  gpu::swiglu_backward(gd, gg, gi, N, F, nullptr);
  settle();
  EXPECT_TRUE(matches_cpu(d.download(go, out.size()), out));
  EXPECT_TRUE(matches_cpu(d.download(gd, dinp.size()), dinp));
}

TEST_F(CudaLlama, GroupedQueryAttention) {
  struct Shape { int B, T, NH, KVH, hs; };
  for (Shape s : {Shape{2, 70, 8, 2, 32}, Shape{1, 150, 4, 1, 64}, Shape{2, 33, 3, 3, 40}}) {
    const std::size_t W = std::size_t(s.NH + 2 * s.KVH) * s.hs;
    const std::size_t n_qkv = s.B * s.T * W, n_out = std::size_t(s.B) * s.T * s.NH * s.hs;
    const std::size_t n_lse = std::size_t(s.B) * s.NH * s.T;
    const auto qkv = random_vector(n_qkv, 10), dout = random_vector(n_out, 11),
               dqkv0 = random_vector(n_qkv, 12);
    auto out = nan_vector(n_out), lse = nan_vector(n_lse), dqkv = dqkv0;
    cpu::gqa_attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, s.NH, s.KVH, s.hs);
    cpu::gqa_attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), s.B,
                                s.T, s.NH, s.KVH, s.hs);
    float *go = d.poisoned(n_out), *gl = d.poisoned(n_lse), *gd = d.upload(dqkv0);
    float* dots = d.poisoned(n_lse);
    const float *gq = d.upload(qkv), *gg = d.upload(dout);
    settle();
    gpu::gqa_attention_forward(go, gl, gq, s.B, s.T, s.NH, s.KVH, s.hs, nullptr);
    gpu::gqa_attention_backward(gd, gg, gq, go, gl, dots, s.B, s.T, s.NH, s.KVH, s.hs, nullptr);
    settle();
    EXPECT_TRUE(matches_cpu(d.download(go, n_out), out, 2e-5)) << "T " << s.T;
    EXPECT_TRUE(matches_cpu(d.download(gl, n_lse), lse, 2e-5)) << "T " << s.T;
    EXPECT_TRUE(matches_cpu(d.download(gd, n_qkv), dqkv, 1e-4)) << "T " << s.T;
  }
}

}  // namespace
