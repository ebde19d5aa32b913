// The bf16 GEMM path against the f32 one: on bf16-valued operands both form
// exact products and f32 sums, so they differ only by the rounding of sums
// taken in another order. Checked against a double reference on the three
// GEMMs of a linear layer, with the tiles of C at full size and at the edges.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "compute/bf16_operands.hpp"
#include "compute/cpu/blas.hpp"
#include "compute/cpu/gemm_bf16.hpp"
#include "compute/cpu/kernels.hpp"
#include "core/half.hpp"
#include "support/random_values.hpp"

using namespace trident;

namespace {

std::vector<float> bf16_valued(std::size_t n, unsigned seed) {
  auto v = trident::testing::random_normals(n, seed);
  for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
  return v;
}

struct Case {
  bool ta, tb;
  int M, N, K;
  float beta;
};

// Largest |c - exact| over the sum of |terms| of that entry (|a b| and |beta c0|).
double worst_relative_error(const Case& s, const std::vector<float>& A, const std::vector<float>& B,
                            const std::vector<float>& C0, const std::vector<float>& C) {
  const int lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
  double worst = 0;
  for (int i = 0; i < s.M; ++i)
    for (int j = 0; j < s.N; ++j) {
      double exact = s.beta * double(C0[std::size_t(i) * s.N + j]), size = std::fabs(exact);
      for (int k = 0; k < s.K; ++k) {
        const double a = s.ta ? A[std::size_t(k) * lda + i] : A[std::size_t(i) * lda + k];
        const double b = s.tb ? B[std::size_t(j) * ldb + k] : B[std::size_t(k) * ldb + j];
        exact += a * b;
        size += std::fabs(a * b);
      }
      worst = std::max(worst, std::fabs(C[std::size_t(i) * s.N + j] - exact) / size);
    }
  return worst;
}

}  // namespace

TEST(GemmBf16, MatchesTheF32GemmOnBf16Values) {
  // Forward (x W^T), input gradient (dy W) and weight gradient (dy^T x) of
  // linears from the decks; 300 and 257 leave partial tiles at the edges.
  const Case cases[] = {{false, true, 512, 384, 128, 0.0f},  {false, false, 512, 128, 384, 1.0f},
                        {true, false, 384, 128, 512, 1.0f},  {false, true, 1024, 576, 512, 0.0f},
                        {true, false, 512, 576, 1024, 1.0f}, {false, true, 300, 257, 128, 0.0f},
                        {false, false, 300, 128, 257, 1.0f}};
  for (const Case& s : cases) {
    SCOPED_TRACE(::testing::Message() << "ta " << s.ta << " tb " << s.tb << " M " << s.M << " N "
                                    << s.N << " K " << s.K << " beta " << s.beta);
    const auto A = bf16_valued(std::size_t(s.M) * s.K, 1), B = bf16_valued(std::size_t(s.K) * s.N, 2);
    const auto C0 = trident::testing::random_normals(std::size_t(s.M) * s.N, 3);
    const int lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
    std::vector<float> c16 = C0, c32 = C0;
    if (!cpu::gemm_bf16_valued(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), lda, B.data(), ldb,
                               s.beta, c16.data(), s.N))
      GTEST_SKIP() << "no bf16 instructions on this CPU";
    cpu::gemm(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), lda, B.data(), ldb, s.beta, c32.data(),
              s.N);
    // f32 sums of up to 1024 terms: both paths measured within 2.5 units of
    // 2^-24 (6e-8) of the sum of the terms' sizes; the bound allows 7. One
    // operand rounded to bf16 on the way would cost up to 2^-9.
    EXPECT_LT(worst_relative_error(s, A, B, C0, c16), 4e-7);
    EXPECT_LT(worst_relative_error(s, A, B, C0, c32), 4e-7);
  }
}

