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
  double latency_us = 0;  // alpha of one step of a ring
};

struct Cluster {
  std::string name;
  int gpus_per_node = 8;
  double peak_tflops_16 = 0;  // dense bf16/fp16 per GPU
  double peak_tflops_32 = 0;  // dense fp32 per GPU
  double hbm_gib = 0;         // memory per GPU
  double hbm_gbps = 0;        // its bandwidth
  Link intra;                 // inside a node (NVLink / NVSwitch)
  Link inter;                 // between nodes, per GPU (its NIC)
  // (GEMM FLOPs, fraction of peak) by increasing size; interpolated in log size.
  std::vector<std::pair<double, double>> gemm_efficiency;
  // The host, for ZeRO-Offload and ZeRO-Infinity plans (0: unknown, not planned).
  double host_gib = 0;   // memory per node
  double host_gbps = 0;  // its bandwidth per node: the host's AdamW is bound by it
  double pcie_gbps = 0;  // host <-> GPU per GPU, each direction
  double nvme_gbps = 0;  // node-local NVMe per node, each direction
  double comm_efficiency = 0.8;  // fraction of a link's bandwidth collectives reach
  bool shared_node = false;      // this-cpu: a node's ranks split its cores and bandwidth

  double peak_tflops(Precision dtype) const {
    return dtype == Precision::fp32 ? peak_tflops_32 : peak_tflops_16;
  }
  double gemm_fraction(double flops) const;  // of peak, for one GEMM of `flops`
};

// dgx-a100-80gb, dgx-a100-40gb, dgx-h100, dgx-h200, this-cpu; or a .toml file.
// Throws InputError naming the choices or the file's bad key.
Cluster find_cluster(const std::string& name_or_file);
std::vector<std::string> builtin_cluster_names();
Cluster parse_cluster_toml(const std::string& text, const std::string& origin);
// This machine as one "GPU" per node: fp32 GEMM rate measured at a few sizes.
Cluster calibrate_this_cpu();

}  // namespace trident
