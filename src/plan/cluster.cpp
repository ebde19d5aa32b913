#include "plan/cluster.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <toml++/toml.h>

#include "compute/cpu/blas.hpp"
#include "compute/cpu/gemm_bf16.hpp"
#include "compute/cpu/kernels.hpp"
#include "compute/cpu/vector_ops.hpp"
#include "core/error.hpp"

namespace trident {

double Cluster::gemm_fraction(double flops, Precision dtype) const {
  const auto& c = gemm_in_fp32(dtype) && !gemm_efficiency_32.empty() ? gemm_efficiency_32
                                                                      : gemm_efficiency;
  if (c.empty()) return 1.0;
  if (flops <= c.front().first) return c.front().second;
  if (flops >= c.back().first) return c.back().second;
  std::size_t i = 1;
  while (c[i].first < flops) ++i;
  const double x = std::log(flops / c[i - 1].first) / std::log(c[i].first / c[i - 1].first);
  return c[i - 1].second + x * (c[i].second - c[i - 1].second);
}

namespace {

// Fitted on the rows of perf/plan/published_runs.csv marked "fit" (median
// error there to about zero): large GEMMs reach ~75% of peak end to end, a
// 1 GFLOP one 40%.
const std::vector<std::pair<double, double>> kGpuGemmCurve = {
    {1e8, 0.16}, {1e9, 0.40}, {1e10, 0.63}, {1e11, 0.72}, {1e12, 0.75}};

Cluster dgx(const std::string& name, double peak16, double peak32, double gib, double hbm,
            double nvlink, double nic, double host_gib, double host_gbps, double pcie,
            int nics_per_group) {
  Cluster c;
  c.name = name;
  c.gpus_per_node = 8;
  c.peak_tflops_16 = peak16;
  c.peak_tflops_32 = peak32;
  c.hbm_gib = gib;
  c.hbm_gbps = hbm;
  c.intra = {nvlink, 10};
  c.inter = {nic, 20};
  c.gemm_efficiency = kGpuGemmCurve;
  c.host_gib = host_gib;
  c.host_gbps = host_gbps;
  c.pcie_gbps = pcie;
  c.nics_per_group = nics_per_group;
  return c;
}

// Vendor data sheets: A100 SXM (312 TFLOP/s bf16, NVLink 3 at 300 GB/s per
// direction, one 200 Gb/s HDR NIC per GPU); H100/H200 SXM (989 TFLOP/s bf16,
// NVLink 4 at 450 GB/s, one 400 Gb/s NDR NIC per GPU). Hosts: DGX A100, two
// EPYC 7742 (8 channels of DDR4-3200 each: 409.6 GB/s), 1 TB (320 GB system)
// or 2 TB, PCIe 4 x16 per GPU (32 GB/s); DGX H100/H200, two Xeon 8480C
// (8 channels of DDR5-4800 each: 614.4 GB/s), 2 TB, PCIe 5 x16 (64 GB/s).
// Their NVMe's rate is not on the data sheets: a site TOML gives nvme_gbps.
// Across nodes, a group's members on one node drove (fitted on the rows of
// published_runs.csv marked "fit") one NIC between them on DGX A100
// (Narayanan et al.'s ZeRO-3 runs without model parallelism, DeepSpeed 2021)
// and all eight on DGX H100 (llm-foundry's FSDP runs, 2023): the software of
// each generation as much as its fabric.
Cluster builtin(const std::string& name) {
  if (name == "dgx-a100-80gb") return dgx(name, 312, 19.5, 80, 2039, 300, 25, 2048, 409.6, 32, 1);
  if (name == "dgx-a100-40gb") return dgx(name, 312, 19.5, 40, 1555, 300, 25, 1024, 409.6, 32, 1);
  if (name == "dgx-h100") return dgx(name, 989, 67, 80, 3350, 450, 50, 2048, 614.4, 64, 8);
  if (name == "dgx-h200")
    return dgx(name, 989, 67, 141e9 / (1 << 30), 4800, 450, 50, 2048, 614.4, 64, 8);
  if (name == "this-cpu") return calibrate_this_cpu();
  return {};
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::vector<std::string> builtin_cluster_names() {
  return {"dgx-a100-80gb", "dgx-a100-40gb", "dgx-h100", "dgx-h200", "this-cpu"};
}

Cluster parse_cluster_toml(const std::string& text, const std::string& origin) {
  toml::table t;
  try {
    t = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    throw InputError(fmt::format("{}:{}: TOML syntax error: {}", origin,
                                 e.source().begin.line, e.description()));
  }
  auto need = [&](const char* key) {
    const auto v = t[key].value<double>();
    if (!v || *v <= 0)
      throw InputError(fmt::format("{}: cluster key '{}' is required and must be a positive "
                                   "number", origin, key));
    return *v;
  };
  Cluster c;
  c.name = t["name"].value_or(std::filesystem::path(origin).stem().string());
  c.gpus_per_node = int(need("gpus_per_node"));
  c.peak_tflops_16 = need("peak_tflops_bf16");
  c.peak_tflops_32 = t["peak_tflops_fp32"].value_or(c.peak_tflops_16 / 16);
  c.hbm_gib = need("hbm_gib");
  c.hbm_gbps = need("hbm_gbps");
  c.intra = {need("intra_node_gbps"), t["intra_node_latency_us"].value_or(10.0)};
  c.inter = {need("inter_node_gbps"), t["inter_node_latency_us"].value_or(20.0)};
  c.comm_efficiency = t["comm_efficiency"].value_or(c.comm_efficiency);
  c.collective_step_us = t["collective_step_us"].value_or(c.collective_step_us);
  c.comm_overlap = t["comm_overlap"].value_or(c.comm_overlap);
  c.nics_per_group = int(t["nics_per_group"].value_or(double(c.gpus_per_node)));
  if (c.nics_per_group < 1 || c.comm_overlap < 0 || c.comm_overlap > 1)
    throw InputError(fmt::format("{}: nics_per_group must be at least 1 and comm_overlap in "
                                 "[0, 1]", origin));
  auto optional = [&](const char* key) {
    const double v = t[key].value_or(0.0);
    if (v < 0)
      throw InputError(fmt::format("{}: cluster key '{}' must be a positive number (or left out: "
                                   "then offload to it is not planned)", origin, key));
    return v;
  };
  c.host_gib = optional("host_gib");
  c.host_gbps = optional("host_gbps");
  c.pcie_gbps = optional("pcie_gbps");
  c.nvme_gbps = optional("nvme_gbps");
  c.gemm_efficiency = kGpuGemmCurve;
  if (const toml::array* curve = t["gemm_efficiency"].as_array()) {
    c.gemm_efficiency.clear();
    for (const auto& point : *curve) {
      const toml::array* p = point.as_array();
      const auto flops = p && p->size() == 2 ? (*p)[0].value<double>() : std::nullopt;
      const auto frac = p && p->size() == 2 ? (*p)[1].value<double>() : std::nullopt;
      if (!flops || !frac || *frac <= 0 || *frac > 1 ||
          (!c.gemm_efficiency.empty() && *flops <= c.gemm_efficiency.back().first))
        throw InputError(fmt::format("{}: gemm_efficiency must list [flops, fraction of peak] "
                                     "pairs by increasing flops, fractions in (0, 1]", origin));
      c.gemm_efficiency.emplace_back(*flops, *frac);
    }
  }
  return c;
}

Cluster find_cluster(const std::string& name) {
  if (name.size() > 5 && name.substr(name.size() - 5) == ".toml") {
    std::ifstream in(name);
    if (!in) throw InputError(fmt::format("--cluster {}: cannot open the file", name));
    std::stringstream ss;
    ss << in.rdbuf();
    return parse_cluster_toml(ss.str(), name);
  }
  Cluster c = builtin(name);
  if (c.name.empty())
    throw InputError(fmt::format("--cluster {}: not a cluster; use one of {} or a .toml file",
                                 name, fmt::join(builtin_cluster_names(), ", ")));
  return c;
}

namespace {

// `amount` a second done by `work` (amount a call), the best of three rounds
// of 50 ms: stolen time only slows one down. 0 when `work` returns false.
template <class Work>
double best_rate(double amount, Work work) {
  double best = 0;
  for (int round = 0; round < 3; ++round) {
    int reps = 0;
    const auto t0 = std::chrono::steady_clock::now();
    do {
      if (!work()) return 0;
      ++reps;
    } while (seconds_since(t0) < 0.05);
    best = std::max(best, amount * reps / seconds_since(t0));
  }
  return best;
}

// One core, one thread: TFLOP/s of `gemm` (m, n) at token-major shapes
// (M = 4N = 4K, as a layer's linears). Empty when `gemm` has no kernel for them.
template <class Gemm>
std::vector<std::pair<double, double>> gemm_rates(Gemm gemm) {
  std::vector<std::pair<double, double>> rates;
  for (int n : {32, 64, 128, 256, 512}) {
    const double flops = 2.0 * 4 * n * n * n;
    const double rate = best_rate(flops / 1e12, [&] { return gemm(4 * n, n); });
    if (rate == 0) return {};
    rates.emplace_back(flops, rate);
  }
  return rates;
}

// GB/s of the element-wise kernels a layer runs (layer norm, GELU, residual
// add) over a micro-batch's activations (1024 tokens x 256) on one thread.
double elementwise_gbps() {
  const int n = 1024, c = 256;
  const std::size_t nc = std::size_t(n) * c;
  std::vector<float> x(4 * nc, 0.5f), y(4 * nc), w(c, 1.0f), b(c, 0.0f), stats(2 * n);
  const double bytes = sizeof(float) * (2.0 * nc + 8.0 * nc + 3.0 * nc);
  return best_rate(bytes / 1e9, [&] {
    cpu::layernorm_forward(y.data(), stats.data(), stats.data() + n, x.data(), w.data(), b.data(),
                           n, c);
    cpu::gelu_forward(y.data(), x.data(), 4 * nc);
    cpu::add(y.data(), x.data(), y.data(), nc);
    return true;
  });
}

// The rates as fractions of the best of them, which stands in for peak; returns it.
double to_fractions(std::vector<std::pair<double, double>>& rates) {
  double best = 0;
  for (const auto& r : rates) best = std::max(best, r.second);
  for (auto& r : rates) r.second /= best;
  return best;
}

}  // namespace

// Ranks split the host's cores, so the host's rate is cores times one core's
// (a multithreaded GEMM of a few tiles would understate a layer's many). bf16
// runs multiply on the bf16 kernels (AMX tiles where the CPU has them) from
// operands already packed as bf16 bits, as the model hands its weights and
// rounded activations to them; fp16 runs multiply in f32.
Cluster calibrate_this_cpu() {
  Cluster c;
  c.name = "this-cpu";
  c.gpus_per_node = int(std::max(1u, std::thread::hardware_concurrency()));
  c.shared_node = true;
  c.fp16_as_fp32 = c.f32_activations = true;
  const int caller_threads = omp_get_max_threads();
  omp_set_num_threads(1);
  std::vector<float> a(4 * 512 * 512, 1.0f), b(512 * 512, 1.0f), out(a.size());
  std::vector<std::uint16_t> a16(a.size(), 0x3f80), b16(b.size(), 0x3f80);  // bf16 ones
  c.gemm_efficiency_32 = gemm_rates([&](int m, int n) {
    cpu::gemm(false, true, m, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, out.data(), n);
    return true;
  });
  c.gemm_efficiency = gemm_rates([&](int m, int n) {
    return cpu::gemm_bf16(false, true, m, n, n, {nullptr, a16.data()}, n, {nullptr, b16.data()},
                          n, false, out.data(), n);
  });
  c.elementwise_gbps = elementwise_gbps();
  omp_set_num_threads(caller_threads);
  c.peak_tflops_32 = to_fractions(c.gemm_efficiency_32) * c.gpus_per_node;
  if (c.gemm_efficiency.empty()) {  // no bf16 kernels: bf16 values multiply in f32 too
    c.gemm_efficiency = c.gemm_efficiency_32;
    c.peak_tflops_16 = c.peak_tflops_32;
  } else {
    c.peak_tflops_16 = to_fractions(c.gemm_efficiency) * c.gpus_per_node;
  }
  // Memory bandwidth: a large copy, read + write, best of three.
  std::vector<float> src(std::size_t(1) << 24, 1.0f), dst(src.size());
  for (int round = 0; round < 3; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    std::copy(src.begin(), src.end(), dst.begin());
    c.hbm_gbps = std::max(c.hbm_gbps, 2.0 * double(src.size()) * sizeof(float) / seconds_since(t0) / 1e9);
  }
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kib = 0;
  while (meminfo >> key >> kib && key != "MemTotal:") {}
  c.hbm_gib = kib / (1024.0 * 1024.0);
  // The host is the device: "offloaded" state stays in the same memory and
  // its copies are copies within it.
  c.host_gib = c.hbm_gib;
  c.host_gbps = c.pcie_gbps = c.hbm_gbps;
  // Ranks of one host talk through MPI's shared memory. Its nonblocking
  // collectives (1-25 MiB, 2-8 ranks on 2 cores) reached 0.2-3 GB/s bus
  // bandwidth here, about a tenth of one core's copy rate: copies in and out,
  // reductions, and ranks that wait for a core.
  c.intra = {c.hbm_gbps / 10, 20};
  c.inter = c.intra;
  c.collective_step_us = c.intra.latency_us;
  return c;
}

}  // namespace trident
