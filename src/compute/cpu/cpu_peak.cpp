#include "compute/cpu/cpu_peak.hpp"

#include <omp.h>

#include <algorithm>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "compute/cpu/gemm_library.hpp"

namespace trident {
namespace {

// The highest clock any core reports: cpufreq's maximum where the kernel
// exposes it, else /proc/cpuinfo's "cpu MHz" (a VM's nominal clock).
double highest_ghz() {
  double khz = 0;
  std::ifstream maxf("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
  if (maxf >> khz && khz > 0) return khz / 1e6;
  double mhz = 0;
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);) {
    if (line.rfind("cpu MHz", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon != std::string::npos) mhz = std::max(mhz, std::stod(line.substr(colon + 1)));
  }
  return mhz / 1e3;
}

#if defined(__x86_64__) || defined(__i386__)
// Independent FMA chains, enough to cover two units' latency (2 x 4-6
// cycles), held in registers: the core's FMA throughput and nothing else.
constexpr int kChains = 16;
constexpr long kRounds = 1 << 21;  // ~1 M cycles a thread at two FMAs a cycle

// One body for both widths: target attributes do not pass through templates.
#define TRIDENT_FMA_CHAINS(V, FMA, SET, FIRST)                                            \
  V acc[kChains];                                                                         \
  for (int c = 0; c < kChains; ++c) acc[c] = SET(1.0f + 1e-3f * c);                       \
  const V m = SET(0.999999f), a = SET(1e-6f); /* near 1: no denormals, no overflow */    \
  for (long r = 0; r < kRounds; ++r)                                                      \
    _Pragma("GCC unroll 16") for (int c = 0; c < kChains; ++c) acc[c] = FMA(acc[c], m, a); \
  float sum = 0;                                                                          \
  for (int c = 0; c < kChains; ++c) sum += FIRST(acc[c]);                                 \
  return sum; /* returned, so the chains are not optimised away */

__attribute__((target("avx512f"))) float chains512() {
  TRIDENT_FMA_CHAINS(__m512, _mm512_fmadd_ps, _mm512_set1_ps, _mm512_cvtss_f32)
}
__attribute__((target("avx2,fma"))) float chains256() {
  TRIDENT_FMA_CHAINS(__m256, _mm256_fmadd_ps, _mm256_set1_ps, _mm256_cvtss_f32)
}
#undef TRIDENT_FMA_CHAINS
#endif

}  // namespace

double measure_fma_flops(const CpuPeak& peak, int threads) {
#if defined(__x86_64__) || defined(__i386__)
  const int lanes = isa_lanes(peak.isa);  // 4: SSE, no FMA loop here
  float (*chains)() = lanes == 16 ? chains512 : lanes == 8 ? chains256 : nullptr;
  if (!chains || threads < 1) return 0;
  // Each thread's own CPU time, not the wall clock: ranks that share cores
  // (or a busy neighbour) stretch the wall time, not the rate a core runs at
  // while it runs this thread.
  std::vector<double> best(threads, 1e30);
  volatile float sink = 0;
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    for (int round = 0; round < 4; ++round) {  // the first warms the clock and the vector unit
      timespec t0{}, t1{};
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
      const float s = chains();
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
      const double took = double(t1.tv_sec - t0.tv_sec) + 1e-9 * double(t1.tv_nsec - t0.tv_nsec);
      if (round > 0 && took > 0) best[t] = std::min(best[t], took);
#pragma omp critical
      sink = sink + s;
    }
  }
  double flops = 0;
  for (double b : best) flops += double(kRounds) * kChains * lanes * 2 / b;
  return flops;
#else
  (void)peak, (void)threads;
  return 0;
#endif
}

CpuPeak detect_cpu_peak() {
  CpuPeak p;
  int lanes = 4;  // SSE: 4 floats, a multiply and an add port, no FMA
  int flops_per_lane = 2;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) lanes = 16, flops_per_lane = 4, p.isa = "AVX-512";
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    lanes = 8, flops_per_lane = 4, p.isa = "AVX2+FMA";
  else p.isa = "SSE";
#else
  lanes = 4, flops_per_lane = 4, p.isa = "NEON";  // 2 FMA pipes x 128-bit, as on current ARM servers
#endif
  p.ghz = highest_ghz();
  p.flops_per_core = p.ghz * 1e9 * lanes * flops_per_lane;
  return p;
}

}  // namespace trident
