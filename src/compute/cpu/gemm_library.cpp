#include "compute/cpu/gemm_library.hpp"

#include <dnnl.h>
#include <fmt/format.h>

namespace trident {
namespace {

const char *isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
  case dnnl_cpu_isa_sse41:
    return "sse41";
  case dnnl_cpu_isa_avx:
    return "avx";
  case dnnl_cpu_isa_avx2:
    return "avx2";
  case dnnl_cpu_isa_avx2_vnni:
    return "avx2_vnni";
  case dnnl_cpu_isa_avx512_core:
    return "avx512_core";
  case dnnl_cpu_isa_avx512_core_vnni:
    return "avx512_core_vnni";
  case dnnl_cpu_isa_avx512_core_bf16:
    return "avx512_core_bf16";
  case dnnl_cpu_isa_avx512_core_amx:
    return "avx512_core_amx";
  default:
    return "generic";
  }
}

} // namespace

std::string gemm_library_description() {
  const dnnl_version_t *v = dnnl_version();
  return fmt::format("oneDNN {}.{}.{}, {} kernels", v->major, v->minor,
                     v->patch, isa_name(dnnl_get_effective_cpu_isa()));
}

int gemm_kernel_lanes() {
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  // The avx512 values share the avx512_core bits; avx2_vnni does not.
  if ((isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core)
    return 16;
  if ((isa & dnnl_cpu_isa_avx2) == dnnl_cpu_isa_avx2)
    return 8;
  return 4;
}

int isa_lanes(const std::string &isa) {
  if (isa == "AVX-512")
    return 16;
  if (isa == "AVX2+FMA")
    return 8;
  return 4;
}

std::string gemm_kernel_mismatch(int kernel_lanes,
                                 const std::string &kernel_name,
                                 const std::string &cpu_isa) {
  if (kernel_lanes >= isa_lanes(cpu_isa))
    return "";
  return fmt::format(
      "the GEMMs run {} on a CPU with {}: several times slower than this CPU "
      "allows (is ONEDNN_MAX_CPU_ISA set?)",
      kernel_name, cpu_isa);
}

} // namespace trident
