// Each backward op of the CUDA backend against the CPU backend. Backward ops
// add into their outputs, so both start from the same random values; scratch
// outputs start as NaN. Reductions must also be bit-for-bit repeatable.
#include <gtest/gtest.h>

#include <random>

#include "core/half.hpp"
#include "compute/cpu/cpu_bf16_operands.hpp"
#include "gpu/gpu_test_support.hpp"

using namespace trident;
using namespace trident::testing;

namespace {

class CudaBackward : public ::testing::Test {
 protected:
  std::unique_ptr<ComputeBackend> cpu = make_cpu_backend(1);
  cpu::CpuBf16Operands cpu16{*cpu};  // its bf16 path (bits widened where it has no bf16 kernels)
  std::unique_ptr<CudaBackend> gpu = make_test_gpu();
  DeviceArrays d{*gpu};
};

// Skewed: a few tokens repeat very often, as in text.
std::vector<std::int32_t> skewed_tokens(std::size_t n, int below, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> t(n);
  for (auto& x : t) x = std::int32_t(rng() % 4 == 0 ? 40 + rng() % 3 : rng() % below);
  return t;
}

}  // namespace

TEST_F(CudaBackward, EmbeddingAccumulatesRepeatedTokensInOrder) {
  // Several 1024-token scan tiles and row blocks; rows summed in shared
  // memory (C 50) and, too wide for it, in place (C 25000).
  for (int C : {50, 25000}) {
    const int N = 2500, lo = 32, count = 96;
    const auto tok = skewed_tokens(N, 160, 1);
    const auto dout = random_vector(std::size_t(N) * C, 2);
    const auto init = random_vector(std::size_t(count) * C, 3);
    auto dwte = init;
    cpu->embedding_backward(dwte.data(), dout.data(), tok.data(), lo, count, N, C);
    const float* gd = d.upload(dout);
    const std::int32_t* gt = d.upload(tok);
    float *g1 = d.upload(init), *g2 = d.upload(init);
    gpu->embedding_backward(g1, gd, gt, lo, count, N, C);
    gpu->embedding_backward(g2, gd, gt, lo, count, N, C);
    const auto r1 = d.download(g1, dwte.size());
    EXPECT_EQ(r1, dwte) << "C " << C << ": token order, as the CPU";
    EXPECT_EQ(r1, d.download(g2, dwte.size())) << "not deterministic";
  }
}

TEST_F(CudaBackward, Positions) {
  const int N = 70, T = 16, first = 5, C = 33;
  const auto dout = random_vector(std::size_t(N) * C, 4);
  auto dwpe = random_vector(std::size_t(T) * C, 5);
  float* g = d.upload(dwpe);
  cpu->position_backward(dwpe.data(), dout.data(), N, T, first, C);
  gpu->position_backward(g, d.upload(dout), N, T, first, C);
  EXPECT_TRUE(matches_cpu(d.download(g, dwpe.size()), dwpe));
}

TEST_F(CudaBackward, LayerNorm) {
  const int N = 600, C = 96;  // more rows than one partial chunk
  const auto x = random_vector(std::size_t(N) * C, 6, -3, 5);
  const auto w = random_vector(C, 7), b = random_vector(C, 8);
  const auto dout = random_vector(x.size(), 9);
  auto out = nan_vector(x.size()), mean = nan_vector(N), rstd = nan_vector(N);
  cpu->layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  auto dx = random_vector(x.size(), 10), dw = random_vector(C, 11), db = random_vector(C, 12);
  const float *gx = d.upload(x), *gw = d.upload(w), *gdo = d.upload(dout);
  const float *gm = d.upload(mean), *gr = d.upload(rstd);
  float *gdx = d.upload(dx), *gdw = d.upload(dw), *gdb = d.upload(db);
  float *gdw2 = d.upload(dw), *gdb2 = d.upload(db), *gdx2 = d.upload(dx);
  cpu->layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                          mean.data(), rstd.data(), N, C);
  gpu->layernorm_backward(gdx, gdw, gdb, gdo, gx, gw, gm, gr, N, C);
  gpu->layernorm_backward(gdx2, gdw2, gdb2, gdo, gx, gw, gm, gr, N, C);
  EXPECT_TRUE(matches_cpu(d.download(gdx, dx.size()), dx)) << "dinp";
  EXPECT_TRUE(matches_cpu(d.download(gdw, C), dw)) << "dw";
  EXPECT_TRUE(matches_cpu(d.download(gdb, C), db)) << "db";
  EXPECT_EQ(d.download(gdw, C), d.download(gdw2, C)) << "dw not deterministic";
  EXPECT_EQ(d.download(gdb, C), d.download(gdb2, C)) << "db not deterministic";
}

