// Memory per rank before running: built from the same tables and ZeRO plan the
// trainer allocates from, so every category is exact (padding included), not a
// formula. Model state is the shards; ZeRO's gather and reduce slots and f32
// working copies are working buffers (MemCategory::buffers).
#pragma once
#include <array>
#include <cstddef>

#include "grid/grid.hpp"
#include "io/deck.hpp"
#include "memory/ledger.hpp"
#include "parallel/pipeline/stage_plan.hpp"

namespace trident {

struct MemoryEstimate {
  std::array<double, kMemCategories> bytes{};  // per category, as the ledger counts them
  double parameters = 0;                       // elements of the global model
  double runtime = 0;  // process RSS beyond the arenas, CPU backend (runtime_rss_bytes)
  // Host memory outside the arenas: offload "cpu"'s optimizer state and
  // gradient copy, offloaded parameter shards.
  double host = 0;
  double swap = 0;  // offload "nvme": the swap files' bytes in offload.nvme_path
  // Device memory outside the arenas on the CUDA backend, on the rank holding
  // the head (cuda_operand_copy_bytes); the CPU backend makes none.
  double device_copies = 0;
  // checkpoint.async: host memory a background save holds (async_staging_bytes).
  double checkpoint_staging = 0;
  // parallel.post_validation: the undo copy of a step taken ahead, counted
  // in bytes[optimizer] (the ledger's category for it) and shown apart.
  double undo_copy = 0;
  double model_state() const;                  // params + grads + optimizer
  double peak() const;                         // every arena is live for the whole step
  double device_peak() const { return peak() + device_copies; }  // what the device holds
  // CPU backend: the arenas are host memory too.
  double process_rss() const { return peak() + runtime + host + checkpoint_staging; }
};

// checkpoint.async, while a save drains: the staging through which device
// memory and offloaded state (optimizer state, ZeRO-3 parameter shards) are
// read (staging_mb, at least one 2 MiB piece) and what an optimizer step may
// copy instead of waiting (up to staging_mb), neither more than the rank's
// saved state (`e`: its parameters, optimizer state, offloaded state).
// Nothing is copied whole at the save. 0 without checkpoint.async.
double async_staging_bytes(const Deck& deck, const MemoryEstimate& e, int zero_stage);

// Process RSS outside the arenas, measured rather than derived (CPU backend;
// the measurements are in perf/RESULTS.md, "ZeRO memory"):
//  - kRuntimeBaseBytes: the binary, Open MPI, oneDNN, HDF5 and their state,
//    peak RSS less the arenas;
//  - the MPI reduce-scatter's exchange (comm/mpi_ops.hpp) receives the
//    other dp - 1 ranks' blocks of this rank's slice before it sums them;
//    ZeRO keeps kRecvBuffers reductions in flight, so every rank holds up to
//    2 x (dp - 1) / dp of the largest unit's gradients.
constexpr double kRuntimeBaseBytes = 40.0 * 1024 * 1024;
// The CUDA backend's bf16 copies of bf16-valued f32 GEMM operands in a bf16
// run (CudaBackend::bits_of), which it keeps for reuse: the head's, the
// logits' gradient (2 B x tokens x padded vocabulary shard) and the final
// norm's output (2 B x tokens x d_model), tokens being the micro-batch's
// sequences times the rank's `rows` of each (seq_len / cp: a context rank
// holds its chunks only). With every block recomputed, the
// recomputed inputs of the weight GEMMs are packed too (the widest the MLP's
// hidden, local_ff wide); with zero bubble's separate weight pass, the kept
// output gradients (up to local_ff). Op scratch (1 MiB or more) aside, a
// run's "kernel scratch"; 0 for other precisions.
double cuda_operand_copy_bytes(const GptConfig& m, int micro_batch, int rows, int local_vocab,
                               Precision dtype, int local_ff = 0, bool recomputed = false,
                               bool weight_pass = false);
double reduce_scatter_temporaries(int dp, double largest_unit_bytes);

// The view of pipeline rank `pipe_rank` at tensor and data rank 0 (the first
// vocabulary shard and, in gather mode, the optimizer's holder) for the deck's
// layout and the given ZeRO stage, activations for as many micro-batches as
// its schedule keeps. Rank 0 keeps the most activations in flight.
MemoryEstimate estimate_memory(const Deck& deck, const GridShape& shape, int zero_stage,
                               int pipe_rank = 0);
// The same for the rank `plan` describes (make_stage_plan; a trainer's plan()).
MemoryEstimate estimate_memory(const Deck& deck, const GridShape& shape, int zero_stage,
                               const StagePlan& plan);

// The ZeRO paper's model-state bytes per rank for Ψ parameters on N data ranks:
// mixed precision keeps 2 + 2 + 12 bytes per parameter (fp16 weights and
// gradients, fp32 master, momentum, variance); fp32 keeps 4 + 4 + 8.
double zero_paper_bytes(double psi, int dp, int zero_stage, bool mixed_precision);

}  // namespace trident
