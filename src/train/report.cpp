#include "train/report.hpp"

#include <fmt/format.h>
#include <sys/resource.h>

#include <array>
#include <string>
#include <thread>
#include <vector>

#include "model/activation_policy.hpp"
#include "model/gpt_config.hpp"

namespace trident {

RankPeak rank_peak(const Deck& deck, const ComputeBackend& backend, int ranks_on_node,
                   int threads) {
  if (deck.system.peak_tflops > 0) return {deck.system.peak_tflops * 1e12, "system.peak_tflops"};
  const DType dtype = precision_dtype(deck.precision.dtype);
  RankPeak p{backend.info().peak_flops(dtype), backend.info().peak_source(dtype)};
  const int cores = int(std::thread::hardware_concurrency());
  const int wanted = ranks_on_node * threads;
  if (backend.info().name() == "cpu" && cores > 0 && wanted > cores) {
    p.flops *= double(cores) / wanted;
    p.source += fmt::format("; {} ranks x {} threads share {} cores", ranks_on_node, threads, cores);
  }
  return p;
}

Throughput throughput(const Deck& deck, int world, double tokens_per_step, double seconds,
                      double peak) {
  Throughput tp;
  if (seconds <= 0) return tp;
  tp.tokens_per_s = tokens_per_step / seconds;
  if (peak > 0) tp.mfu = tp.tokens_per_s * gpt_flops_per_token(deck.model) / (peak * world);
  return tp;
}

std::string format_duration(double s) {
  if (s < 0) s = 0;
  const long t = long(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, (t % 3600) / 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

std::string format_step_line(const StepStats& s, int steps, const Throughput& tp,
                             std::size_t peak_bytes, double eta_s) {
  const int width = int(fmt::format("{}", steps).size());
  return fmt::format("step {:>{}}/{} | loss {:.4f} | lr {:.2e} | norm {:.3f} | {:.0f} tok/s | {} | "
                     "mem {} | {:.0f} ms | ETA {}",
                     s.step + 1, width, steps, s.loss, s.lr, s.grad_norm, tp.tokens_per_s,
                     tp.mfu >= 0 ? fmt::format("MFU {:.1f}%", 100 * tp.mfu) : "MFU n/a",
                     format_bytes(double(peak_bytes)), 1e3 * s.seconds, format_duration(eta_s)) +
         // fp16: the scale this step used; a skipped step says so.
         (s.loss_scale != 1.0 || s.skipped ? fmt::format(" | scale {:g}", s.loss_scale) : "") +
         (s.skipped ? " | SKIPPED: gradients overflowed, weights unchanged" : "");
}

void report_phase_timers(Grid& grid, const PhaseTimes& t, double wall_s) {
  // The ring's rows (cp > 1 only) are parts of forward and backward.
  const std::array<std::pair<const char*, double>, 9> phases{
      {{"forward", t.forward},
       {"backward", t.backward},
       {"comm", t.comm},
       {"optimizer", t.optimizer},
       {"data", t.data},
       {"eval", t.eval},
       {"ring attention compute", t.ring_compute},
       {"ring transfers exposed", t.ring_exposed},
       {"total", wall_s}}};
  std::array<double, 9> mn{}, mx{}, sum{};
  for (std::size_t i = 0; i < phases.size(); ++i) mn[i] = mx[i] = sum[i] = phases[i].second;
  Communicator& w = grid.world();
  w.all_reduce(mn.data(), mn.size(), DType::f64, ReduceOp::min);
  w.all_reduce(mx.data(), mx.size(), DType::f64, ReduceOp::max);
  w.all_reduce(sum.data(), sum.size(), DType::f64, ReduceOp::sum);
  if (!grid.is_root()) return;
  fmt::print("timers (s) over {} ranks    {:>10} {:>10} {:>10} {:>8}\n", w.size(), "min", "avg",
             "max", "max/avg");
  for (std::size_t i = 0; i < phases.size(); ++i) {
    if (mx[i] == 0 && std::string(phases[i].first).rfind("ring", 0) == 0) continue;
    const double avg = sum[i] / w.size();
    fmt::print("  {:<26} {:>10.3f} {:>10.3f} {:>10.3f} {:>8.2f}\n", phases[i].first, mn[i], avg,
               mx[i], avg > 0 ? mx[i] / avg : 1.0);
  }
}

void report_memory(Grid& grid, const MemoryLedger& ledger, const ComputeBackend& backend,
                   double host_offload, double checkpoint_staging) {
  std::array<double, kMemCategories + 5> peak{};
  for (int i = 0; i < kMemCategories; ++i) peak[i] = double(ledger.peak(MemCategory(i)));
  peak[kMemCategories] = double(ledger.peak_total());
  peak[kMemCategories + 1] = double(peak_rss_bytes());
  peak[kMemCategories + 2] = double(backend.kernel_scratch_peak());
  peak[kMemCategories + 3] = host_offload;
  peak[kMemCategories + 4] = checkpoint_staging;  // host memory of background saves
  grid.world().all_reduce(peak.data(), peak.size(), DType::f64, ReduceOp::max);
  if (!grid.is_root()) return;
  std::string line = "memory per rank (peak, max over ranks):";
  for (int i = 0; i < kMemCategories; ++i)
    line += fmt::format(" {} {},", mem_category_name(MemCategory(i)), format_bytes(peak[i]));
  const std::string host = peak[kMemCategories + 3] > 0
      ? fmt::format(", offloaded to host memory {}", format_bytes(peak[kMemCategories + 3]))
      : "";
  const std::string staging = peak[kMemCategories + 4] > 0
      ? fmt::format(", async checkpoint staging {}", format_bytes(peak[kMemCategories + 4]))
      : "";
  fmt::print("{} arenas {}, kernel scratch {}{}{}, process RSS {}\n", line,
             format_bytes(peak[kMemCategories]), format_bytes(peak[kMemCategories + 2]), host,
             staging, format_bytes(peak[kMemCategories + 1]));
}

void report_communication(Grid& grid, int steps) {
  // The pipeline's two communicators (activations, gradients) count as one
  // group; gradients travel on data x context, counted as data.
  const std::array<std::pair<const char*, std::vector<Communicator*>>, 5> groups{
      {{"data", {&grid.data(), &grid.data_context()}}, {"tensor", {&grid.tensor()}},
       {"context", {&grid.context()}},
       {"pipeline", {&grid.pipeline(), &grid.pipeline_grads()}}, {"world", {&grid.world()}}}};
  std::array<double, 15> v{};  // calls, payload bytes, bus bytes per group
  for (std::size_t i = 0; i < groups.size(); ++i)
    for (Communicator* comm : groups[i].second) {
      std::uint64_t calls = 0;
      for (auto c : comm->stats().calls) calls += c;
      v[3 * i] += double(calls) / steps;
      v[3 * i + 1] += double(comm->stats().total_bytes()) / steps;
      v[3 * i + 2] += comm->stats().total_bus() / steps;
    }
  grid.world().all_reduce(v.data(), v.size(), DType::f64, ReduceOp::max);
  if (!grid.is_root()) return;
  std::string line = "communication per step per rank (max over ranks; payload, bytes sent):";
  for (std::size_t i = 0; i < groups.size(); ++i)
    if (v[3 * i] > 0)
      line += fmt::format(" {} {:.0f} calls {} sent {},", groups[i].first, v[3 * i],
                          format_bytes(v[3 * i + 1]), format_bytes(v[3 * i + 2]));
  line.pop_back();
  fmt::print("{}\n", line);
}

std::size_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return std::size_t(u.ru_maxrss) * 1024;
}

}  // namespace trident