TEST_F(CudaBackward, Matmul) {
  const int N = 600, IC = 48, OC = 80;
  const auto x = random_vector(std::size_t(N) * IC, 13), w = random_vector(std::size_t(OC) * IC, 14);
  const auto dout = random_vector(std::size_t(N) * OC, 15);
  for (bool with_dinp : {true, false}) {
    for (bool with_dbias : {true, false}) {
      auto dx = random_vector(x.size(), 16), dw = random_vector(w.size(), 17);
      auto db = random_vector(OC, 18);
      float *gdx = d.upload(dx), *gdw = d.upload(dw), *gdb = d.upload(db);
      // dinp over random contents: added to them where with_dbias, written over else.
      const InputGrad mode = with_dbias ? InputGrad::add : InputGrad::write;
      cpu16.matmul_backward(with_dinp ? dx.data() : nullptr, dw.data(),
                           with_dbias ? db.data() : nullptr, dout.data(), x.data(), w.data(), N,
                           IC, OC, mode);
      gpu->matmul_backward(with_dinp ? gdx : nullptr, gdw, with_dbias ? gdb : nullptr,
                           d.upload(dout), d.upload(x), d.upload(w), N, IC, OC, mode);
      const std::string what = std::string(with_dinp ? "with" : "without") + " dinp, " +
                               (with_dbias ? "with" : "without") + " dbias";
      EXPECT_TRUE(matches_cpu(d.download(gdx, dx.size()), dx)) << "dinp " << what;
      EXPECT_TRUE(matches_cpu(d.download(gdw, dw.size()), dw)) << "dw " << what;
      EXPECT_TRUE(matches_cpu(d.download(gdb, OC), db)) << "dbias " << what;
    }
  }
}

