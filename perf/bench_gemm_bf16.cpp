// The bf16 GEMM a bf16 run's linears use (gemm_bf16: the AMX tile kernel
// where the CPU has AMX) against one oneDNN matmul over the whole product on
// the same bf16 bits, its best case (dense operands, primitive made once), on
// the three GEMMs of each linear of GPT-2 124M's block at 4096 tokens:
// forward (x W^T), input gradient (dy W), weight gradient (dy^T x).
//   build/perf/bench_gemm_bf16 [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <cstdint>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "compute/backend.hpp"
#include "compute/cpu/gemm_bf16.hpp"
#include "core/half.hpp"
#include "support/random_values.hpp"

namespace {

constexpr int kTokens = 4096;

struct Gemm {
  bool ta, tb;
  int M, N, K;
  std::vector<std::uint16_t> A, B;
  std::vector<float> C;
};

// Pass 0: forward, 1: input gradient, 2: weight gradient, of a linear IC -> OC.
Gemm make_gemm(const benchmark::State& st) {
  static auto be = trident::make_cpu_backend(0);  // the training run's thread settings
  const int pass = int(st.range(0)), IC = int(st.range(1)), OC = int(st.range(2));
  Gemm g;
  if (pass == 0) g = {false, true, kTokens, OC, IC, {}, {}, {}};
  if (pass == 1) g = {false, false, kTokens, IC, OC, {}, {}, {}};
  if (pass == 2) g = {true, false, OC, IC, kTokens, {}, {}, {}};
  auto bits = [](std::size_t n, unsigned seed) {
    std::vector<std::uint16_t> out;
    for (float x : trident::testing::random_normals(n, seed))
      out.push_back(trident::f32_to_bf16(x));
    return out;
  };
  g.A = bits(std::size_t(g.M) * g.K, 1), g.B = bits(std::size_t(g.K) * g.N, 2);
  g.C.assign(std::size_t(g.M) * g.N, 0.0f);
  return g;
}

void set_flops(benchmark::State& st, const Gemm& g) {
  st.counters["FLOP/s"] = benchmark::Counter(2.0 * g.M * g.N * g.K,
                                             benchmark::Counter::kIsIterationInvariantRate,
                                             benchmark::Counter::OneK::kIs1000);
}

void BM_TridentBf16Gemm(benchmark::State& st) {
  Gemm g = make_gemm(st);
  const int lda = g.ta ? g.M : g.K, ldb = g.tb ? g.K : g.N;
  for (auto _ : st)
    trident::cpu::gemm_bf16(g.ta, g.tb, g.M, g.N, g.K, {nullptr, g.A.data()}, lda,
                            {nullptr, g.B.data()}, ldb, false, g.C.data(), g.N);
  set_flops(st, g);
}

void BM_OnednnBf16Matmul(benchmark::State& st) {
  Gemm g = make_gemm(st);
  using dnnl::memory;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(eng);
  const memory::desc a({g.M, g.K}, memory::data_type::bf16,
                       g.ta ? memory::dims{1, g.M} : memory::dims{g.K, 1});
  const memory::desc b({g.K, g.N}, memory::data_type::bf16,
                       g.tb ? memory::dims{1, g.K} : memory::dims{g.N, 1});
  const memory::desc c({g.M, g.N}, memory::data_type::f32, memory::dims{g.N, 1});
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), eng);
  const dnnl::matmul matmul(pd);
  memory am(a, eng, g.A.data()), bm(b, eng, g.B.data()), cm(c, eng, g.C.data());
  for (auto _ : st) {
    matmul.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    stream.wait();
  }
  st.SetLabel(pd.impl_info_str());
  set_flops(st, g);
}

// (pass, IC, OC) of qkv, the attention projection, fc and the MLP projection.
void shapes(benchmark::internal::Benchmark* b) {
  for (int pass = 0; pass < 3; ++pass)
    for (auto [ic, oc] : {std::pair{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}})
      b->Args({pass, ic, oc});
  b->ArgNames({"pass", "IC", "OC"})->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_TridentBf16Gemm)->Apply(shapes);
BENCHMARK(BM_OnednnBf16Matmul)->Apply(shapes);
BENCHMARK_MAIN();
