// The CPU's peak FP32 rate, from the machine: cores x vector lanes x 2 (an
// FMA is two FLOPs) x 2 FMA units x the highest clock the OS reports. Two
// FMA units and the highest clock make it an upper bound (some parts have
// one unit, and most run below it under load), so MFU against it never
// exceeds 100% and errs low.
#pragma once
#include <string>

namespace trident {

struct CpuPeak {
  double flops_per_core = 0;  // FP32 FLOP/s
  std::string isa;            // "AVX-512", "AVX2+FMA", "SSE"
  double ghz = 0;
};

CpuPeak detect_cpu_peak();

// FP32 FLOP/s of `threads` threads running independent FMA chains in
// registers, all at once (they share the package's clock budget), each over
// its own CPU time: what the cores reach at the clock they run now, which no
// GEMM can beat. 0 where the ISA has no FMA loop here.
double measure_fma_flops(const CpuPeak& peak, int threads);

}  // namespace trident
