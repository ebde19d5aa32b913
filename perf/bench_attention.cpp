// Causal attention forward + backward: the flash kernels the CPU backend runs
// (compute/cpu/attention.cpp), f32 and with bf16 tile products, against the
// (T, T) probability-matrix kernels they replaced
// (tests/support/attention_reference.hpp), at a few sequence lengths, batch
// 2, 4 heads of 64.
//   build/perf/bench_attention [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "compute/bf16_operands.hpp"
#include "support/attention_reference.hpp"
#include "support/random_values.hpp"

namespace {

using trident::testing::random_normals;

constexpr int kB = 2, kC = 256, kNH = 4;  // hs = 64

trident::ComputeBackend& backend() {  // sets the thread counts the training run uses
  static auto be = trident::make_cpu_backend(0);
  return *be;
}

void BM_FlashAttention(benchmark::State& st) {
  const int T = int(st.range(0));
  const bool bf16 = st.range(1) != 0;
  trident::Bf16OperandsFor be(backend());  // the bf16 tiles where the CPU has them
  auto qkv = random_normals(std::size_t(kB) * T * 3 * kC, 1);
  auto dout = random_normals(std::size_t(kB) * T * kC, 2);
  std::vector<std::uint16_t> qkv16, dout16;
  if (bf16) {  // as a bf16 run holds them: rounded values and their bits
    qkv16.resize(qkv.size()), dout16.resize(dout.size());
    be->round_to_bf16(qkv.data(), qkv16.data(), qkv.data(), qkv.size());
    be->round_to_bf16(dout.data(), dout16.data(), dout.data(), dout.size());
  }
  const trident::MatrixIn q{qkv.data(), bf16 ? qkv16.data() : nullptr};
  const trident::MatrixIn d{dout.data(), bf16 ? dout16.data() : nullptr};
  std::vector<float> out(dout.size()), lse(std::size_t(kB) * kNH * T), dqkv(qkv.size());
  for (auto _ : st) {
    be->attention_forward(out.data(), lse.data(), q, kB, T, kC, kNH, bf16);
    be->attention_backward(dqkv.data(), d, q, out.data(), lse.data(), kB, T, kC, kNH, bf16);
    benchmark::DoNotOptimize(dqkv.data());
  }
  st.counters["saved_bytes"] = double(lse.size() * sizeof(float));
}

void BM_ProbabilityMatrixAttention(benchmark::State& st) {
  const int T = int(st.range(0));
  backend();
  const auto qkv = random_normals(std::size_t(kB) * T * 3 * kC, 1);
  const auto dout = random_normals(std::size_t(kB) * T * kC, 2);
  std::vector<float> out(dout.size()), att(std::size_t(kB) * kNH * T * T), datt(att.size()),
      dqkv(qkv.size());
  for (auto _ : st) {
    trident::reference::attention_forward(out.data(), att.data(), qkv.data(), kB, T, kC, kNH);
    trident::reference::attention_backward(dqkv.data(), datt.data(), dout.data(), qkv.data(),
                                           att.data(), kB, T, kC, kNH);
    benchmark::DoNotOptimize(dqkv.data());
  }
  st.counters["saved_bytes"] = double(att.size() * sizeof(float));
}

}  // namespace

BENCHMARK(BM_FlashAttention)
    ->ArgsProduct({{256, 512, 1024, 2048}, {0, 1}})
    ->ArgNames({"T", "bf16"})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ProbabilityMatrixAttention)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
