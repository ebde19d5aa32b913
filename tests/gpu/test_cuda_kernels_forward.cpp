// Each forward and optimizer-side op of the CUDA backend against the CPU
// backend on fresh random inputs. Outputs start as NaN, so an element a kernel
// fails to write fails the test. fp32 limit: 1e-5 relative, norm-wise.
#include <gtest/gtest.h>

#include <random>

#include "core/half.hpp"
#include "compute/cpu/cpu_bf16_operands.hpp"
#include "gpu/gpu_test_support.hpp"

using namespace trident;
using namespace trident::testing;

namespace {

class CudaForward : public ::testing::Test {
 protected:
  std::unique_ptr<ComputeBackend> cpu = make_cpu_backend(1);
  cpu::CpuBf16Operands cpu16{*cpu};  // its bf16 path (bits widened where it has no bf16 kernels)
  std::unique_ptr<CudaBackend> gpu = make_test_gpu();
  DeviceArrays d{*gpu};
};

std::vector<std::int32_t> random_tokens(std::size_t n, int below, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> t(n);
  for (auto& x : t) x = std::int32_t(rng() % std::uint64_t(below));
  return t;
}

}  // namespace

TEST_F(CudaForward, EmbeddingOfAVocabularyShard) {
  const int N = 300, C = 40, lo = 64, count = 64;  // tokens outside [64, 128) give zeros
  const auto tok = random_tokens(N, 200, 1);
  const auto wte = random_vector(std::size_t(count) * C, 2);
  auto out = nan_vector(std::size_t(N) * C);
  cpu->embedding_forward(out.data(), tok.data(), wte.data(), lo, count, N, C);
  float* g = d.poisoned(out.size());
  gpu->embedding_forward(g, d.upload(tok), d.upload(wte), lo, count, N, C);
  EXPECT_EQ(d.download(g, out.size()), out);  // a copy: exact
  // The same from the table's bf16 bits: the widened bits, exactly.
  std::vector<std::uint16_t> bits(wte.size());
  auto widened = wte;
  for (std::size_t i = 0; i < wte.size(); ++i)
    widened[i] = bf16_to_f32(bits[i] = f32_to_bf16(wte[i]));
  cpu->embedding_forward(out.data(), tok.data(), widened.data(), lo, count, N, C);
  float* gb = d.poisoned(out.size());
  gpu->embedding_forward_bits(gb, d.upload(tok), d.upload(bits), lo, count, N, C);
  EXPECT_EQ(d.download(gb, out.size()), out);
}

TEST_F(CudaForward, PositionsWithAnOffset) {
  const int N = 70, T = 16, first = 5, C = 33;  // N not a multiple of T, first != 0 (SP)
  const auto wpe = random_vector(std::size_t(T) * C, 3);
  auto out = random_vector(std::size_t(N) * C, 4);
  float* g = d.upload(out);
  cpu->position_forward(out.data(), wpe.data(), N, T, first, C);
  gpu->position_forward(g, d.upload(wpe), N, T, first, C);
  EXPECT_TRUE(matches_cpu(d.download(g, out.size()), out));
}

TEST_F(CudaForward, LayerNorm) {
  const int N = 600, C = 96;
  const auto x = random_vector(std::size_t(N) * C, 5, -3, 5);
  const auto w = random_vector(C, 6), b = random_vector(C, 7);
  auto out = nan_vector(x.size()), mean = nan_vector(N), rstd = nan_vector(N);
  cpu->layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  float *go = d.poisoned(x.size()), *gm = d.poisoned(N), *gr = d.poisoned(N);
  gpu->layernorm_forward(go, gm, gr, d.upload(x), d.upload(w), d.upload(b), N, C);
  EXPECT_TRUE(matches_cpu(d.download(go, x.size()), out));
  EXPECT_TRUE(matches_cpu(d.download(gm, N), mean));
  EXPECT_TRUE(matches_cpu(d.download(gr, N), rstd));
}

