// The backend's matmul against the raw oneDNN call it wraps, on the linear
// layers of the default deck (N = micro_batch * seq_len tokens) and of GPT-2
// 124M. A ratio near 1 means the seam costs nothing; the bias add and the
// backward's bias reduction are what the backend adds on top.
//   build/perf/bench_gemm [--benchmark_filter=...]
#include <benchmark/benchmark.h>
#include <dnnl.h>

#include <random>
#include <vector>

#include "compute/backend.hpp"
#include "support/random_values.hpp"

namespace {

using trident::testing::random_normals;

struct Shape {
  int N, IC, OC;
};

trident::ComputeBackend& backend() {
  static auto be = trident::make_cpu_backend(0);
  return *be;
}

void set_counters(benchmark::State& st, const Shape& s, double passes) {
  const double flops = 2.0 * s.N * s.IC * s.OC * passes;
  st.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate,
                                             benchmark::Counter::OneK::kIs1000);
}

Shape shape_of(const benchmark::State& st) {
  return {int(st.range(0)), int(st.range(1)), int(st.range(2))};
}

void BM_BackendMatmulForward(benchmark::State& st) {
  const Shape s = shape_of(st);
  const auto x = random_normals(std::size_t(s.N) * s.IC, 1);
  const auto w = random_normals(std::size_t(s.OC) * s.IC, 1);
  auto b = random_normals(s.OC, 1);
  std::vector<float> y(std::size_t(s.N) * s.OC);
  for (auto _ : st) backend().matmul_forward(y.data(), x.data(), w.data(), b.data(), s.N, s.IC, s.OC);
  set_counters(st, s, 1);
}

void BM_RawSgemmForward(benchmark::State& st) {
  const Shape s = shape_of(st);
  const auto x = random_normals(std::size_t(s.N) * s.IC, 1);
  const auto w = random_normals(std::size_t(s.OC) * s.IC, 1);
  std::vector<float> y(std::size_t(s.N) * s.OC);
  backend();  // same thread settings as the backend run
  for (auto _ : st)
    dnnl_sgemm('N', 'T', s.N, s.OC, s.IC, 1.0f, x.data(), s.IC, w.data(), s.IC, 0.0f,
               y.data(), s.OC);
  set_counters(st, s, 1);
}

void BM_BackendMatmulBackward(benchmark::State& st) {
  const Shape s = shape_of(st);
  const auto x = random_normals(std::size_t(s.N) * s.IC, 1);
  const auto w = random_normals(std::size_t(s.OC) * s.IC, 1);
  auto dy = random_normals(std::size_t(s.N) * s.OC, 1);
  std::vector<float> dx(x.size()), dw(w.size()), db(s.OC);
  for (auto _ : st)
    backend().matmul_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), s.N,
                              s.IC, s.OC, trident::InputGrad::write);
  set_counters(st, s, 2);
}

void BM_RawSgemmBackward(benchmark::State& st) {
  const Shape s = shape_of(st);
  const auto x = random_normals(std::size_t(s.N) * s.IC, 1);
  const auto w = random_normals(std::size_t(s.OC) * s.IC, 1);
  auto dy = random_normals(std::size_t(s.N) * s.OC, 1);
  std::vector<float> dx(x.size()), dw(w.size());
  backend();
  for (auto _ : st) {
    dnnl_sgemm('N', 'N', s.N, s.IC, s.OC, 1.0f, dy.data(), s.OC, w.data(), s.IC, 1.0f,
               dx.data(), s.IC);
    dnnl_sgemm('T', 'N', s.OC, s.IC, s.N, 1.0f, dy.data(), s.OC, x.data(), s.IC, 1.0f,
               dw.data(), s.IC);
  }
  set_counters(st, s, 2);
}

// {tokens, in, out}: default deck (micro_batch 4 x seq 128, d_model 128) and GPT-2 124M rows.
void shapes(benchmark::internal::Benchmark* b) {
  b->Args({512, 128, 384})->Args({512, 128, 512})->Args({512, 512, 128})->Args({512, 128, 257});
  b->Args({1024, 768, 2304})->Args({1024, 768, 3072})->Args({1024, 3072, 768});
  b->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_BackendMatmulForward)->Apply(shapes);
BENCHMARK(BM_RawSgemmForward)->Apply(shapes);
BENCHMARK(BM_BackendMatmulBackward)->Apply(shapes);
BENCHMARK(BM_RawSgemmBackward)->Apply(shapes);

}  // namespace

BENCHMARK_MAIN();