TEST(GemmBf16, DeclinesValuesBf16CannotHold) {
  const int M = 64, N = 64, K = 64;
  auto A = bf16_valued(std::size_t(M) * K, 1);
  const auto B = bf16_valued(std::size_t(K) * N, 2);
  A[std::size_t(M) * K - 1] = 1.0f + 1.0f / 1024;  // needs 10 mantissa bits
  std::vector<float> C(std::size_t(M) * N, 7.0f);
  EXPECT_FALSE(cpu::holds_bf16_values(A.data(), M, K, K));
  EXPECT_TRUE(cpu::holds_bf16_values(B.data(), K, N, N));
  EXPECT_FALSE(cpu::gemm_bf16_valued(false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f,
                                     C.data(), N));
  for (float c : C) ASSERT_EQ(c, 7.0f);  // untouched: the caller runs the f32 GEMM
  EXPECT_FALSE(cpu::gemm_bf16_valued(false, false, M, N, K, 0.5f, B.data(), K, B.data(), N, 0.0f,
                                     C.data(), N));  // alpha other than 1
}

namespace {

std::vector<std::uint16_t> bits_of(const std::vector<float>& v);

// rows x cols of x (contiguous) inside a matrix `pad` columns wider, the
// padding filled with `fill`.
template <class T>
std::vector<T> widened(const std::vector<T>& x, int rows, int cols, int pad, T fill) {
  std::vector<T> out(std::size_t(rows) * (cols + pad), fill);
  for (int r = 0; r < rows; ++r)
    std::copy_n(x.begin() + std::ptrdiff_t(r) * cols, cols, out.begin() + std::ptrdiff_t(r) * (cols + pad));
  return out;
}

}  // namespace

// Operands inside wider matrices (a head's columns, a slice of a fused
// weight) are made dense for oneDNN's fast kernels: the same bits as the
// dense call, and C's padding untouched. M 1100 spans several row tiles.
TEST(GemmBf16, StridedOperandsGiveTheDenseBits) {
  const Case cases[] = {{false, true, 1100, 96, 80, 0.0f}, {false, false, 1100, 96, 80, 1.0f},
                        {true, false, 1100, 96, 80, 1.0f}, {true, true, 300, 96, 80, 0.0f}};
  const int pad = 24;
  for (const Case& s : cases) {
    SCOPED_TRACE(::testing::Message() << "ta " << s.ta << " tb " << s.tb << " M " << s.M);
    const int a_rows = s.ta ? s.K : s.M, a_cols = s.ta ? s.M : s.K;
    const int b_rows = s.tb ? s.N : s.K, b_cols = s.tb ? s.K : s.N;
    const auto A = bits_of(bf16_valued(std::size_t(a_rows) * a_cols, 1));
    const auto B = bits_of(bf16_valued(std::size_t(b_rows) * b_cols, 2));
    const auto C0 = trident::testing::random_normals(std::size_t(s.M) * s.N, 3);
    std::vector<float> dense = C0;
    if (!cpu::gemm_bf16(s.ta, s.tb, s.M, s.N, s.K, {nullptr, A.data()}, a_cols,
                        {nullptr, B.data()}, b_cols, s.beta != 0.0f, dense.data(), s.N))
      GTEST_SKIP() << "no bf16 instructions on this CPU";
    const auto Aw = widened<std::uint16_t>(A, a_rows, a_cols, pad, 0x7fc0);  // NaN padding
    const auto Bw = widened<std::uint16_t>(B, b_rows, b_cols, pad, 0x7fc0);
    auto Cw = widened<float>(C0, s.M, s.N, pad, 9.0f);
    ASSERT_TRUE(cpu::gemm_bf16(s.ta, s.tb, s.M, s.N, s.K, {nullptr, Aw.data()}, a_cols + pad,
                               {nullptr, Bw.data()}, b_cols + pad, s.beta != 0.0f, Cw.data(),
                               s.N + pad));
    EXPECT_EQ(Cw, widened<float>(dense, s.M, s.N, pad, 9.0f));
  }
}