TEST_F(CudaForward, MatmulWithAndWithoutBias) {
  struct Shape { int N, IC, OC; };
  for (Shape s : {Shape{37, 24, 70}, Shape{512, 256, 768}, Shape{1, 3, 5}}) {
    for (bool with_bias : {true, false}) {
      const auto x = random_vector(std::size_t(s.N) * s.IC, 8);
      const auto w = random_vector(std::size_t(s.OC) * s.IC, 9);
      const auto b = random_vector(s.OC, 10);
      auto out = nan_vector(std::size_t(s.N) * s.OC);
      cpu16.matmul_forward(out.data(), x.data(), w.data(), with_bias ? b.data() : nullptr, s.N,
                          s.IC, s.OC);
      float* g = d.poisoned(out.size());
      gpu->matmul_forward(g, d.upload(x), d.upload(w), with_bias ? d.upload(b) : nullptr, s.N,
                          s.IC, s.OC);
      EXPECT_TRUE(matches_cpu(d.download(g, out.size()), out))
          << s.N << "x" << s.IC << "->" << s.OC << (with_bias ? " with bias" : "");
    }
  }
}

TEST_F(CudaForward, CausalAttention) {
  struct Shape { int B, T, C, NH; };
  for (Shape s : {Shape{2, 19, 24, 3}, Shape{1, 64, 128, 2}, Shape{3, 1, 8, 1}}) {
    const auto qkv = random_vector(std::size_t(s.B) * s.T * 3 * s.C, 11, -2, 2);
    const std::size_t n_lse = std::size_t(s.B) * s.NH * s.T;
    auto out = nan_vector(std::size_t(s.B) * s.T * s.C), lse = nan_vector(n_lse);
    cpu16.attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, s.C, s.NH, false);
    float *go = d.poisoned(out.size()), *gl = d.poisoned(n_lse);
    gpu->attention_forward(go, gl, d.upload(qkv), s.B, s.T, s.C, s.NH, false);
    EXPECT_TRUE(matches_cpu(d.download(go, out.size()), out)) << "out, T " << s.T;
    EXPECT_TRUE(matches_cpu(d.download(gl, n_lse), lse)) << "log-sum-exp, T " << s.T;
  }
}

TEST_F(CudaForward, GeluAddScale) {
  const std::size_t n = 10001;
  const auto x = random_vector(n, 12, -5, 5), y = random_vector(n, 13);
  auto out = nan_vector(n);
  cpu->gelu_forward(out.data(), x.data(), n);
  float *gx = d.upload(x), *go = d.poisoned(n);
  gpu->gelu_forward(go, gx, n);
  EXPECT_TRUE(matches_cpu(d.download(go, n), out)) << "gelu";
  auto sum = nan_vector(n);
  cpu->add(sum.data(), x.data(), y.data(), n);
  float* gs = d.poisoned(n);
  gpu->add(gs, gx, d.upload(y), n);
  EXPECT_TRUE(matches_cpu(d.download(gs, n), sum)) << "add";
  cpu->scale(sum.data(), -0.37f, n);
  gpu->scale(gs, -0.37f, n);
  EXPECT_TRUE(matches_cpu(d.download(gs, n), sum)) << "scale";
}

