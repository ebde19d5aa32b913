// Causal attention forward + backward: the flash kernels the CPU backend runs
// (compute/cpu/attention.cpp), f32 and with bf16 tile products, against the
// (T, T) probability-matrix kernels they replaced
// (tests/support/attention_reference.hpp), at a few sequence lengths, batch
// 2, 4 heads of 64. Also ring attention's block kernels (context
// parallelism) against the whole-sequence kernel on the same work: one
// sequence as the ring computes a rank's own block, forward and backward
// apart.
//   build/perf/bench_attention [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
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


// One sequence (batch 1) of qkv (T, 3C) as a block of ring attention's
// views: queries, keys and values in the same rows.
trident::AttentionBlock sequence_block(int T, const float* qkv, float* out, float* lse) {
  const std::size_t row = 3 * kC, Tz = T;
  trident::AttentionBlock b;
  b.batch = 1, b.width = kC, b.heads = kNH;
  b.q = {qkv, row, Tz * row};
  b.k = {qkv + kC, row, Tz * row};
  b.v = {qkv + 2 * kC, row, Tz * row};
  b.out = {out, std::size_t(kC), Tz * kC};
  b.lse = lse, b.lse_head = Tz, b.lse_seq = Tz * kNH;
  return b;
}

// Causal attention over the sequence as the ring computes a rank's own block
// (parallel/context/ring_attention.cpp): each half's diagonal block and the
// second half against the first. The same work as the whole-sequence kernel.
template <class Fn>
void each_half_block(int T, Fn&& fn) {
  const int half = T / 2;
  fn(0, 0, half, true);
  fn(half, 0, half, false);
  fn(half, half, half, true);
}

// Whole-sequence attention (kind 0) or the ring's blocks (kind 1) over one
// sequence of T: forward (pass 0) or backward (pass 1) alone.
void BM_AttentionOnSameWork(benchmark::State& st) {
  const int T = int(st.range(0)), pass = int(st.range(1)), kind = int(st.range(2));
  auto& be = backend();
  const auto qkv = random_normals(std::size_t(T) * 3 * kC, 1);
  const auto dout = random_normals(std::size_t(T) * kC, 2);
  std::vector<float> out(dout.size()), lse(std::size_t(kNH) * T), dqkv(qkv.size());
  const auto b = sequence_block(T, qkv.data(), out.data(), lse.data());
  const std::size_t row = 3 * kC, Tz = T;
  const trident::AttentionBlockGrads g{
      {dout.data(), std::size_t(kC), Tz * kC},
      {dqkv.data(), row, Tz * row},
      {dqkv.data() + kC, row, Tz * row},
      {dqkv.data() + 2 * kC, row, Tz * row}};
  auto forward = [&] {
    if (kind == 0) return be.attention_forward(out.data(), lse.data(), qkv.data(), 1, T, kC, kNH);
    std::fill(out.begin(), out.end(), 0.f);
    std::fill(lse.begin(), lse.end(), -std::numeric_limits<float>::infinity());
    each_half_block(T, [&](int qi, int ki, int n, bool causal) {
      auto x = b.from(qi, ki);
      x.queries = n, x.keys = n, x.causal = causal;
      be.attention_block_forward(x);
    });
  };
  auto backward = [&] {
    if (kind == 0)
      return be.attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(),
                                   1, T, kC, kNH);
    each_half_block(T, [&](int qi, int ki, int n, bool causal) {
      auto x = b.from(qi, ki);
      x.queries = n, x.keys = n, x.causal = causal;
      be.attention_block_backward(x, g.from(qi, ki));
    });
  };
  forward();
  for (auto _ : st) {
    if (pass == 0) forward();
    else backward();
    benchmark::DoNotOptimize(out.data());
    benchmark::DoNotOptimize(dqkv.data());
  }
  if (kind == 1 && pass == 0) {  // how far the blocks' output is from the whole kernel's
    std::vector<float> whole(out.size()), whole_lse(lse.size());
    be.attention_forward(whole.data(), whole_lse.data(), qkv.data(), 1, T, kC, kNH);
    float gap = 0;
    for (std::size_t i = 0; i < out.size(); ++i) gap = std::max(gap, std::abs(out[i] - whole[i]));
    st.counters["max_gap"] = gap;
  }
}

}  // namespace

BENCHMARK(BM_FlashAttention)
    ->ArgsProduct({{256, 512, 1024, 2048}, {0, 1}})
    ->ArgNames({"T", "bf16"})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ProbabilityMatrixAttention)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AttentionOnSameWork)
    ->ArgsProduct({{4096}, {0, 1}, {0, 1}})
    ->ArgNames({"T", "backward", "blocks"})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
