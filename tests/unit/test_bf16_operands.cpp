// The compute seam's 16-bit capability: a backend without bf16 kernels runs
// a bf16 run's ops through RoundedBf16Operands on its f32 core; on the CPU
// those give the same bits as the CPU's own Bf16Operands wherever the model
// calls them on such a backend (operands as values, no bits read), so the
// path a CPU takes does not change the numbers.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "compute/bf16_operands.hpp"
#include "core/half.hpp"
#include "support/random_values.hpp"

using namespace trident;

namespace {

std::vector<std::uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<std::uint32_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * sizeof(float));
  return out;
}

std::vector<float> rounded_normals(std::size_t n, unsigned seed) {
  auto v = trident::testing::random_normals(n, seed);
  for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
  return v;
}

class Bf16OperandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    own_ = be_->bf16_operands();
    if (!own_) GTEST_SKIP() << "no bf16 instructions on this CPU: nothing to compare with";
  }
  std::unique_ptr<ComputeBackend> be_ = make_cpu_backend(0);
  Bf16Operands* own_ = nullptr;
  RoundedBf16Operands rounded_{*be_};
};

}  // namespace

TEST(Bf16OperandsFor, TakesTheBackendsOwnWhereItHasThem) {
  auto be = make_cpu_backend(0);
  Bf16OperandsFor ops(*be);
  EXPECT_EQ(ops.reads_bits(), be->bf16_operands() != nullptr);
  if (be->bf16_operands()) EXPECT_EQ(&*ops, be->bf16_operands());
  else EXPECT_NE(dynamic_cast<RoundedBf16Operands*>(&*ops), nullptr);
}

TEST(RoundedBf16Operands, RefusesOperandsGivenAsBitsAlone) {
  auto be = make_cpu_backend(0);
  RoundedBf16Operands ops(*be);
  std::vector<float> x(16, 1.0f), out(16);
  std::vector<std::uint16_t> bits(16, 0x3f80);
  std::vector<std::int32_t> tok(4, 0);
  EXPECT_THROW(ops.matmul_forward(out.data(), MatrixIn(nullptr, bits.data()), x.data(), nullptr,
                                  4, 4, 4),
               std::logic_error);
  EXPECT_THROW(ops.embedding_forward_bits(out.data(), tok.data(), bits.data(), 0, 4, 4, 4),
               std::logic_error);
}

TEST_F(Bf16OperandsTest, LinearOnValuesIsTheCpusOwn) {
  const int N = 70, IC = 96, OC = 130;
  for (bool bf16_valued : {false, true}) {
    SCOPED_TRACE(bf16_valued ? "bf16 values" : "f32 values");
    auto make = [&](std::size_t n, unsigned seed) {
      return bf16_valued ? rounded_normals(n, seed) : trident::testing::random_normals(n, seed);
    };
    const auto x = make(std::size_t(N) * IC, 1), w = make(std::size_t(OC) * IC, 2);
    const auto dy = make(std::size_t(N) * OC, 3), b = make(OC, 4);
    auto run = [&](Bf16Operands& ops) {
      std::vector<float> y(std::size_t(N) * OC), dx(std::size_t(N) * IC, 0.5f),
          dw(std::size_t(OC) * IC, 0.25f), db(OC, 0.0f);
      ops.matmul_forward(y.data(), MatrixIn(x.data()).as_bf16_values(bf16_valued), w.data(),
                         b.data(), N, IC, OC);
      ops.matmul_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), N, IC,
                          OC, InputGrad::add);
      y.insert(y.end(), dx.begin(), dx.end());
      y.insert(y.end(), dw.begin(), dw.end());
      y.insert(y.end(), db.begin(), db.end());
      return bits_of(y);
    };
    EXPECT_EQ(run(rounded_), run(*own_));
  }
}

TEST_F(Bf16OperandsTest, F32AttentionIsTheCpusOwn) {
  const int B = 2, T = 33, C = 32, NH = 4;
  const auto qkv = trident::testing::random_normals(std::size_t(B) * T * 3 * C, 5);
  const auto dout = trident::testing::random_normals(std::size_t(B) * T * C, 6);
  auto run = [&](Bf16Operands& ops) {
    std::vector<float> out(dout.size()), lse(std::size_t(B) * NH * T), dqkv(qkv.size(), 0.0f);
    ops.attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, false);
    ops.attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C,
                           NH, false);
    out.insert(out.end(), dqkv.begin(), dqkv.end());
    return bits_of(out);
  };
  EXPECT_EQ(run(rounded_), run(*own_));
}

TEST_F(Bf16OperandsTest, RoundedOpsWithoutBitsAreTheCpusOwn) {
  const int N = 40, C = 48, V = 77;
  const auto x = trident::testing::random_normals(std::size_t(N) * C, 7);
  const auto w = trident::testing::random_normals(C, 8), b = trident::testing::random_normals(C, 9);
  const auto logits = trident::testing::random_normals(std::size_t(N) * V, 10);
  std::vector<std::int32_t> targets(N);
  for (int n = 0; n < N; ++n) targets[n] = n * 13 % V;
  auto run = [&](Bf16Operands& ops, DType store) {
    std::vector<float> out(x.size()), mean(N), rstd(N);
    ops.layernorm_forward_rounded(out.data(), nullptr, mean.data(), rstd.data(), x.data(),
                                  w.data(), b.data(), N, C);
    std::vector<float> h = x, g(x.size()), gx = x, dg(x.size()), dy = out;
    ops.gelu_forward_rounded(g.data(), nullptr, h.data(), nullptr, h.size(), store);
    ops.gelu_backward_rounded(dg.data(), nullptr, gx.data(), nullptr, dy.data(), gx.size(), store);
    std::vector<float> mx(N), packed(2 * N), losses(N), dlogits = logits;
    be_->xent_stats(mx.data(), packed.data(), logits.data(), targets.data(), N, V, V);
    ops.xent_finish_rounded(losses.data(), dlogits.data(), logits.data(), mx.data(),
                            packed.data(), targets.data(), 0, N, V, V, 1.0f / N);
    for (const auto* v : {&mean, &rstd, &h, &g, &dg, &losses, &dlogits})
      out.insert(out.end(), v->begin(), v->end());
    return bits_of(out);
  };
  for (DType store : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(store));
    EXPECT_EQ(run(rounded_, store), run(*own_, store));
  }
}
