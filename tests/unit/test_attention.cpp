// Flash attention (compute/cpu/attention.cpp) against the (T, T) kernel it
// replaced (support/attention_reference.hpp), in float as the backend runs
// it: outputs and gradients equal within float rounding, the log-sum-exp
// equal to one computed in double from the scores, for T = 1, T inside one
// tile, T at a tile boundary, just past it and between tiles; the same bits
// at any thread count. With bf16 tiles (bf16 runs; fused on the tile unit
// where the CPU has AMX, compute/cpu/amx_attention.hpp), within bf16 rounding
// of the f32 kernel, adding into the gradient it is given. Finite differences
// of the same code in double are in test_kernels_fd.cpp.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "compute/cpu/gemm_bf16.hpp"
#include "compute/cpu/half_convert.hpp"
#include "compute/cpu/kernels.hpp"
#include "support/attention_reference.hpp"
#include "support/random_values.hpp"

namespace {

using Vec = std::vector<float>;
using trident::testing::random_normals;

struct Shape {
  int B, T, C, NH;
};

// max |a - b| over max(1, max |b|): float rounding of sums of O(T) terms.
double relative_gap(const Vec& a, const Vec& b) {
  double gap = 0, size = 1;
  for (std::size_t i = 0; i < a.size(); ++i) {
    gap = std::max(gap, double(std::abs(a[i] - b[i])));
    size = std::max(size, double(std::abs(b[i])));
  }
  return gap / size;
}

// log sum_{j <= t} exp(scale q_t . k_j) per (b, h, t), in double.
std::vector<double> lse_in_double(const Vec& qkv, const Shape& s) {
  const int hs = s.C / s.NH, C3 = 3 * s.C;
  std::vector<double> out;
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h)
      for (int t = 0; t < s.T; ++t) {
        std::vector<double> sc;
        const float* q = qkv.data() + (std::size_t(b) * s.T + t) * C3 + h * hs;
        for (int j = 0; j <= t; ++j) {
          const float* k = qkv.data() + (std::size_t(b) * s.T + j) * C3 + s.C + h * hs;
          double d = 0;
          for (int c = 0; c < hs; ++c) d += double(q[c]) * k[c];
          sc.push_back(d / std::sqrt(double(hs)));
        }
        const double mx = *std::max_element(sc.begin(), sc.end());
        double sum = 0;
        for (double x : sc) sum += std::exp(x - mx);
        out.push_back(mx + std::log(sum));
      }
  return out;
}

struct Result {
  Vec out, lse, dqkv;
};

Result flash(const Vec& qkv, const Vec& dout, const Vec& dqkv0, const Shape& s,
             bool bf16 = false) {
  Result r{Vec(dout.size()), Vec(std::size_t(s.B) * s.NH * s.T), dqkv0};
  trident::cpu::attention_forward(r.out.data(), r.lse.data(), qkv.data(), s.B, s.T, s.C, s.NH,
                                  bf16);
  trident::cpu::attention_backward(r.dqkv.data(), dout.data(), qkv.data(), r.out.data(),
                                   r.lse.data(), s.B, s.T, s.C, s.NH, bf16);
  return r;
}

Vec bf16_values(Vec x) {  // as a bf16 run holds q, k, v and dout
  trident::cpu::round_to_16bit(x.data(), x.size(), trident::DType::bf16);
  return x;
}

constexpr int kTile = trident::cpu::kAttentionTile;
const Shape kShapes[] = {{2, 1, 16, 2},          {1, 17, 32, 4},         {2, kTile, 32, 2},
                         {1, kTile + 1, 48, 3},  {2, 2 * kTile + 5, 64, 2}, {1, 3 * kTile, 16, 1},
                         {1, 2 * kTile + 37, 32, 2}, {1, 2 * kTile + 44, 128, 2}};

}  // namespace

