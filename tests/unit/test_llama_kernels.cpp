// RMSNorm, RoPE and SwiGLU (compute/cpu/llama_kernels.hpp) in float, as the
// backend would run them, against double references written from the
// definitions (llama_reference.hpp): forwards within float rounding, backwards
// against central differences of those references, odd sizes throughout.
// RoPE also: only q and k of a fused qkv rotate, a sequence cut at any
// position offset rotates as the whole, scores depend on relative positions
// only, and positions past the table are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "compute/cpu/llama_kernels.hpp"
#include "support/random_values.hpp"
#include "unit/llama_reference.hpp"

namespace {

using Vec = std::vector<float>;
using trident::testing::random_normals;
using namespace trident::testing::llama;
namespace cpu = trident::cpu;

constexpr double kFloatTol = 2e-6;  // float rounding of O(C)-term sums, relative
constexpr double kGradTol = 2e-5;   // float kernel against differences in double

TEST(RmsNorm, ForwardMatchesTheDefinition) {
  const int N = 37, C = 67;
  const float eps = 1e-5f;
  const Vec x = random_normals(std::size_t(N) * C, 1, 2.0f), w = random_normals(C, 2);
  Vec out(x.size()), rstd(N);
  cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
  DVec ref_rstd;
  const DVec ref = rmsnorm(widen(x), widen(w), N, C, eps, &ref_rstd);
  EXPECT_LT(relative_gap(out, ref), kFloatTol);
  EXPECT_LT(relative_gap(rstd, ref_rstd), kFloatTol);
  // eps counts: a row of zeros normalises to zeros with rstd = 1 / sqrt(eps).
  Vec zeros(C, 0.0f), zout(C, 1.0f);
  float zr = 0;
  cpu::rmsnorm_forward(zout.data(), &zr, zeros.data(), w.data(), 1, C, eps);
  EXPECT_NEAR(zr, 1 / std::sqrt(1e-5), 1e-5 * zr);
  for (float v : zout) EXPECT_EQ(v, 0.0f);
}

TEST(RmsNorm, BackwardAddsTheGradientsOfTheDefinition) {
  const int N = 5, C = 13;
  const double eps = 1e-5;
  const Vec x = random_normals(std::size_t(N) * C, 3), w = random_normals(C, 4),
            g = random_normals(x.size(), 5);
  Vec out(x.size()), rstd(N);
  cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, float(eps));
  const Vec dinp0 = random_normals(x.size(), 6), dw0 = random_normals(C, 7);
  Vec dinp = dinp0, dw = dw0;  // backward adds: start from non-zero values
  cpu::rmsnorm_backward(dinp.data(), dw.data(), g.data(), x.data(), w.data(), rstd.data(), N, C);
  for (std::size_t i = 0; i < dinp.size(); ++i) dinp[i] -= dinp0[i];
  for (int c = 0; c < C; ++c) dw[c] -= dw0[c];
  const DVec wd = widen(w), xd = widen(x);
  const DVec fd_x = finite_difference([&](const DVec& v) { return rmsnorm(v, wd, N, C, eps); },
                                      xd, widen(g));
  const DVec fd_w = finite_difference([&](const DVec& v) { return rmsnorm(xd, v, N, C, eps); },
                                      wd, widen(g));
  EXPECT_LT(relative_gap(dinp, fd_x), kGradTol);
  EXPECT_LT(relative_gap(dw, fd_w), kGradTol);
  // Null outputs are skipped (the zero-bubble schedules' separate passes).
  Vec only_dw(C, 0.0f);
  cpu::rmsnorm_backward<float>(nullptr, only_dw.data(), g.data(), x.data(), w.data(), rstd.data(),
                               N, C);
  EXPECT_LT(relative_gap(only_dw, fd_w), kGradTol);
}

// A fused qkv of B * T rows: NH query heads, KVH key and value heads.
struct Fused {
  int B, T, NH, KVH, hs;
  int ld() const { return (NH + 2 * KVH) * hs; }
  std::size_t size() const { return std::size_t(B) * T * ld(); }
};

TEST(Rope, RotatesQueriesAndKeysOfTheFusedQkvAsHuggingFaceLlama) {
  const Fused f{2, 11, 6, 2, 10};
  const double theta = 500000.0;  // Llama 3's
  const auto table = cpu::make_rope_table(64, f.hs, theta);
  for (int pos0 : {0, 37}) {
    const Vec x = random_normals(f.size(), 8);
    Vec y = x;
    cpu::rope_forward(y.data(), table, f.B, f.T, f.NH + f.KVH, f.hs, f.ld(), pos0);
    const DVec ref = rope(widen(x), f.B, f.T, f.NH + f.KVH, f.hs, f.ld(), pos0, theta);
    EXPECT_LT(relative_gap(y, ref), kFloatTol) << "pos0 " << pos0;
    for (int r = 0; r < f.B * f.T; ++r)  // v untouched, bit for bit
      for (int c = (f.NH + f.KVH) * f.hs; c < f.ld(); ++c)
        ASSERT_EQ(y[r * f.ld() + c], x[r * f.ld() + c]);
  }
}

