// The CUDA backend's fused "rounded" ops (an op whose output a bf16 GEMM reads
// next, rounded and packed where the op writes it) against the passes they
// replace (Bf16Operands' defaults, run on the same GPU): the same bits, in
// the values, the bf16 bits and every side output.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/half.hpp"
#include "gpu/gpu_test_support.hpp"

using namespace trident;
using namespace trident::testing;

namespace {

class CudaRounded : public ::testing::Test {
 protected:
  std::unique_ptr<CudaBackend> gpu = make_test_gpu();
  DeviceArrays d{*gpu};

  // Device bf16 bits, widened to f32 and downloaded.
  std::vector<float> widened(const std::uint16_t* bits, std::size_t n) {
    float* wide = d.poisoned(n);
    gpu->convert(wide, DType::f32, bits, DType::bf16, n);
    return d.download(wide, n);
  }
  std::uint16_t* bits_buffer(std::size_t n) {
    return d.upload(std::vector<std::uint16_t>(n, 0x7fc1));  // a NaN where never written
  }
};

using Outputs = std::vector<std::vector<float>>;

void expect_same_bits(const Outputs& fused, const Outputs& passes, const std::string& what) {
  ASSERT_EQ(fused.size(), passes.size()) << what;
  for (std::size_t k = 0; k < fused.size(); ++k)
    EXPECT_EQ(float_bits(fused[k]), float_bits(passes[k])) << what << ": output " << k;
}

// x rounded to bf16 values in place; their bits.
std::vector<std::uint16_t> bf16_bits_of(std::vector<float>& x) {
  std::vector<std::uint16_t> b(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = bf16_to_f32(b[i] = f32_to_bf16(x[i]));
  return b;
}

}  // namespace

TEST_F(CudaRounded, LayerNormEqualsItsPasses) {
  for (int C : {40, 768}) {
    const int N = 301;
    const std::size_t n = std::size_t(N) * C;
    const auto x = random_vector(n, 41, -3, 3), w = random_vector(C, 42), b = random_vector(C, 43);
    for (bool with_bits : {true, false}) {
      auto run = [&](bool fused) {
        float *out = d.poisoned(n), *mean = d.poisoned(N), *rstd = d.poisoned(N);
        std::uint16_t* bits = with_bits ? bits_buffer(n) : nullptr;
        const float *gx = d.upload(x), *gw = d.upload(w), *gb = d.upload(b);
        Bf16Operands& be = *gpu;
        if (fused) be.layernorm_forward_rounded(out, bits, mean, rstd, gx, gw, gb, N, C);
        else be.Bf16Operands::layernorm_forward_rounded(out, bits, mean, rstd, gx, gw, gb, N, C);
        Outputs o = {d.download(out, n), d.download(mean, N), d.download(rstd, N)};
        if (bits) o.push_back(widened(bits, n));
        return o;
      };
      expect_same_bits(run(true), run(false), "layer norm, C " + std::to_string(C));
    }
  }
}

// Head sizes 32, 64 and 128: the flash kernels.
TEST_F(CudaRounded, AttentionEqualsItsPasses) {
  struct Shape { int B, T, C, NH; };
  for (Shape s : {Shape{2, 19, 64, 2}, Shape{1, 130, 256, 2}, Shape{2, 200, 192, 3},
                  Shape{1, 1024, 768, 12}}) {
    const std::size_t n_qkv = std::size_t(s.B) * s.T * 3 * s.C;
    const std::size_t n_out = std::size_t(s.B) * s.T * s.C, n_lse = std::size_t(s.B) * s.NH * s.T;
    auto qkv = random_vector(n_qkv, 44, -2, 2), dout = random_vector(n_out, 45);
    const auto qb = bf16_bits_of(qkv), db = bf16_bits_of(dout);
    const std::string shape = "B " + std::to_string(s.B) + ", T " + std::to_string(s.T) +
                              ", C " + std::to_string(s.C) + ", NH " + std::to_string(s.NH);
    auto run = [&](bool fused) {
      const std::uint16_t *gq = d.upload(qb), *gdb = d.upload(db);
      const float* gdo = d.upload(dout);
      float *out = d.poisoned(n_out), *lse = d.poisoned(n_lse), *dqkv = d.poisoned(n_qkv);
      std::uint16_t *out_bits = bits_buffer(n_out), *dqkv_bits = bits_buffer(n_qkv);
      const MatrixIn q(nullptr, gq), g(gdo, gdb);
      if (fused) {
        gpu->attention_forward_rounded(out, out_bits, lse, q, s.B, s.T, s.C, s.NH);
        gpu->attention_backward_rounded(dqkv, dqkv_bits, g, q, out, lse, s.B, s.T, s.C, s.NH);
      } else {
        gpu->Bf16Operands::attention_forward_rounded(out, out_bits, lse, q, s.B, s.T, s.C, s.NH);
        gpu->Bf16Operands::attention_backward_rounded(dqkv, dqkv_bits, g, q, out, lse, s.B,
                                                        s.T, s.C, s.NH);
      }
      return Outputs{d.download(out, n_out), d.download(lse, n_lse), widened(out_bits, n_out),
                     d.download(dqkv, n_qkv), widened(dqkv_bits, n_qkv)};
    };
    expect_same_bits(run(true), run(false), "attention, " + shape);
  }
}

TEST_F(CudaRounded, CrossEntropyGradientEqualsItsPasses) {
  const int N = 37, V = 1280, valid = 1250, lo = 640;
  const float dloss = 1.0f / 37;
  std::mt19937_64 rng(46);
  std::vector<std::int32_t> tgt(N);
  for (auto& t : tgt) t = std::int32_t(rng() % 2000);
  const auto z = random_vector(std::size_t(N) * V, 47, -6, 6);
  auto run = [&](bool fused) {
    float *gz = d.upload(z), *mx = d.poisoned(N), *packed = d.poisoned(2 * N);
    float* loss = d.poisoned(N);
    const std::int32_t* gt = d.upload(tgt);
    gpu->xent_max(mx, gz, N, V, valid);
    gpu->xent_sums(packed, gz, mx, gt, lo, N, V, valid);
    if (fused) gpu->xent_finish_rounded(loss, gz, gz, mx, packed, gt, lo, N, V, valid, dloss);
    else gpu->Bf16Operands::xent_finish_rounded(loss, gz, gz, mx, packed, gt, lo, N, V, valid,
                                                  dloss);
    return Outputs{d.download(loss, N), d.download(gz, z.size())};
  };
  const Outputs fused = run(true);
  expect_same_bits(fused, run(false), "cross-entropy");
  // The gradient is bf16 values (not merely close to the f32 one).
  for (float v : fused[1]) {
    std::uint32_t u;
    std::memcpy(&u, &v, 4);
    ASSERT_EQ(u & 0xffffu, 0u) << v;
  }
}