// The three phases on a padded shard (V columns from lo, the first `valid`
// real); targets fall inside and outside the shard. dlogits both separate
// and aliasing the logits.
TEST_F(CudaForward, VocabParallelCrossEntropy) {
  const int N = 50, V = 128, valid = 100, lo = 64;
  const float dloss = 1.0f / 37;
  const auto tgt = random_tokens(N, 300, 14);
  const auto z = random_vector(std::size_t(N) * V, 15, -4, 4);
  auto mx = nan_vector(N), packed = nan_vector(2 * N), loss = nan_vector(N);
  auto dz = nan_vector(z.size()), inplace = z;
  cpu->xent_max(mx.data(), z.data(), N, V, valid);
  cpu->xent_sums(packed.data(), z.data(), mx.data(), tgt.data(), lo, N, V, valid);
  cpu->xent_finish(loss.data(), dz.data(), z.data(), mx.data(), packed.data(), tgt.data(), lo, N,
                   V, valid, dloss);
  cpu->xent_finish(loss.data(), inplace.data(), inplace.data(), mx.data(), packed.data(),
                   tgt.data(), lo, N, V, valid, dloss);
  float *gz = d.upload(z), *gmx = d.poisoned(N), *gp = d.poisoned(2 * N), *gl = d.poisoned(N);
  float* gdz = d.poisoned(z.size());
  const std::int32_t* gt = d.upload(tgt);
  gpu->xent_max(gmx, gz, N, V, valid);
  gpu->xent_sums(gp, gz, gmx, gt, lo, N, V, valid);
  gpu->xent_finish(gl, gdz, gz, gmx, gp, gt, lo, N, V, valid, dloss);
  EXPECT_TRUE(matches_cpu(d.download(gmx, N), mx)) << "row max";
  EXPECT_TRUE(matches_cpu(d.download(gp, 2 * N), packed)) << "packed sums";
  EXPECT_TRUE(matches_cpu(d.download(gl, N), loss)) << "losses";
  EXPECT_TRUE(matches_cpu(d.download(gdz, z.size()), dz)) << "dlogits";
  float* gl2 = d.poisoned(N);
  gpu->xent_finish(gl2, gz, gz, gmx, gp, gt, lo, N, V, valid, dloss);  // in place
  EXPECT_TRUE(matches_cpu(d.download(gz, z.size()), inplace)) << "dlogits in place";
  EXPECT_TRUE(matches_cpu(d.download(gl2, N), loss)) << "losses (in place)";
  // Forward only (dlogits null): the logits stay as they were.
  float* gz2 = d.upload(z);
  gpu->xent_finish(gl2, nullptr, gz2, gmx, gp, gt, lo, N, V, valid, dloss);
  EXPECT_EQ(d.download(gz2, z.size()), z);
}

TEST_F(CudaForward, SumSquaresInDoubleAndDeterministic) {
  for (std::size_t n : {std::size_t(1), std::size_t(1000), (std::size_t(1) << 22) + 3}) {
    const auto x = random_vector(n, 16, -3, 3);
    const float* g = d.upload(x);
    const double want = cpu->sum_squares(x.data(), n), got = gpu->sum_squares(g, n);
    EXPECT_NEAR(got, want, 1e-12 * want) << n;
    EXPECT_EQ(gpu->sum_squares(g, n), got) << "not deterministic at " << n;
  }
}

// Many sums with one wait: each the very value sum_squares gives alone.
TEST_F(CudaForward, SumSquaresEachEqualsOneByOne) {
  const std::vector<std::size_t> ns = {1, 1000, (std::size_t(1) << 20) + 7, 33};
  std::vector<const float*> xs;
  std::vector<double> alone;
  for (std::size_t i = 0; i < ns.size(); ++i) {
    xs.push_back(d.upload(random_vector(ns[i], 40 + i, -3, 3)));
    alone.push_back(gpu->sum_squares(xs.back(), ns[i]));
  }
  std::vector<double> each(ns.size(), -1.0);
  gpu->sum_squares_each(xs.data(), ns.data(), ns.size(), each.data());
  EXPECT_EQ(each, alone);
}

TEST_F(CudaForward, AdamWOverSeveralSteps) {
  const std::size_t n = 5003;
  auto p = random_vector(n, 17), m = std::vector<float>(n, 0.0f), v = m;
  float *gp = d.upload(p), *gm = d.upload(m), *gv = d.upload(v);
  for (int t = 1; t <= 5; ++t) {
    const auto g = random_vector(n, 100 + t, -0.1f, 0.1f);
    const float bc1 = 1.0f - std::pow(0.9f, float(t)), bc2 = 1.0f - std::pow(0.95f, float(t));
    const float clip = t == 3 ? 0.5f : 1.0f;  // a clipped step among them
    cpu->adamw(p.data(), g.data(), m.data(), v.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, bc1,
               bc2, clip, nullptr);
    gpu->adamw(gp, d.upload(g), gm, gv, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, bc1, bc2, clip,
               nullptr);
  }
  // Bit for bit (compute/adamw_math.hpp): ZeRO-Offload's host update relies on it.
  EXPECT_EQ(d.download(gp, n), p) << "params";
  EXPECT_EQ(d.download(gm, n), m) << "first moment";
  EXPECT_EQ(d.download(gv, n), v) << "second moment";
  // bf16 weights written by the update: the rounding of the GPU's own masters.
  const auto g = random_vector(n, 200, -0.1f, 0.1f);
  auto* bits = static_cast<std::uint16_t*>(gpu->allocate(n * sizeof(std::uint16_t)));
  gpu->adamw(gp, d.upload(g), gm, gv, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 0.5f, 1.0f, bits);
  const auto masters = d.download(gp, n);
  std::vector<std::uint16_t> got(n), want(n);
  gpu->copy_to_host(got.data(), bits, n * sizeof(std::uint16_t));
  for (std::size_t i = 0; i < n; ++i) want[i] = f32_to_bf16(masters[i]);
  EXPECT_EQ(got, want) << "bf16 weights";
  gpu->release(bits, n * sizeof(std::uint16_t));
}

