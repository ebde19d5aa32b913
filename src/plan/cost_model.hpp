// Time and memory of one training step for one layout, before running it:
// compute from FLOPs at the cluster's GEMM efficiency for those shapes,
// collectives' bytes on the link each group uses, hidden in part behind the
// compute beside them, and their ring or tree steps; the schedule's bubble,
// and recompute's extra forward. Memory is the estimator's exact model
// state plus Korthikanti et al. (2022) activations per recompute mode.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "grid/grid.hpp"
#include "io/deck.hpp"
#include "plan/estimate.hpp"
#include "plan/cluster.hpp"

namespace trident {

struct Prediction {
  GridShape shape;
  int virtual_stages = 1, micro_batch = 1, micro_batches = 1, zero_stage = 0;
  bool sequence_parallel = false;
  Recompute recompute = Recompute::none;
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  OffloadTarget offload = OffloadTarget::none;  // offload.optimizer
  double offload_ratio = 1;                      // offload.ratio (cpu)

  double step_s = 0;
  double tokens_per_s_per_gpu = 0;
  double model_tflops = 0;     // per GPU: the model's FLOPs (6N + attention) over the step
  double hardware_tflops = 0;  // per GPU: with the recomputed forward
  double mfu = 0;              // model_tflops over peak
  // Seconds of the step each part accounts for, on the slowest pipeline stage.
  std::vector<std::pair<std::string, double>> costs;

  double model_state_bytes = 0;  // estimator: params, grads, optimizer, buffers
  double activation_bytes = 0;   // the fullest stage's saved activations
  double overhead_bytes = 0;     // workspaces, communicator buffers
  double memory_bytes = 0;
  double capacity_bytes = 0;
  double host_bytes = 0;           // offloaded state in host memory, per GPU
  double host_capacity_bytes = 0;  // the node's host memory over its GPUs
  bool fits_device() const { return memory_bytes <= capacity_bytes; }
  bool fits() const { return fits_device() && host_bytes <= host_capacity_bytes; }

  std::string largest_cost() const;
  std::string reason() const;  // one line: what bounds this layout
};

// Korthikanti et al. (2022) Table 2: bytes of activations one transformer
// layer keeps for one micro-batch of `tokens` on tp ranks. stored_attention:
// the framework keeps the softmax probabilities (their 5as/h term; selective
// recompute drops it). Otherwise attention is flash-style, as Trident's: an
// f32 log-sum-exp per query and head instead, and selective recompute keeps
// everything, as Trident's does.
double layer_activation_bytes(const GptConfig& m, double tokens, int tp, bool sequence_parallel,
                              Recompute recompute, bool partition, int dtype_bytes,
                              bool stored_attention);

// `deck` already resolved for `shape` (resolve_layout); `state` is
// estimate_memory(deck, shape, deck.zero.stage).
Prediction predict_step(const Deck& deck, const GridShape& shape, const Cluster& cluster,
                        const MemoryEstimate& state, bool stored_attention);

// predict_step's memory fields (memory_model.cpp): on a GPU cluster, Korthikanti's
// activations at the schedule's micro-batches in flight beside the estimator's
// model state; on Trident's CPU backend (f32_activations), the estimator's
// arenas on the fullest pipeline rank.
void predict_memory(Prediction& p, const Deck& deck, const GridShape& shape,
                    const Cluster& cluster, const MemoryEstimate& state, bool stored_attention);

}  // namespace trident
