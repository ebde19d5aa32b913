// The machine a plan is for: per-GPU peak, memory and links, and how close to
// peak its GEMMs run at a given size. Built-in DGX nodes, a TOML file, or
// this CPU measured by a short GEMM benchmark.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "io/deck_choices.hpp"

namespace trident {

struct Link {
  double gbps = 0;        // GB/s one GPU can drive on it (bus bandwidth, nccl-tests' busbw)
  double latency_us = 0;  // alpha of one step of a ring (of a message, point to point)
  bool across_nodes = false;
};

struct Cluster {
  std::string name;
  int gpus_per_node = 8;
  double peak_tflops_16 = 0;  // dense bf16/fp16 per GPU
  double peak_tflops_32 = 0;  // dense fp32 per GPU
  bool fp16_as_fp32 = false;  // this-cpu: fp16 values are multiplied in f32
  double hbm_gib = 0;         // memory per GPU
  double hbm_gbps = 0;        // its bandwidth
  Link intra;                 // inside a node (NVLink / NVSwitch)
  Link inter;                 // between nodes, per GPU (its NIC)
  // (GEMM FLOPs, fraction of peak) by increasing size; interpolated in log size.
  std::vector<std::pair<double, double>> gemm_efficiency;
  std::vector<std::pair<double, double>> gemm_efficiency_32;  // fp32's, where it differs
  // The host, for ZeRO-Offload and ZeRO-Infinity plans (0: unknown, not planned).
  double host_gib = 0;   // memory per node
  double host_gbps = 0;  // its bandwidth per node: the host's AdamW is bound by it
  double pcie_gbps = 0;  // host <-> GPU per GPU, each direction
  double nvme_gbps = 0;  // node-local NVMe per node, each direction
  double comm_efficiency = 0.8;  // fraction of a link's bandwidth collectives reach
  // NICs the members of one group on a node drive together across nodes (at
  // most one each): NCCL's channels, one per NIC, where the software keeps
  // them all busy. Built-in clusters: fitted (cluster.cpp).
  int nics_per_group = 8;
  // One step of a collective whose ranks span nodes: the hop's latency and
  // the wait for the step's slowest rank. Fitted on the rows of
  // perf/plan/published_runs.csv marked "fit" (on a grid of 5 and 20 us).
  double collective_step_us = 5;
  // Of the shorter of a collective and the compute it runs beside, the part
  // hidden: the rest contends with the compute for memory bandwidth and SMs,
  // or waits on a unit not yet gathered. Fitted on the same rows.
  double comm_overlap = 0.6;
  bool shared_node = false;      // this-cpu: a node's ranks split its cores and bandwidth
  // this-cpu: Trident's CPU backend keeps activations as f32 working copies in
  // every precision, so its element-wise passes move 4 bytes an element.
  bool f32_activations = false;
  // this-cpu: GB/s of its element-wise kernels on one thread (0: they run at hbm_gbps).
  double elementwise_gbps = 0;

  bool gemm_in_fp32(Precision dtype) const {
    return dtype == Precision::fp32 || (dtype == Precision::fp16 && fp16_as_fp32);
  }
  double peak_tflops(Precision dtype) const {
    return gemm_in_fp32(dtype) ? peak_tflops_32 : peak_tflops_16;
  }
  // Of the precision's peak, for one GEMM of `flops`.
  double gemm_fraction(double flops, Precision dtype) const;
};

// dgx-a100-80gb, dgx-a100-40gb, dgx-h100, dgx-h200, this-cpu; or a .toml file.
// Throws InputError naming the choices or the file's bad key.
Cluster find_cluster(const std::string& name_or_file);
std::vector<std::string> builtin_cluster_names();
Cluster parse_cluster_toml(const std::string& text, const std::string& origin);
// This machine as one "GPU" per node: the f32 and bf16 GEMM rates measured at
// a few sizes.
Cluster calibrate_this_cpu();

}  // namespace trident