TEST_F(CudaForward, MemoryOps) {
  const auto x = random_vector(1000, 18);
  float *a = d.upload(x), *b = d.poisoned(1000);
  gpu->copy(b, a, 1000 * sizeof(float));
  EXPECT_EQ(d.download(b, 1000), x);
  gpu->zero(b + 10, 20 * sizeof(float));
  auto want = x;
  std::fill(want.begin() + 10, want.begin() + 30, 0.0f);
  EXPECT_EQ(d.download(b, 1000), want);
  void* fresh = gpu->allocate(4096);  // allocations start zeroed, as on the CPU
  std::vector<float> h(1024, 1.0f);
  gpu->copy_to_host(h.data(), fresh, 4096);
  EXPECT_EQ(h, std::vector<float>(1024, 0.0f));
  gpu->release(fresh, 4096);
}

// A GEMM operand's rounding: the same bf16 values and bits as the CPU's, in
// place and into another buffer.
TEST_F(CudaForward, RoundToBf16WithBits) {
  const std::size_t n = 4099;
  auto x = random_vector(n, 19, -3e3f, 3e3f);
  x[0] = 1.0f + 1.0f / 256;  // a tie: rounds to even
  auto want = nan_vector(n);
  std::vector<std::uint16_t> want_bits(n), got_bits(n);
  cpu16.round_to_bf16(want.data(), want_bits.data(), x.data(), n);
  float *src = d.upload(x), *dst = d.poisoned(n);
  auto* bits = static_cast<std::uint16_t*>(gpu->allocate(n * sizeof(std::uint16_t)));
  gpu->round_to_bf16(dst, bits, src, n);
  gpu->copy_to_host(got_bits.data(), bits, n * sizeof(std::uint16_t));
  EXPECT_EQ(d.download(dst, n), want);
  EXPECT_EQ(got_bits, want_bits);
  gpu->round_to_bf16(src, nullptr, src, n);  // in place, no bits
  EXPECT_EQ(d.download(src, n), want);
  gpu->release(bits, n * sizeof(std::uint16_t));
}

TEST_F(CudaForward, AsyncCopiesFollowTheWorkIssuedBeforeThem) {
  // Large enough that a copy not ordered after the kernel would read old values.
  const std::size_t n = std::size_t{1} << 22;
  const auto x = random_vector(n, 40);
  std::vector<float> doubled(x), host(n, 0.0f), back(n);
  for (float& v : doubled) v *= 2.0f;
  gpu->pin_host(host.data(), n * sizeof(float));
  float* g = d.upload(x);
  gpu->scale(g, 2.0f, n);
  gpu->copy_to_host_async(host.data(), g, n * sizeof(float));
  gpu->wait_copies();
  EXPECT_EQ(host, doubled);
  // Host to device, then a kernel issued after wait_copies reads the values.
  for (float& v : host) v += 1.0f;
  float* h = d.poisoned(n);
  gpu->copy_from_host_async(h, host.data(), n * sizeof(float));
  gpu->wait_copies();
  gpu->scale(h, 0.5f, n);
  gpu->copy_to_host(back.data(), h, n * sizeof(float));
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(back[i], 0.5f * host[i]) << i;
  gpu->unpin_host(host.data(), n * sizeof(float));
}