TEST(FlashAttention, MatchesTheProbabilityMatrixKernel) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(::testing::Message() << "B " << s.B << " T " << s.T << " C " << s.C << " NH "
                                      << s.NH);
    const Vec qkv = random_normals(std::size_t(s.B) * s.T * 3 * s.C, 1, 1.5f);
    const Vec dout = random_normals(std::size_t(s.B) * s.T * s.C, 2, 1.0f);
    const Vec dqkv0 = random_normals(qkv.size(), 3, 1.0f);  // backward adds into it
    const Result f = flash(qkv, dout, dqkv0, s);

    Vec out(dout.size()), att(std::size_t(s.B) * s.NH * s.T * s.T), datt(att.size());
    Vec dqkv = dqkv0;
    trident::reference::attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, s.C,
                                          s.NH);
    trident::reference::attention_backward(dqkv.data(), datt.data(), dout.data(), qkv.data(),
                                           att.data(), s.B, s.T, s.C, s.NH);
    EXPECT_LT(relative_gap(f.out, out), 2e-6) << "out";
    EXPECT_LT(relative_gap(f.dqkv, dqkv), 1e-5) << "dqkv";
    const std::vector<double> lse = lse_in_double(qkv, s);
    double worst = 0;
    for (std::size_t i = 0; i < lse.size(); ++i)
      worst = std::max(worst, std::abs(f.lse[i] - lse[i]) / std::max(1.0, std::abs(lse[i])));
    EXPECT_LT(worst, 2e-6) << "log-sum-exp";
  }
}

TEST(FlashAttention, LargeScoresStayFinite) {
  // Scores in the hundreds: the online softmax must rescale, never overflow.
  const Shape s{1, kTile + 22, 32, 2};
  const Vec qkv = random_normals(std::size_t(s.B) * s.T * 3 * s.C, 4, 6.0f);
  const Vec dout = random_normals(std::size_t(s.B) * s.T * s.C, 5, 1.0f);
  const Result f = flash(qkv, dout, Vec(qkv.size(), 0.0f), s);
  Vec out(dout.size()), att(std::size_t(s.NH) * s.T * s.T), datt(att.size()), dqkv(qkv.size());
  trident::reference::attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH);
  trident::reference::attention_backward(dqkv.data(), datt.data(), dout.data(), qkv.data(),
                                         att.data(), s.B, s.T, s.C, s.NH);
  for (float x : f.dqkv) ASSERT_TRUE(std::isfinite(x));
  EXPECT_LT(relative_gap(f.out, out), 1e-5) << "out";
  EXPECT_LT(relative_gap(f.dqkv, dqkv), 1e-4) << "dqkv";
}

TEST(FlashAttention, Bf16TilesStayWithinBf16RoundingOfF32) {
  // The probabilities and score gradients are rounded to bf16 (8 bits): the
  // outputs and gradients move by about that much, not more, and do move.
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(::testing::Message() << "B " << s.B << " T " << s.T << " C " << s.C);
    const Vec qkv = bf16_values(random_normals(std::size_t(s.B) * s.T * 3 * s.C, 8, 1.5f));
    const Vec dout = bf16_values(random_normals(std::size_t(s.B) * s.T * s.C, 9, 1.0f));
    const Vec dqkv0(qkv.size(), 0.0f);
    const Result f32 = flash(qkv, dout, dqkv0, s), b16 = flash(qkv, dout, dqkv0, s, true);
    const double out_gap = relative_gap(b16.out, f32.out), d_gap = relative_gap(b16.dqkv, f32.dqkv);
    std::printf("T %d: bf16 tiles against f32, out %.1e, dqkv %.1e\n", s.T, out_gap, d_gap);
    EXPECT_LT(out_gap, 4e-3) << "out";  // measured <= 1.0e-3
    EXPECT_LT(d_gap, 1e-2) << "dqkv";  // measured <= 2.6e-3
    EXPECT_LT(relative_gap(b16.lse, f32.lse), 1e-6) << "log-sum-exp (f32 sums of exact products)";
    if (s.T > 1) EXPECT_GT(d_gap, 0.0) << "the tiles were rounded";
  }
}

