// Every CPU kernel's backward against central finite differences of its
// forward, in double precision (the same templated code the backend runs in
// float). Loss L = sum(out * R) for a fixed random R, so dL/dout = R.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "compute/cpu/kernels.hpp"
#include "support/random_values.hpp"

namespace cpu = trident::cpu;
using Vec = std::vector<double>;

namespace {

Vec random_normals(std::size_t n, unsigned seed, double scale = 1.0) {
  return trident::testing::random_normals<double, std::mt19937_64>(n, seed, scale);
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Checks analytic gradient `g` of loss() with respect to every element of x.
void expect_matches_fd(const char* what, Vec& x, const Vec& g, const std::function<double()>& loss) {
  const double h = 1e-5;
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double lp = loss();
    x[i] = keep - h;
    const double lm = loss();
    x[i] = keep;
    const double fd = (lp - lm) / (2 * h);
    worst = std::max(worst, std::abs(fd - g[i]) / std::max(1.0, std::abs(fd)));
  }
  EXPECT_LT(worst, 1e-7) << what;
}

constexpr int B = 2, T = 5, C = 8, NH = 2, V = 11;

}  // namespace

TEST(KernelsFiniteDifference, EmbeddingShardAndPositions) {
  // A vocabulary shard [3, 9) of an 11-token vocabulary, plus positions of
  // 10 tokens starting at position 2 of sequences of T.
  const int lo = 3, count = 6, N = B * T;
  Vec wte = random_normals(count * C, 1);
  Vec wpe = random_normals(T * C, 2);
  Vec R = random_normals(N * C, 3);
  std::vector<std::int32_t> tok = {1, 4, 4, 0, 10, 3, 3, 8, 7, 1};  // repeats, some outside
  Vec out(N * C);
  auto loss = [&] {
    cpu::embedding_forward(out.data(), tok.data(), wte.data(), lo, count, N, C);
    cpu::position_forward(out.data(), wpe.data(), N, T, 2, C);
    return dot(out, R);
  };
  Vec dwte(count * C, 0.0), dwpe(T * C, 0.0);
  cpu::embedding_backward(dwte.data(), R.data(), tok.data(), lo, count, N, C);
  cpu::position_backward(dwpe.data(), R.data(), N, T, 2, C);
  expect_matches_fd("wte shard", wte, dwte, loss);
  expect_matches_fd("wpe", wpe, dwpe, loss);
  loss();
  for (int c = 0; c < C; ++c) EXPECT_EQ(out[c], wpe[2 * C + c]);  // token 1 is outside the shard
}

TEST(KernelsFiniteDifference, LayerNorm) {
  const int N = B * T;
  Vec x = random_normals(N * C, 4);
  Vec w = random_normals(C, 5);
  Vec b = random_normals(C, 6);
  Vec R = random_normals(N * C, 7);
  Vec out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    return dot(out, R);
  };
  loss();
  Vec dx(N * C, 0.0), dw(C, 0.0), db(C, 0.0);
  cpu::layernorm_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(),
                          mean.data(), rstd.data(), N, C);
  expect_matches_fd("inp", x, dx, loss);
  expect_matches_fd("w", w, dw, loss);
  expect_matches_fd("b", b, db, loss);
}

TEST(KernelsFiniteDifference, Matmul) {
  const int N = B * T, IC = 6, OC = 7;
  Vec x = random_normals(N * IC, 8), w = random_normals(OC * IC, 9), b = random_normals(OC, 10);
  Vec R = random_normals(N * OC, 11), out(N * OC);
  auto loss = [&] {
    cpu::matmul_forward(out.data(), x.data(), w.data(), b.data(), N, IC, OC);
    return dot(out, R);
  };
  Vec dx(N * IC, 0.0), dw(OC * IC, 0.0), db(OC, 0.0);
  cpu::matmul_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), N, IC, OC);
  expect_matches_fd("inp", x, dx, loss);
  expect_matches_fd("w", w, dw, loss);
  expect_matches_fd("bias", b, db, loss);
}

// Flash attention: T = 1, T inside one tile, and T past one tile, not a
// multiple of it (narrow heads there, to keep the differences cheap).
TEST(KernelsFiniteDifference, CausalAttention) {
  struct Case {
    int B, T, C, NH;
  };
  for (const Case s : {Case{B, 1, C, NH}, Case{B, T, C, NH}, Case{1, cpu::kAttentionTile + 3, 4, 2}}) {
    const int B = s.B, T_ = s.T, C = s.C, NH = s.NH;
    SCOPED_TRACE(T_);
    Vec qkv = random_normals(B * T_ * 3 * C, 12), R = random_normals(B * T_ * C, 13);
    Vec out(B * T_ * C), lse(B * NH * T_);
    auto loss = [&] {
      cpu::attention_forward(out.data(), lse.data(), qkv.data(), B, T_, C, NH);
      return dot(out, R);
    };
    loss();
    Vec dqkv(qkv.size(), 0.0);
    cpu::attention_backward(dqkv.data(), R.data(), qkv.data(), out.data(), lse.data(), B, T_, C,
                            NH);
    expect_matches_fd("qkv", qkv, dqkv, loss);
    // Causality: output at t=0 must not depend on later positions.
    Vec q2 = qkv;
    q2[(T_ - 1) * 3 * C + 2 * C] += 1.0;  // perturb v of the last position of batch 0
    Vec out2(out.size()), lse2(lse.size());
    cpu::attention_forward(out2.data(), lse2.data(), q2.data(), B, T_, C, NH);
    cpu::attention_forward(out.data(), lse.data(), qkv.data(), B, T_, C, NH);
    if (T_ > 1)
      for (int c = 0; c < C; ++c) EXPECT_EQ(out[c], out2[c]);
  }
}

