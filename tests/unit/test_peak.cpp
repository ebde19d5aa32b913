// The CPU peak the MFU is measured against: known for this machine's ISA, and
// an upper bound on what a large GEMM actually reaches (so MFU <= 100%), up
// to a clock that moves between two timings.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "compute/backend.hpp"
#include "compute/cpu/cpu_peak.hpp"
#include "compute/cpu/gemm_library.hpp"
#include "core/timer.hpp"

using namespace trident;

namespace {

// FLOP/s of the fastest of a few rounds of a linear layer's GEMM with every
// input equal to x and every weight 0.25: the machine's best, not its noise.
double best_linear_rate(ComputeBackend& be, float x, int n, std::vector<float>& out) {
  const int reps = 4;
  std::vector<float> a(std::size_t(n) * n, x), w(std::size_t(n) * n, 0.25f);
  out.assign(a.size(), 0.0f);
  be.matmul_forward(out.data(), a.data(), w.data(), nullptr, n, n, n);  // warm up
  double best = 1e30;
  for (int round = 0; round < 5; ++round) {
    const double t0 = now_seconds();
    for (int r = 0; r < reps; ++r)
      be.matmul_forward(out.data(), a.data(), w.data(), nullptr, n, n, n);
    best = std::min(best, now_seconds() - t0);
  }
  return 2.0 * n * n * n * reps / best;
}

}  // namespace

TEST(Peak, CpuPeakBoundsAMeasuredGemm) {
  auto be = make_cpu_backend(1);
  const int n = 640;
  std::vector<float> out;
  // 0.3 is no bf16 value: the f32 GEMM.
  const double achieved = best_linear_rate(*be, 0.3f, n, out);
  // Asked right after, so a busy core slows the backend's own GEMM alike.
  const double peak = be->info().peak_flops(DType::f32);
  ASSERT_GT(peak, 0.0) << be->info().peak_source(DType::f32);
  EXPECT_EQ(be->info().peak_flops(DType::f16), peak);  // fp16 values are computed in f32
  // The peak is FMA chains in registers over their CPU time, which a GEMM
  // (loads, packing) cannot match; 10% leaves room for the clock to move
  // between the two timings. A peak from the wrong ISA misses by 2x or more.
  EXPECT_LE(achieved, 1.10 * peak) << "a GEMM ran faster than the peak: "
                                   << be->info().peak_source(DType::f32);
  EXPECT_NEAR(out[0], 0.3 * 0.25 * n, 1e-4 * n);
}

// More threads than cores: each thread's rate is its core's rate while it
// runs, so the sum grows with the threads and the caller (rank_peak) divides
// it by the oversubscription. Timed by the wall clock, the sum would stay at
// the cores' rate and the divided peak would fall short of what a rank gets.
TEST(Peak, FmaRateIsPerThreadCpuTime) {
  const CpuPeak peak = detect_cpu_peak();
  const double one = measure_fma_flops(peak, 1);
  if (one == 0) GTEST_SKIP() << "no FMA loop for " << peak.isa;
  const int threads = 2 * int(std::thread::hardware_concurrency());
  const double many = measure_fma_flops(peak, threads);
  EXPECT_GT(many / threads, 0.6 * one);
  EXPECT_LT(many / threads, 1.6 * one);
  // At least the ISA's rate at half the reported clock: the loop keeps both
  // FMA units busy (a loop bound by latency would reach a fraction of this).
  EXPECT_GT(one, 0.5 * peak.flops_per_core);
}

TEST(Peak, Bf16PeakBoundsAGemmOnBf16Values) {
  auto be = make_cpu_backend(1);
  const int n = 640;
  std::vector<float> out;
  // 0.5 and 0.25 are bf16 values: a bf16 run's linears take the bf16 kernels.
  const double achieved = best_linear_rate(*be, 0.5f, n, out);
  const double peak = be->info().peak_flops(DType::bf16);
  EXPECT_GE(peak, be->info().peak_flops(DType::f32));
  EXPECT_LE(achieved, 1.25 * peak) << "a bf16 GEMM ran faster than the peak: "
                                   << be->info().peak_source(DType::bf16);
  EXPECT_FLOAT_EQ(out[0], 0.5f * 0.25f * n);
}

TEST(Peak, NarrowGemmKernelsOnAWideCpuAreAWarning) {
  EXPECT_NE(gemm_kernel_mismatch(4, "sse41 kernels", "AVX-512"), "");
  EXPECT_NE(gemm_kernel_mismatch(8, "avx2 kernels", "AVX-512"), "");
  EXPECT_NE(gemm_kernel_mismatch(4, "sse41 kernels", "AVX2+FMA"), "");
  EXPECT_EQ(gemm_kernel_mismatch(16, "avx512_core kernels", "AVX-512"), "");
  EXPECT_EQ(gemm_kernel_mismatch(8, "avx2 kernels", "AVX2+FMA"), "");
  EXPECT_EQ(gemm_kernel_mismatch(4, "sse41 kernels", "SSE"), "");
  EXPECT_NE(gemm_kernel_mismatch(4, "sse41 kernels", "AVX-512").find("sse41"), std::string::npos);
}

// The kernels the GEMM library dispatches to are as wide as the CPU's vectors
// (no environment variable left them narrower on this machine).
TEST(Peak, GemmLibraryUsesTheCpusWidestVectors) {
  EXPECT_GE(gemm_kernel_lanes(), isa_lanes(detect_cpu_peak().isa)) << gemm_library_description();
  EXPECT_NE(gemm_library_description().find("oneDNN"), std::string::npos);
}