// bf16 runs hand the linears bf16 bits (weights, saved inputs, rounded
// gradients), some with their values too, or values marked as bf16 values:
// products of two such operands run on bf16 tensor cores, the others in f32
// on (widened) values. Either way the
// products of bf16 values are exact, so the GPU matches the CPU to f32 sums.
TEST_F(CudaBackward, MatmulOnBf16Operands) {
  const int N = 300, IC = 64, OC = 96;
  auto bf16_values = [](std::size_t n, std::uint64_t seed, std::vector<std::uint16_t>& bits) {
    auto v = random_vector(n, seed);
    bits.resize(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = bf16_to_f32(bits[i] = f32_to_bf16(v[i]));
    return v;
  };
  std::vector<std::uint16_t> xb, wb, db;
  const auto x = bf16_values(std::size_t(N) * IC, 21, xb);
  const auto w = bf16_values(std::size_t(OC) * IC, 22, wb);
  const auto dout = bf16_values(std::size_t(N) * OC, 23, db);
  const auto b = random_vector(OC, 24);
  const std::uint16_t *gx = d.upload(xb), *gw = d.upload(wb), *gd = d.upload(db);
  // The weight as bits, as values marked bf16 (packed for the bf16 kernels),
  // as plain values (the f32 products).
  for (int mode : {0, 1, 2}) {
    const MatrixIn cw = mode == 0 ? MatrixIn(nullptr, wb.data()) : MatrixIn(w.data());
    const MatrixIn gwm = mode == 0   ? MatrixIn(nullptr, gw)
                         : mode == 1 ? MatrixIn(d.upload(w)).as_bf16_values()
                                     : MatrixIn(d.upload(w));
    const std::string what = mode == 0 ? "weight as bits" : mode == 1 ? "weight as bf16 values"
                                                                      : "weight as values";
    auto out = nan_vector(std::size_t(N) * OC);
    cpu16.matmul_forward(out.data(), MatrixIn(nullptr, xb.data()), cw, b.data(), N, IC, OC);
    float* go = d.poisoned(out.size());
    gpu->matmul_forward(go, MatrixIn(nullptr, gx), gwm, d.upload(b), N, IC, OC);
    EXPECT_TRUE(matches_cpu(d.download(go, out.size()), out)) << "forward, " << what;
    cpu16.matmul_forward(out.data(), MatrixIn(nullptr, xb.data()), cw, nullptr, N, IC, OC);
    gpu->matmul_forward(go, MatrixIn(nullptr, gx), gwm, nullptr, N, IC, OC);
    EXPECT_TRUE(matches_cpu(d.download(go, out.size()), out)) << "forward without bias, " << what;

    auto dx = random_vector(x.size(), 25), dw = random_vector(w.size(), 26);
    auto dbias = random_vector(OC, 27);
    float *gdx = d.upload(dx), *gdw = d.upload(dw), *gdb = d.upload(dbias);
    cpu16.matmul_backward(dx.data(), dw.data(), dbias.data(), MatrixIn(dout.data(), db.data()),
                         MatrixIn(nullptr, xb.data()), cw, N, IC, OC, InputGrad::add);
    gpu->matmul_backward(gdx, gdw, gdb, MatrixIn(d.upload(dout), gd), MatrixIn(nullptr, gx), gwm,
                         N, IC, OC, InputGrad::add);
    EXPECT_TRUE(matches_cpu(d.download(gdx, dx.size()), dx)) << "dinp, " << what;
    EXPECT_TRUE(matches_cpu(d.download(gdw, dw.size()), dw)) << "dw, " << what;
    EXPECT_TRUE(matches_cpu(d.download(gdb, OC), dbias)) << "dbias, " << what;
  }
  // Attention reads q, k, v given as bits only (a saved 16-bit copy).
  const int B = 2, T = 33, C = 32, NH = 4;
  std::vector<std::uint16_t> qb;
  const auto qkv = bf16_values(std::size_t(B) * T * 3 * C, 28, qb);
  auto out = nan_vector(std::size_t(B) * T * C), lse = nan_vector(std::size_t(B) * NH * T);
  cpu16.attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, false);
  float *go = d.poisoned(out.size()), *gl = d.poisoned(lse.size());
  gpu->attention_forward(go, gl, MatrixIn(nullptr, d.upload(qb)), B, T, C, NH, false);
  EXPECT_TRUE(matches_cpu(d.download(go, out.size()), out)) << "attention from bits";
}

TEST_F(CudaBackward, CausalAttention) {
  struct Shape { int B, T, C, NH; };
  for (Shape s : {Shape{2, 19, 24, 3}, Shape{1, 64, 128, 2}, Shape{1, 130, 32, 2},
                  Shape{3, 1, 8, 1}}) {
    const auto qkv = random_vector(std::size_t(s.B) * s.T * 3 * s.C, 19, -2, 2);
    const std::size_t n_lse = std::size_t(s.B) * s.NH * s.T;
    auto out = nan_vector(std::size_t(s.B) * s.T * s.C), lse = nan_vector(n_lse);
    cpu16.attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, s.C, s.NH, false);
    const auto dout = random_vector(out.size(), 20);
    auto dqkv = random_vector(qkv.size(), 21);  // backward adds into it
    float* gdqkv = d.upload(dqkv);
    cpu16.attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), s.B,
                            s.T, s.C, s.NH, false);
    gpu->attention_backward(gdqkv, d.upload(dout), d.upload(qkv), d.upload(out), d.upload(lse),
                            s.B, s.T, s.C, s.NH, false);
    EXPECT_TRUE(matches_cpu(d.download(gdqkv, dqkv.size()), dqkv)) << "dqkv, T " << s.T;
  }
}