TEST(KernelsFiniteDifference, Gelu) {
  const std::size_t n = 40;
  Vec x = random_normals(n, 14, 2.0), R = random_normals(n, 15), out(n);
  auto loss = [&] {
    cpu::gelu_forward(out.data(), x.data(), n);
    return dot(out, R);
  };
  Vec dx(n, 0.0);
  cpu::gelu_backward(dx.data(), x.data(), R.data(), n);
  expect_matches_fd("inp", x, dx, loss);
}

namespace {
// The three-phase cross-entropy over one unsplit shard with `pad` padding columns.
void xent(Vec& losses, double* dlogits, const Vec& logits, const std::vector<std::int32_t>& targets,
          int N, int V, int valid, double dloss) {
  Vec mx(N), packed(2 * N);
  cpu::xent_max(mx.data(), logits.data(), N, V, valid);
  cpu::xent_sums(packed.data(), logits.data(), mx.data(), targets.data(), 0, N, V, valid);
  cpu::xent_finish(losses.data(), dlogits, logits.data(), mx.data(), packed.data(), targets.data(),
                   0, N, V, valid, dloss);
}
}  // namespace

TEST(KernelsFiniteDifference, CrossEntropyIgnoresPadding) {
  const int N = B * T, Vp = V + 5;  // 5 padding columns
  Vec logits = random_normals(N * Vp, 16, 3.0), losses(N);
  std::vector<std::int32_t> targets(N);
  for (int i = 0; i < N; ++i) targets[i] = (i * 7) % V;
  const double dloss = 1.0 / N;
  auto loss = [&] {
    xent(losses, nullptr, logits, targets, N, Vp, V, 0.0);
    double s = 0;
    for (double l : losses) s += l;
    return s * dloss;
  };
  Vec dlogits(N * Vp);
  xent(losses, dlogits.data(), logits, targets, N, Vp, V, dloss);
  expect_matches_fd("logits", logits, dlogits, loss);
  for (int i = 0; i < N; ++i)
    for (int j = V; j < Vp; ++j) EXPECT_EQ(dlogits[i * Vp + j], 0.0);
  // In place (dlogits aliasing logits) gives the same gradient.
  Vec inplace = logits;
  xent(losses, inplace.data(), inplace, targets, N, Vp, V, dloss);
  for (std::size_t i = 0; i < inplace.size(); ++i) EXPECT_DOUBLE_EQ(inplace[i], dlogits[i]);
}

TEST(KernelsFiniteDifference, CrossEntropyOverTwoShardsEqualsOneShard) {
  // Split V columns into [0, 6) and [6, V): combine the phases as the tensor
  // group does (max, then sums) and compare with the unsplit result.
  const int N = 4, S = 6;
  Vec logits = random_normals(N * V, 21, 2.0), whole_loss(N), whole_grad(N * V);
  std::vector<std::int32_t> targets = {0, 5, 6, 10};
  xent(whole_loss, whole_grad.data(), logits, targets, N, V, V, 0.25);
  Vec a(N * S), b(N * (V - S));
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < V; ++j) (j < S ? a[i * S + j] : b[i * (V - S) + j - S]) = logits[i * V + j];
  Vec ma(N), mb(N), pa(2 * N), pb(2 * N), la(N), lb(N);
  cpu::xent_max(ma.data(), a.data(), N, S, S);
  cpu::xent_max(mb.data(), b.data(), N, V - S, V - S);
  for (int i = 0; i < N; ++i) ma[i] = mb[i] = std::max(ma[i], mb[i]);
  cpu::xent_sums(pa.data(), a.data(), ma.data(), targets.data(), 0, N, S, S);
  cpu::xent_sums(pb.data(), b.data(), mb.data(), targets.data(), S, N, V - S, V - S);
  for (int i = 0; i < 2 * N; ++i) pa[i] = pb[i] = pa[i] + pb[i];
  cpu::xent_finish(la.data(), a.data(), a.data(), ma.data(), pa.data(), targets.data(), 0, N, S, S, 0.25);
  cpu::xent_finish(lb.data(), b.data(), b.data(), mb.data(), pb.data(), targets.data(), S, N, V - S, V - S, 0.25);
  for (int i = 0; i < N; ++i) {
    EXPECT_NEAR(la[i], whole_loss[i], 1e-12);
    EXPECT_NEAR(lb[i], whole_loss[i], 1e-12);
    for (int j = 0; j < V; ++j)
      EXPECT_NEAR(j < S ? a[i * S + j] : b[i * (V - S) + j - S], whole_grad[i * V + j], 1e-12);
  }
}

TEST(KernelsFiniteDifference, BackwardAccumulates) {
  // Backward adds into its outputs: running it twice doubles the gradient.
  const int N = 4, IC = 3, OC = 5;
  Vec x = random_normals(N * IC, 17);
  Vec w = random_normals(OC * IC, 18);
  Vec R = random_normals(N * OC, 19);
  Vec dx(N * IC, 0.0), dw(OC * IC, 0.0), db(OC, 0.0);
  cpu::matmul_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), N, IC, OC);
  Vec dw1 = dw;
  cpu::matmul_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), N, IC, OC);
  for (std::size_t i = 0; i < dw.size(); ++i) EXPECT_NEAR(dw[i], 2 * dw1[i], 1e-12);
}
