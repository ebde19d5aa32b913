// What the CPU GEMMs run on, for the banner and its warning.
#pragma once
#include <string>

namespace trident {

// e.g. "oneDNN 2.6.3, avx512_core_amx kernels"
std::string gemm_library_description();

// Vector width, in floats, of the kernels the GEMM library dispatches to.
int gemm_kernel_lanes();

// A warning when the GEMM kernels are narrower than the CPU's vectors (an
// ISA cap such as ONEDNN_MAX_CPU_ISA left in the environment), else "".
std::string gemm_kernel_mismatch(int kernel_lanes,
                                 const std::string &kernel_name,
                                 const std::string &cpu_isa);

// Vector width, in floats, of an ISA name from detect_cpu_peak().
int isa_lanes(const std::string &isa);

} // namespace trident