// The forward's bias in the GEMM's epilogue: the same bits as adding it after.
TEST(GemmBf16, BiasInTheEpilogueEqualsAddingItAfter) {
  const int M = 1100, N = 96, K = 80;
  const auto A = bits_of(bf16_valued(std::size_t(M) * K, 1));
  const auto B = bits_of(bf16_valued(std::size_t(N) * K, 2));
  const auto bias = trident::testing::random_normals(N, 3);
  std::vector<float> fused(std::size_t(M) * N), after(fused.size());
  if (!cpu::gemm_bf16(false, true, M, N, K, {nullptr, A.data()}, K, {nullptr, B.data()}, K, false,
                      fused.data(), N, bias.data()))
    GTEST_SKIP() << "no bf16 instructions on this CPU";
  ASSERT_TRUE(cpu::gemm_bf16(false, true, M, N, K, {nullptr, A.data()}, K, {nullptr, B.data()}, K,
                             false, after.data(), N));
  cpu::add_bias(after.data(), bias.data(), M, N);
  EXPECT_EQ(fused, after);
  EXPECT_FALSE(cpu::gemm_bf16(false, true, M, N, K, {nullptr, A.data()}, K, {nullptr, B.data()},
                              K, true, after.data(), N, bias.data()));  // bias only when writing
}

namespace {

std::vector<std::uint16_t> bits_of(const std::vector<float>& v) {
  std::vector<std::uint16_t> out;
  for (float x : v) out.push_back(f32_to_bf16(x));
  return out;
}

}  // namespace

// The backend's linear layer given bf16 bits (16-bit weights, packed rounded
// activations) computes what it computes from the same values: the bits only
// skip the packing. Bits with a partner bf16 cannot hold take the f32 path on
// widened values, as the values alone do.
TEST(GemmBf16, LinearOnBitsEqualsLinearOnValues) {
  auto be = make_cpu_backend(0);
  Bf16Operands* ops = be->bf16_operands();
  if (!ops) GTEST_SKIP() << "no bf16 instructions on this CPU";
  const int N = 300, IC = 128, OC = 257;
  const auto x = bf16_valued(std::size_t(N) * IC, 1), w = bf16_valued(std::size_t(OC) * IC, 2);
  const auto dy = bf16_valued(std::size_t(N) * OC, 3), b = bf16_valued(OC, 4);
  const auto xb = bits_of(x), wb = bits_of(w), dyb = bits_of(dy);
  auto forward = [&](MatrixIn in, MatrixIn weight) {
    std::vector<float> y(std::size_t(N) * OC);
    ops->matmul_forward(y.data(), in, weight, b.data(), N, IC, OC);
    return y;
  };
  const auto y_values = forward(x.data(), w.data());
  EXPECT_EQ(forward({x.data(), xb.data()}, {nullptr, wb.data()}), y_values);
  EXPECT_EQ(forward(x.data(), {nullptr, wb.data()}), y_values);

  auto backward = [&](MatrixIn d, MatrixIn in, MatrixIn weight,
                      InputGrad mode = InputGrad::add, float dinp0 = 0.5f) {
    std::vector<float> g(std::size_t(N) * IC + std::size_t(OC) * IC + OC, 0.5f);
    std::fill_n(g.begin(), std::size_t(N) * IC, dinp0);
    ops->matmul_backward(g.data(), g.data() + std::size_t(N) * IC,
                         g.data() + std::size_t(N) * IC + std::size_t(OC) * IC, d, in, weight, N,
                         IC, OC, mode);
    return g;
  };
  const auto g_values = backward(dy.data(), x.data(), w.data());
  EXPECT_EQ(backward({dy.data(), dyb.data()}, {nullptr, xb.data()}, {nullptr, wb.data()}),
            g_values);
  EXPECT_EQ(backward({nullptr, dyb.data()}, x.data(), {nullptr, wb.data()}), g_values);
  // Written over: as added to zeros, whatever the buffer held.
  EXPECT_EQ(backward({dy.data(), dyb.data()}, x.data(), {nullptr, wb.data()}, InputGrad::write, 7.0f),
            backward(dy.data(), x.data(), w.data(), InputGrad::add, 0.0f));

  // An input that is not bf16-valued: f32 GEMMs, the weight widened from its bits.
  auto x32 = trident::testing::random_normals(std::size_t(N) * IC, 5);
  EXPECT_EQ(forward(x32.data(), {nullptr, wb.data()}), forward(x32.data(), w.data()));
}

