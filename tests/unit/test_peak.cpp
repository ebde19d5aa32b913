// The CPU peak the MFU is measured against: known for this machine's ISA, and
// an upper bound on what a large GEMM actually reaches (so MFU <= 100%), up
// to the noise between two timings of the fastest GEMM.
#include <gtest/gtest.h>

#include <vector>

#include "compute/backend.hpp"
#include "compute/cpu/cpu_peak.hpp"
#include "compute/cpu/gemm_library.hpp"
#include "core/timer.hpp"

using namespace trident;

TEST(Peak, CpuPeakBoundsAMeasuredGemm) {
  auto be = make_cpu_backend(1);
  const int n = 640, reps = 4;
  std::vector<float> a(std::size_t(n) * n, 0.5f), w(std::size_t(n) * n, 0.25f), out(a.size());
  be->matmul_forward(out.data(), a.data(), w.data(), nullptr, n, n, n);  // warm up
  double best = 1e30;  // the fastest of a few rounds: the machine's best, not its noise
  for (int round = 0; round < 5; ++round) {
    const double t0 = now_seconds();
    for (int r = 0; r < reps; ++r)
      be->matmul_forward(out.data(), a.data(), w.data(), nullptr, n, n, n);
    best = std::min(best, now_seconds() - t0);
  }
  const double achieved = 2.0 * n * n * n * reps / best;
  // Asked right after, so a busy core slows the backend's own GEMM alike.
  const double peak = be->peak_flops(DType::f32);
  ASSERT_GT(peak, 0.0) << be->peak_source();
  EXPECT_EQ(be->peak_flops(DType::bf16), peak);  // 16-bit values are computed in f32
  // 25%: two timings of the fastest GEMM on a shared machine; a peak from the
  // wrong ISA misses by 2x or more.
  EXPECT_LE(achieved, 1.25 * peak) << "a GEMM ran faster than the peak: " << be->peak_source();
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
