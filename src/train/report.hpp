// What a run prints: the start-up banner, a line per step, and at the end the
// per-phase timers (min / avg / max over ranks), memory by category and one
// figure-of-merit line.
#pragma once
#include <string>

#include "grid/grid.hpp"
#include "io/deck.hpp"
#include "memory/ledger.hpp"
#include "train/trainer.hpp"

namespace trident {

struct Throughput {
  double tokens_per_s = 0;
  double mfu = -1;  // fraction of peak; negative when the peak is unknown
};

// The MFU denominator per rank: system.peak_tflops when set (an override),
// else the backend's peak for the deck's precision (0: unknown), of which
// ranks that together run more threads than their node's cores get a share.
struct RankPeak {
  double flops = 0;
  std::string source;  // for the banner
};
RankPeak rank_peak(const Deck& deck, const ComputeBackend& backend, int ranks_on_node,
                   int threads);
Throughput throughput(const Deck& deck, int world_size, double tokens_per_step, double seconds,
                      double peak_flops_per_rank);
std::string format_duration(double seconds);
std::string format_step_line(const StepStats& s, int steps, const Throughput& tp,
                             std::size_t peak_bytes, double eta_s);

// Collective over the world: prints on rank 0.
void report_phase_timers(Grid& grid, const PhaseTimes& t, double wall_s);
// host_offload: this rank's offloaded state in host memory (GradEngine::host_bytes).
void report_memory(Grid& grid, const MemoryLedger& ledger, const ComputeBackend& backend,
                   double host_offload, double checkpoint_staging = 0);
// Calls and payload bytes per step of each process group (max over ranks).
void report_communication(Grid& grid, int steps);

std::size_t peak_rss_bytes();

}  // namespace trident