TEST(GemmBf16, RoundToBf16GivesValuesAndBits) {
  auto be = make_cpu_backend(0);
  const auto src = trident::testing::random_normals(100003, 6);
  std::vector<float> dst(src.size()), rounded = src;
  std::vector<std::uint16_t> bits(src.size());
  Bf16OperandsFor ops(*be);  // the CPU's own, or the rounded f32 ones
  ops->round_to_bf16(dst.data(), bits.data(), src.data(), src.size());
  be->round_to(rounded.data(), DType::bf16, rounded.size());
  EXPECT_EQ(dst, rounded);
  EXPECT_EQ(bits, bits_of(src));
}

namespace {

std::vector<std::uint32_t> float_bits(const std::vector<float>& v) {
  std::vector<std::uint32_t> out;
  for (float x : v) out.push_back(f32_bits(x));
  return out;
}

}  // namespace

// The CPU's GELU fused with the roundings around it gives the bits of the
// seam's separate passes (round, GELU, round and pack: what RoundedBf16Operands
// runs on a CPU without bf16 kernels), zeros' signs included.
TEST(GemmBf16, FusedGeluEqualsTheSeparatePasses) {
  auto be = make_cpu_backend(0);
  Bf16Operands* ops = be->bf16_operands();
  if (!ops) GTEST_SKIP() << "no bf16 instructions on this CPU";
  RoundedBf16Operands separate(*be);
  const std::size_t n = 100003;  // several threads' parts and a vector tail
  auto x = trident::testing::random_normals(n, 7), dy = trident::testing::random_normals(n, 8);
  for (std::size_t i = 0; i < 64; ++i) dy[i] = i % 2 ? -0.0f : 0.0f, x[i + 64] = -0.0f;
  for (bool with_bits : {true, false}) {
    SCOPED_TRACE(with_bits ? "with bits" : "values only");
    std::vector<float> x1 = x, x2 = x, y1(n, 3.0f), y2(n, 3.0f);
    std::vector<std::uint16_t> b1(n, 1), b2(n, 1), xb1(n, 1), xb2(n, 1);
    auto maybe = [&](std::vector<std::uint16_t>& b) { return with_bits ? b.data() : nullptr; };
    ops->gelu_forward_rounded(y1.data(), maybe(b1), x1.data(), maybe(xb1), n, DType::bf16);
    separate.gelu_forward_rounded(y2.data(), maybe(b2), x2.data(), maybe(xb2), n, DType::bf16);
    EXPECT_EQ(float_bits(x1), float_bits(x2));
    EXPECT_EQ(float_bits(y1), float_bits(y2));
    EXPECT_EQ(b1, b2);
    EXPECT_EQ(xb1, xb2);
    if (with_bits) {  // each kind of bits alone
      std::fill(b1.begin(), b1.end(), 1), std::fill(xb1.begin(), xb1.end(), 1);
      x1 = x, ops->gelu_forward_rounded(y1.data(), nullptr, x1.data(), xb1.data(), n, DType::bf16);
      x1 = x, ops->gelu_forward_rounded(y1.data(), b1.data(), x1.data(), nullptr, n, DType::bf16);
      EXPECT_EQ(xb1, xb2);
      EXPECT_EQ(b1, b2);
    }
    const std::vector<std::uint16_t> forward_bits = b2;
    std::vector<float> d1 = dy, d2 = dy, g1(n, 3.0f), g2(n, 3.0f);
    ops->gelu_backward_rounded(g1.data(), with_bits ? b1.data() : nullptr, x1.data(), nullptr,
                              d1.data(), n, DType::bf16);
    separate.gelu_backward_rounded(g2.data(), with_bits ? b2.data() : nullptr, x2.data(), nullptr,
                                   d2.data(), n, DType::bf16);
    EXPECT_EQ(float_bits(g1), float_bits(g2));
    EXPECT_EQ(b1, b2);
    if (!with_bits) continue;
    // Bits only forward (out and x untouched), then backward from x's bits:
    // the same bits and gradient as from the values.
    std::vector<float> x3 = x, y3(n, 5.0f), g3(n, 3.0f), d3 = dy;
    std::vector<std::uint16_t> b3(n, 1), xb3(n, 1), gb3(n, 1);
    ops->gelu_forward_rounded(nullptr, b3.data(), x3.data(), xb3.data(), n, DType::bf16);
    EXPECT_EQ(float_bits(x3), float_bits(x)) << "x written by a bits-only forward";
    EXPECT_EQ(b3, forward_bits);
    EXPECT_EQ(xb3, xb2);
    std::vector<std::uint16_t> b4(n, 1);  // the input given as its bits alone
    ops->gelu_forward_rounded(nullptr, b4.data(), nullptr, xb3.data(), n, DType::bf16);
    EXPECT_EQ(b4, forward_bits);
    EXPECT_EQ(xb3, xb2) << "input bits written";
    std::vector<float> stale(n, 7.0f);
    ops->gelu_backward_rounded(g3.data(), gb3.data(), stale.data(), xb3.data(), d3.data(), n,
                              DType::bf16);
    EXPECT_EQ(float_bits(g3), float_bits(g2));
    EXPECT_EQ(gb3, b2);
  }
}