// bf16 attention: q, k, v and dout bf16 values (bits only, and values only,
// as a bf16 run hands them), probabilities and score gradients rounded to
// bf16 for the products. Head size 8 takes the GEMM path (which rounds the
// normalised probabilities), 32, 64 and 128 the flash kernels (which round
// the unnormalised ones, as the CPU does), at T below, at and across their
// 64-row tiles and at GPT-2's shape: all agree with the CPU to bf16's
// rounding, 1e-2 here; a wrong stride, mask or missed product is off by O(1).
// The flash backward adds one fixed-order sum into each element of dqkv.
TEST_F(CudaBackward, CausalAttentionInBf16) {
  struct Shape { int B, T, C, NH; };
  for (Shape s : {Shape{2, 19, 24, 3}, Shape{1, 300, 128, 2}, Shape{2, 200, 192, 6},
                  Shape{3, 64, 128, 2}, Shape{1, 130, 256, 2}, Shape{2, 1, 64, 1},
                  Shape{1, 1024, 768, 12}}) {
    const std::size_t n_qkv = std::size_t(s.B) * s.T * 3 * s.C, n_out = std::size_t(s.B) * s.T * s.C;
    auto qkv = random_vector(n_qkv, 29, -2, 2), dout = random_vector(n_out, 30);
    std::vector<std::uint16_t> qb(n_qkv);
    for (std::size_t i = 0; i < n_qkv; ++i) qkv[i] = bf16_to_f32(qb[i] = f32_to_bf16(qkv[i]));
    for (float& x : dout) x = bf16_to_f32(f32_to_bf16(x));
    const std::size_t n_lse = std::size_t(s.B) * s.NH * s.T;
    auto out = nan_vector(n_out), lse = nan_vector(n_lse);
    cpu16.attention_forward(out.data(), lse.data(), MatrixIn(qkv.data(), qb.data()), s.B, s.T, s.C,
                           s.NH, true);
    float *go = d.poisoned(n_out), *gl = d.poisoned(n_lse);
    const std::uint16_t* gq = d.upload(qb);
    gpu->attention_forward(go, gl, MatrixIn(nullptr, gq), s.B, s.T, s.C, s.NH, true);
    EXPECT_TRUE(matches_cpu(d.download(go, n_out), out, 1e-2)) << "out, T " << s.T;
    EXPECT_TRUE(matches_cpu(d.download(gl, n_lse), lse, 1e-5)) << "log-sum-exp, T " << s.T;
    auto dqkv = random_vector(n_qkv, 31);
    float* gdqkv = d.upload(dqkv);
    cpu16.attention_backward(dqkv.data(), dout.data(), MatrixIn(qkv.data(), qb.data()), out.data(),
                            lse.data(), s.B, s.T, s.C, s.NH, true);
    const float *gdo = d.upload(dout), *gout = d.upload(out);
    gpu->attention_backward(gdqkv, gdo, MatrixIn(nullptr, gq), gout, gl, s.B, s.T, s.C, s.NH,
                            true);
    const auto first = d.download(gdqkv, n_qkv);
    EXPECT_TRUE(matches_cpu(first, dqkv, 1e-2)) << "dqkv, T " << s.T << ", C " << s.C;
    if (s.C / s.NH < 32) continue;  // cuBLAS may add a GEMM's beta term in any order
    float* again = d.upload(std::vector<float>(n_qkv, 0.0f));
    gpu->attention_backward(again, gdo, MatrixIn(nullptr, gq), gout, gl, s.B, s.T, s.C, s.NH,
                            true);
    gpu->attention_backward(gdqkv, gdo, MatrixIn(nullptr, gq), gout, gl, s.B, s.T, s.C, s.NH,
                            true);
    const auto second = d.download(gdqkv, n_qkv), alone = d.download(again, n_qkv);
    for (std::size_t i = 0; i < n_qkv; ++i)
      ASSERT_EQ(second[i], first[i] + alone[i]) << "dqkv " << i << " of T " << s.T;
  }
}