TEST(Rope, ASequenceCutAtAnOffsetRotatesAsTheWhole) {
  const Fused f{1, 12, 2, 1, 8};
  const auto table = cpu::make_rope_table(f.T, f.hs, 10000.0);
  const Vec x = random_normals(f.size(), 9);
  Vec whole = x, parts = x;
  cpu::rope_forward(whole.data(), table, 1, f.T, f.NH + f.KVH, f.hs, f.ld(), 0);
  const int cut = 5;  // a context-parallel shard or pipeline chunk starting at position 5
  cpu::rope_forward(parts.data(), table, 1, cut, f.NH + f.KVH, f.hs, f.ld(), 0);
  cpu::rope_forward(parts.data() + cut * f.ld(), table, 1, f.T - cut, f.NH + f.KVH, f.hs, f.ld(),
                    cut);
  EXPECT_EQ(parts, whole);
}

TEST(Rope, ScoresDependOnRelativePositionsOnly) {
  const int hs = 16;
  const auto table = cpu::make_rope_table(200, hs, 10000.0);
  const Vec q = random_normals(hs, 10), k = random_normals(hs, 11);
  auto score = [&](int qpos, int kpos) {
    Vec qr = q, kr = k;
    cpu::rope_forward(qr.data(), table, 1, 1, 1, hs, hs, qpos);
    cpu::rope_forward(kr.data(), table, 1, 1, 1, hs, hs, kpos);
    double s = 0;
    for (int d = 0; d < hs; ++d) s += double(qr[d]) * kr[d];
    return s;
  };
  const double base = score(7, 3);
  for (int shift : {1, 50, 190}) EXPECT_NEAR(score(7 + shift, 3 + shift), base, 1e-4);
  EXPECT_GT(std::abs(score(7, 3) - score(3, 7)), 1e-3);  // the sign of the distance matters
}

TEST(Rope, BackwardIsTheTransposeOfTheRotation) {
  const Fused f{2, 7, 3, 1, 6};
  const double theta = 10000.0;
  const int pos0 = 4;
  const auto table = cpu::make_rope_table(pos0 + f.T, f.hs, theta);
  const Vec x = random_normals(f.size(), 12), g = random_normals(f.size(), 13);
  Vec dx = g;
  cpu::rope_backward(dx.data(), table, f.B, f.T, f.NH + f.KVH, f.hs, f.ld(), pos0);
  const DVec fd = finite_difference(
      [&](const DVec& v) { return rope(v, f.B, f.T, f.NH + f.KVH, f.hs, f.ld(), pos0, theta); },
      widen(x), widen(g));
  EXPECT_LT(relative_gap(dx, fd), kGradTol);
  // Forward then backward is the identity (a rotation's transpose is its inverse).
  Vec round_trip = x;
  cpu::rope_forward(round_trip.data(), table, f.B, f.T, f.NH + f.KVH, f.hs, f.ld(), pos0);
  cpu::rope_backward(round_trip.data(), table, f.B, f.T, f.NH + f.KVH, f.hs, f.ld(), pos0);
  EXPECT_LT(relative_gap(round_trip, widen(x)), kFloatTol);
}

TEST(Rope, RefusesPositionsPastTheTableAndOddHeads) {
  const auto table = cpu::make_rope_table(16, 8, 10000.0);
  Vec x(8 * 8 * 4, 1.0f);
  EXPECT_THROW(cpu::rope_forward(x.data(), table, 1, 8, 1, 8, 8, 9), std::out_of_range);
  EXPECT_NO_THROW(cpu::rope_forward(x.data(), table, 1, 8, 1, 8, 8, 8));
  EXPECT_THROW(cpu::rope_forward(x.data(), table, 1, 8, 1, 4, 4, 0), std::invalid_argument);
  EXPECT_THROW(cpu::make_rope_table(16, 7, 10000.0), std::invalid_argument);
}

TEST(SwiGlu, ForwardMatchesTheDefinition) {
  const int N = 9, F = 43;
  Vec inp = random_normals(std::size_t(N) * 2 * F, 14, 3.0f);
  inp[0] = 40.0f, inp[1] = -40.0f, inp[2] = 0.0f;  // saturated gates and zero
  Vec out(std::size_t(N) * F);
  cpu::swiglu_forward(out.data(), inp.data(), N, F);
  EXPECT_LT(relative_gap(out, swiglu(widen(inp), N, F)), kFloatTol);
}

TEST(SwiGlu, BackwardAddsTheGradientsOfBothHalves) {
  const int N = 4, F = 11;
  const Vec inp = random_normals(std::size_t(N) * 2 * F, 15, 2.0f),
            g = random_normals(std::size_t(N) * F, 16);
  const Vec dinp0 = random_normals(inp.size(), 17);
  Vec dinp = dinp0;
  cpu::swiglu_backward(dinp.data(), g.data(), inp.data(), N, F);
  for (std::size_t i = 0; i < dinp.size(); ++i) dinp[i] -= dinp0[i];
  const DVec fd =
      finite_difference([&](const DVec& v) { return swiglu(v, N, F); }, widen(inp), widen(g));
  EXPECT_LT(relative_gap(dinp, fd), kGradTol);
}

}  // namespace