// A bf16 table's lookup from its bits equals the lookup from its values,
// tokens outside the vocabulary shard giving zeros.
TEST(GemmBf16, EmbeddingFromBitsEqualsFromValues) {
  auto be = make_cpu_backend(0);
  Bf16Operands* ops = be->bf16_operands();
  if (!ops) GTEST_SKIP() << "no bf16 instructions on this CPU";
  const int N = 500, C = 24, lo = 100, count = 200;
  std::vector<std::int32_t> tok(N);
  for (int n = 0; n < N; ++n) tok[n] = n * 37 % 400;  // in and out of [100, 300)
  const auto wte = bf16_valued(std::size_t(count) * C, 9);
  std::vector<std::uint16_t> bits(wte.size());
  for (std::size_t i = 0; i < wte.size(); ++i) bits[i] = f32_to_bf16(wte[i]);
  std::vector<float> from_values(std::size_t(N) * C, NAN), from_bits = from_values;
  be->embedding_forward(from_values.data(), tok.data(), wte.data(), lo, count, N, C);
  ops->embedding_forward_bits(from_bits.data(), tok.data(), bits.data(), lo, count, N, C);
  EXPECT_EQ(float_bits(from_bits), float_bits(from_values));
  EXPECT_EQ(from_bits[0], 0.0f);  // token 0 lies outside the shard
}

// What the kernels keep outside the arenas is counted: a ScratchVector's
// bytes while it lives, and the bf16 copy of an operand given as values,
// which the calling thread keeps for the next call.
TEST(GemmBf16, ScratchOutsideTheArenasIsCounted) {
  using cpu::KernelScratchCount;
  const std::size_t before = KernelScratchCount::now.load();
  {
    cpu::ScratchVector<float> v(1000);
    EXPECT_GE(KernelScratchCount::now.load(), before + 1000 * sizeof(float));
    EXPECT_GE(cpu::kernel_scratch_peak(), KernelScratchCount::now.load());
  }
  EXPECT_EQ(KernelScratchCount::now.load(), before);
  const int M = 700, N = 64, K = 96;
  const auto A = bf16_valued(std::size_t(M) * K, 4);
  const auto B = bits_of(bf16_valued(std::size_t(K) * N, 5));
  std::vector<float> C(std::size_t(M) * N);
  if (!cpu::gemm_bf16(false, false, M, N, K, {A.data(), nullptr}, K, {nullptr, B.data()}, N,
                      false, C.data(), N))
    GTEST_SKIP() << "no bf16 instructions on this CPU";
  EXPECT_GE(KernelScratchCount::now.load(), std::size_t(M) * K * sizeof(std::uint16_t));
}