TEST_F(CudaBackward, Gelu) {
  const std::size_t n = 10001;
  const auto x = random_vector(n, 22, -5, 5), dout = random_vector(n, 23);
  auto dx = random_vector(n, 24);
  float* g = d.upload(dx);
  cpu->gelu_backward(dx.data(), x.data(), dout.data(), n);
  gpu->gelu_backward(g, d.upload(x), d.upload(dout), n);
  EXPECT_TRUE(matches_cpu(d.download(g, n), dx));
}

// The CUDA backend's one-pass GELU of a 16-bit run leaves the bits of the
// passes it replaces (Bf16Operands'), rounded values and bf16 bits alike.
TEST_F(CudaBackward, RoundedGeluInOnePassEqualsItsPasses) {
  const std::size_t n = 10001;
  const auto x = random_vector(n, 32, -5, 5);
  auto dy = random_vector(n, 33, -2, 2);
  for (std::size_t i = 0; i < 64; ++i) dy[i] = i % 2 ? -0.0f : 0.0f;  // zeros' signs too
  for (DType store : {DType::bf16, DType::f16}) {
    for (bool with_bits : {false, true}) {
      if (with_bits && store != DType::bf16) continue;
      auto outputs = [&](bool fused) {
        float *gx = d.upload(x), *gy = d.poisoned(n), *gdy = d.upload(dy), *gdx = d.poisoned(n);
        std::uint16_t* bits[3] = {};
        if (with_bits)
          for (auto& b : bits) b = d.upload(std::vector<std::uint16_t>(n));
        if (fused) {
          gpu->gelu_forward_rounded(gy, bits[0], gx, bits[1], n, store);
          gpu->gelu_backward_rounded(gdx, bits[2], gx, nullptr, gdy, n, store);
        } else {
          gpu->Bf16Operands::gelu_forward_rounded(gy, bits[0], gx, bits[1], n, store);
          gpu->Bf16Operands::gelu_backward_rounded(gdx, bits[2], gx, nullptr, gdy, n, store);
        }
        std::vector<std::vector<float>> out = {d.download(gx, n), d.download(gy, n),
                                               d.download(gdx, n)};
        for (auto* b : bits) {
          if (!b) continue;
          float* wide = d.poisoned(n);
          gpu->convert(wide, DType::f32, b, DType::bf16, n);
          out.push_back(d.download(wide, n));
        }
        return out;
      };
      const auto fused = outputs(true), passes = outputs(false);
      ASSERT_EQ(fused.size(), passes.size());
      for (std::size_t k = 0; k < fused.size(); ++k)
        EXPECT_EQ(float_bits(fused[k]), float_bits(passes[k]))
            << "output " << k << ", " << dtype_name(store) << (with_bits ? " with bits" : "");
    }
  }
}

TEST_F(CudaBackward, BiasGradientIsDeterministic) {
  const int N = 3000, IC = 16, OC = 300;
  const auto x = random_vector(std::size_t(N) * IC, 25), w = random_vector(std::size_t(OC) * IC, 26);
  const auto dout = random_vector(std::size_t(N) * OC, 27);
  const float *gx = d.upload(x), *gw = d.upload(w), *gdo = d.upload(dout);
  std::vector<std::vector<float>> runs;
  for (int r = 0; r < 3; ++r) {
    float *gdw = d.zeros(w.size()), *gdb = d.zeros(OC);
    gpu->matmul_backward(nullptr, gdw, gdb, gdo, gx, gw, N, IC, OC, InputGrad::add);
    runs.push_back(d.download(gdb, OC));
  }
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_EQ(runs[0], runs[2]);
}
