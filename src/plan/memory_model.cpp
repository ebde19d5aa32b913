// Memory of one layout before running it: predict_step's memory half.
#include "plan/cost_model.hpp"

#include <algorithm>

#include "model/gpt_config.hpp"
#include "parallel/pipeline/schedule.hpp"

namespace trident {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// cuBLAS/NCCL workspaces, the allocator's slack: what a framework adds on a GPU.
constexpr double kGpuOverheadBytes = 2.0 * kGiB;

}  // namespace

double layer_activation_bytes(const GptConfig& m, double tokens, int tp, bool sp,
                              Recompute recompute, bool partition, int dtype_bytes,
                              bool stored_attention) {
  const double sbh = tokens * m.d_model, scale = dtype_bytes / 2.0;  // the paper counts 16-bit
  const double replicated = sp ? 10.0 / tp : 10.0;  // norms and dropouts, sharded only by SP
  if (recompute == Recompute::full) return 2 * sbh * scale / (sp || partition ? tp : 1);
  const bool selective = recompute == Recompute::selective;
  if (stored_attention) {
    const double attention = selective ? 0 : 5.0 * m.heads * m.seq_len / m.d_model / tp;
    return sbh * (replicated + 24.0 / tp + attention) * scale;
  }
  const double lse_bytes = 4.0 * tokens * m.heads / tp;
  return sbh * (replicated + 24.0 / tp) * scale + lse_bytes;  // selective: the same
}

namespace {

// Korthikanti's activations at the schedule's micro-batches in flight: the
// first stage keeps the most of them, the last one the logits; the fuller of
// the two bounds the layout.
double formula_activations(const Prediction& p, const Deck& deck, const GridShape& shape,
                           bool stored_attention) {
  const GptConfig& m = deck.model;
  const int t = shape.tp, pp = shape.pp, v = deck.parallel.virtual_stages;
  const int w = precision_dtype(deck.precision.dtype) == DType::f32 ? 4 : 2;
  // Context parallelism: each rank holds seq_len / cp tokens of a sequence.
  const double tokens = double(p.micro_batch) * m.seq_len / shape.cp;
  const double kept = layer_activation_bytes(m, tokens, t, p.sequence_parallel, Recompute::none,
                                             false, w, stored_attention);
  const double per_layer = layer_activation_bytes(m, tokens, t, p.sequence_parallel, p.recompute,
                                                  deck.train.partition_activations, w,
                                                  stored_attention);
  const double layers_per_chunk = double(m.layers) / (pp * v);
  auto stage_activations = [&](int stage) {
    const auto actions = build_schedule(deck.parallel.schedule, pp, stage, p.micro_batches, v);
    double bytes = 0;
    for (int chunk = 0; chunk < v; ++chunk)
      bytes += layers_per_chunk * activation_slots(actions, chunk) * per_layer;
    if (p.recompute == Recompute::full) bytes += kept;  // one layer rebuilt for its backward
    return bytes;
  };
  const double logits_bytes = 2.0 * 4 * tokens * m.vocab / t;  // f32 logits and their gradient
  return std::max(stage_activations(0), stage_activations(pp - 1) + logits_bytes);
}

}  // namespace

void predict_memory(Prediction& p, const Deck& deck, const GridShape& shape,
                    const Cluster& cluster, const MemoryEstimate& state, bool stored_attention) {
  if (cluster.f32_activations) {
    // Trident's CPU backend: its arenas as the trainer allocates them, on the
    // fullest pipeline rank. Estimated here, at this micro-batch and
    // recompute: the planner shares `state` between layouts that differ in them.
    double fullest = 0;
    for (int r = 0; r < shape.pp; ++r) {
      const MemoryEstimate e = estimate_memory(deck, shape, deck.zero.stage, r);
      if (e.peak() <= fullest) continue;
      fullest = e.peak();
      p.activation_bytes = e.bytes[int(MemCategory::activations)];
      p.model_state_bytes = fullest - p.activation_bytes;
    }
  } else {
    p.activation_bytes = formula_activations(p, deck, shape, stored_attention);
    p.model_state_bytes = state.model_state() + state.bytes[int(MemCategory::buffers)];
  }
  p.overhead_bytes = cluster.shared_node ? 0 : kGpuOverheadBytes;
  p.memory_bytes = p.model_state_bytes + p.activation_bytes + p.overhead_bytes;
  const int on_node = cluster.shared_node ? shape.size() : 1;
  p.capacity_bytes = cluster.hbm_gib * kGiB / on_node;
  // Offloaded state in host memory: on a shared host the same memory as the
  // arenas, else the node's host memory split over its GPUs.
  p.host_bytes = state.host;
  if (cluster.shared_node) {
    p.memory_bytes += p.host_bytes;
    p.host_capacity_bytes = p.capacity_bytes;
  } else {
    p.host_capacity_bytes = cluster.host_gib * kGiB / cluster.gpus_per_node;
  }
}

}  // namespace trident
