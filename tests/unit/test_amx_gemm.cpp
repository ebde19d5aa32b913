// The AMX GEMM sums each entry of C one way: C's start value, then the
// products in steps of 32 along K, in order. So neither the thread count nor
// the caller's split of K changes a bit, which is what lets layouts and
// restarts reproduce a bf16 run. Its accuracy against a double reference is
// test_gemm_bf16's (the CPU's bf16 GEMM runs on it where AMX exists).
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "compute/cpu/amx_gemm.hpp"
#include "core/half.hpp"
#include "support/random_values.hpp"

using namespace trident;

namespace {

std::vector<std::uint16_t> random_bits(std::size_t n, unsigned seed) {
  std::vector<std::uint16_t> out;
  for (float x : trident::testing::random_normals(n, seed)) out.push_back(f32_to_bf16(x));
  return out;
}

struct Operands {
  bool ta, tb;
  int M, N, K;
  std::vector<std::uint16_t> A, B;
  int lda() const { return ta ? M : K; }
  int ldb() const { return tb ? K : N; }
  // op(A)'s columns [k0, k0 + K) and op(B)'s rows: where they start.
  const std::uint16_t* a_at(int k0) const { return A.data() + (ta ? std::size_t(k0) * M : k0); }
  const std::uint16_t* b_at(int k0) const { return B.data() + (tb ? k0 : std::size_t(k0) * N); }
};

Operands make(bool ta, bool tb, int M, int N, int K) {
  return {ta, tb, M, N, K, random_bits(std::size_t(M) * K, 1), random_bits(std::size_t(K) * N, 2)};
}

std::vector<float> run(const Operands& o, int k0, int K, std::vector<float> C, bool accumulate,
                       bool parallel) {
  cpu::amx_gemm(o.ta, o.tb, o.M, o.N, K, o.a_at(k0), o.lda(), o.b_at(k0), o.ldb(), accumulate,
                C.data(), o.N, nullptr, parallel);
  return C;
}

}  // namespace

// M 1100 spans 35 row panels, K 1000 four K blocks and a tail, N 300 a
// partial column block; the wide shape (M 100: 4 panels) leaves a thread of
// three with one panel. Two to four threads and the single-thread entry
// (attention's tiles) give one thread's bits.
TEST(AmxGemm, BitsDoNotDependOnTheThreadCount) {
  if (!cpu::amx_available()) GTEST_SKIP() << "no AMX tiles on this CPU";
  const int threads = omp_get_max_threads();
  for (const auto [M, N] : {std::pair{1100, 300}, std::pair{100, 1100}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "M " << M << " N " << N << " ta " << ta << " tb " << tb);
        const auto C0 = trident::testing::random_normals(std::size_t(M) * N, 3);
        const Operands o = make(ta, tb, M, N, 1000);
        omp_set_num_threads(1);
        const auto one = run(o, 0, o.K, C0, true, true);
        for (int team : {2, 3, 4}) {
          omp_set_num_threads(team);
          EXPECT_EQ(run(o, 0, o.K, C0, true, true), one) << team << " threads";
        }
        omp_set_num_threads(threads);
        EXPECT_EQ(run(o, 0, o.K, C0, true, false), one);
        EXPECT_NE(one, C0);
      }
}

// Accumulating continues the sum: K in two calls, split at a multiple of 32,
// gives the bits of one call (a micro-batch's weight gradient added to the
// last one's is the GEMM over both micro-batches' tokens).
TEST(AmxGemm, AccumulatingContinuesTheSum) {
  if (!cpu::amx_available()) GTEST_SKIP() << "no AMX tiles on this CPU";
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "ta " << ta << " tb " << tb);
      const Operands o = make(ta, tb, 200, 72, 1344);
      const std::vector<float> zeros(std::size_t(o.M) * o.N, 0.0f);
      const auto whole = run(o, 0, o.K, zeros, false, true);
      const auto first = run(o, 0, 416, zeros, false, true);
      EXPECT_EQ(run(o, 416, o.K - 416, first, true, true), whole);
      EXPECT_NE(first, whole);
      EXPECT_EQ(run(o, 0, 0, whole, true, true), whole);  // no K: C as it was
      EXPECT_EQ(run(o, 0, 0, whole, false, true), zeros);
    }
}
