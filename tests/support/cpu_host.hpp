// A 2-core host as `this-cpu` describes one, built by hand so the planner's
// figures in tests do not depend on a calibration; `gib` of memory shared by
// the ranks.
#pragma once
#include "plan/cluster.hpp"

namespace trident::testing {

inline Cluster cpu_host(double gib = 16) {
  Cluster c;
  c.name = "host";
  c.gpus_per_node = 2;
  c.shared_node = c.fp16_as_fp32 = c.f32_activations = true;
  c.peak_tflops_16 = 2.0;
  c.peak_tflops_32 = 0.4;
  c.gemm_efficiency = {{1e6, 0.3}, {1e9, 0.9}};
  c.gemm_efficiency_32 = {{1e6, 0.5}, {1e9, 1.0}};
  c.hbm_gbps = 30;
  c.elementwise_gbps = 20;
  c.hbm_gib = c.host_gib = gib;
  c.intra = c.inter = {3, 20};
  return c;
}

}  // namespace trident::testing