TEST(FlashAttention, SameBitsAtAnyThreadCount) {
  const Shape s{2, 2 * kTile + 2, 32, 2};
  for (bool bf16 : {false, true}) {
    const Vec qkv = bf16_values(random_normals(std::size_t(s.B) * s.T * 3 * s.C, 6, 1.0f));
    const Vec dout = bf16_values(random_normals(std::size_t(s.B) * s.T * s.C, 7, 1.0f));
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const Result one = flash(qkv, dout, Vec(qkv.size(), 0.0f), s, bf16);
    omp_set_num_threads(3);
    const Result three = flash(qkv, dout, Vec(qkv.size(), 0.0f), s, bf16);
    omp_set_num_threads(threads);
    EXPECT_EQ(one.out, three.out) << "bf16 " << bf16;
    EXPECT_EQ(one.lse, three.lse) << "bf16 " << bf16;
    EXPECT_EQ(one.dqkv, three.dqkv) << "bf16 " << bf16;
  }
}

// q, k, v and dout given as bf16 bits in place (a bf16 run's saved copies,
// rows 3C and C apart) give what their values give: the bits only spare the
// kernel its per-head packing.
TEST(FlashAttention, Bf16BitsGiveWhatTheirValuesGive) {
  if (!trident::cpu::cpu_has_bf16_kernels()) GTEST_SKIP() << "no bf16 instructions on this CPU";
  const Shape s{2, 2 * kTile + 5, 64, 2};
  const Vec qkv = bf16_values(random_normals(std::size_t(s.B) * s.T * 3 * s.C, 10, 1.5f));
  const Vec dout = bf16_values(random_normals(std::size_t(s.B) * s.T * s.C, 11, 1.0f));
  auto bits = [](const Vec& x) {
    std::vector<std::uint16_t> b(x.size());
    trident::cpu::to_16bit(b.data(), x.data(), x.size(), trident::DType::bf16);
    return b;
  };
  const auto qkv16 = bits(qkv), dout16 = bits(dout);
  const Result values = flash(qkv, dout, Vec(qkv.size(), 0.0f), s, true);
  Result given{Vec(dout.size()), Vec(values.lse.size()), Vec(qkv.size(), 0.0f)};
  trident::cpu::attention_forward<float>(given.out.data(), given.lse.data(), nullptr, s.B, s.T,
                                         s.C, s.NH, true, qkv16.data());
  trident::cpu::attention_backward<float>(given.dqkv.data(), dout.data(), nullptr,
                                          given.out.data(), given.lse.data(), s.B, s.T, s.C, s.NH,
                                          true, qkv16.data(), dout16.data());
  EXPECT_EQ(given.out, values.out);
  EXPECT_EQ(given.lse, values.lse);
  EXPECT_EQ(given.dqkv, values.dqkv);
}

// The bf16 backward adds into the gradient it is given (a layer's dqkv may
// hold other contributions): given g, it leaves g + what it leaves given 0.
TEST(FlashAttention, Bf16BackwardAddsIntoTheGradient) {
  const Shape s{2, kTile + 45, 128, 2};
  const Vec qkv = bf16_values(random_normals(std::size_t(s.B) * s.T * 3 * s.C, 12, 1.5f));
  const Vec dout = bf16_values(random_normals(std::size_t(s.B) * s.T * s.C, 13, 1.0f));
  const Vec given = random_normals(qkv.size(), 14, 1.0f);
  const Result from_zero = flash(qkv, dout, Vec(qkv.size(), 0.0f), s, true);
  const Result from_given = flash(qkv, dout, given, s, true);
  Vec sum(given.size());
  for (std::size_t i = 0; i < sum.size(); ++i) sum[i] = given[i] + from_zero.dqkv[i];
  EXPECT_LT(relative_gap(from_given.dqkv, sum), 1e-6);
  EXPECT_GT(relative_gap(from_zero.dqkv, Vec(qkv.size(), 0.0f)), 0.0) << "a gradient was made";
}
