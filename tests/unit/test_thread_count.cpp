// A run is bit-reproducible whatever the thread count (docs/design.md,
// Determinism): the backend's GEMMs, reductions and optimizer give the same
// bits on 1 and on 2 threads, on the shapes of the decks.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "compute/backend.hpp"
#include "core/half.hpp"
#include "support/random_values.hpp"

using namespace trident;

namespace {

using trident::testing::random_normals;

// Runs op on a backend of each thread count and returns what it wrote.
std::vector<std::vector<float>> on_threads(
    const std::function<std::vector<float>(ComputeBackend&)>& op) {
  std::vector<std::vector<float>> out;
  for (int threads : {1, 2}) {
    auto be = make_cpu_backend(threads);
    out.push_back(op(*be));
  }
  return out;
}

void expect_same_bits(const std::vector<std::vector<float>>& r) {
  ASSERT_EQ(r[0].size(), r[1].size());
  EXPECT_EQ(std::memcmp(r[0].data(), r[1].data(), r[0].size() * sizeof(float)), 0);
}

}  // namespace

TEST(ThreadCount, LinearLayerForwardAndBackward) {
  struct Shape {
    int N, IC, OC;
  };
  for (const Shape s : {Shape{512, 128, 384}, Shape{512, 512, 128}, Shape{1024, 512, 2048},
                        Shape{1024, 2048, 512}, Shape{512, 128, 257}}) {
    const auto x = random_normals(std::size_t(s.N) * s.IC, 1);
    const auto w = random_normals(std::size_t(s.OC) * s.IC, 2);
    const auto b = random_normals(s.OC, 3), dy = random_normals(std::size_t(s.N) * s.OC, 4);
    expect_same_bits(on_threads([&](ComputeBackend& be) {
      std::vector<float> y(std::size_t(s.N) * s.OC), dx(x.size()), dw(w.size()), db(s.OC);
      be.matmul_forward(y.data(), x.data(), w.data(), b.data(), s.N, s.IC, s.OC);
      be.matmul_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), s.N, s.IC,
                         s.OC, InputGrad::add);
      y.insert(y.end(), dx.begin(), dx.end());
      y.insert(y.end(), dw.begin(), dw.end());
      y.insert(y.end(), db.begin(), db.end());
      return y;
    }));
  }
}

TEST(ThreadCount, LinearLayerOnBf16Values) {
  // bf16-valued operands take the bf16 GEMMs (compute/cpu/gemm_bf16.hpp).
  auto bf16_valued = [](std::size_t n, unsigned seed) {
    auto v = random_normals(n, seed);
    for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
    return v;
  };
  const int N = 1024, IC = 512, OC = 2048;
  const auto x = bf16_valued(std::size_t(N) * IC, 1), w = bf16_valued(std::size_t(OC) * IC, 2);
  const auto dy = bf16_valued(std::size_t(N) * OC, 4);
  expect_same_bits(on_threads([&](ComputeBackend& be) {
    std::vector<float> y(std::size_t(N) * OC), dx(x.size()), dw(w.size());
    be.matmul_forward(y.data(), x.data(), w.data(), nullptr, N, IC, OC);
    be.matmul_backward(dx.data(), dw.data(), nullptr, dy.data(), x.data(), w.data(), N, IC, OC,
                       InputGrad::add);
    y.insert(y.end(), dx.begin(), dx.end());
    y.insert(y.end(), dw.begin(), dw.end());
    return y;
  }));
}

TEST(ThreadCount, LayerNormSumOfSquaresAndAdamW) {
  const int N = 512, C = 384;
  const auto x = random_normals(std::size_t(N) * C, 5);
  const auto w = random_normals(C, 6);
  const auto b = random_normals(C, 7);
  const auto dy = random_normals(x.size(), 8);
  expect_same_bits(on_threads([&](ComputeBackend& be) {
    std::vector<float> y(x.size()), mean(N), rstd(N), dx(x.size()), dw(C), db(C);
    be.layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    be.layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(),
                          mean.data(), rstd.data(), N, C);
    auto p = x, m = std::vector<float>(x.size()), v = m;
    be.adamw(p.data(), dy.data(), m.data(), v.data(), p.size(), 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f,
             0.1f, 0.05f, 0.5f, nullptr);
    y.insert(y.end(), dx.begin(), dx.end());
    y.insert(y.end(), dw.begin(), dw.end());
    y.insert(y.end(), p.begin(), p.end());
    const double ss = be.sum_squares(x.data(), x.size());
    float ss_bits[2];
    std::memcpy(ss_bits, &ss, sizeof ss);
    y.insert(y.end(), ss_bits, ss_bits + 2);
    return y;
  }));
}
