#include "compute/cpu/cpu_peak.hpp"

#include <algorithm>
#include <fstream>
#include <string>

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

}  // namespace

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
