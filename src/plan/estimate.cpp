#include "plan/estimate.hpp"

#include <algorithm>
#include <cmath>

#include "engine/grad_engine.hpp"
#include "parallel/context/ring_attention.hpp"
#include "parallel/pipeline/schedule_costs.hpp"
#include "memory/working_copies.hpp"
#include "model/gpt.hpp"
#include "offload/optimizer_home.hpp"
#include "offload/param_home.hpp"
#include "offload/swap_file.hpp"
#include "optim/grad_view.hpp"
#include "model/gpt_params.hpp"
#include "parallel/pipeline/partition.hpp"
#include "parallel/pipeline/schedule.hpp"
#include "parallel/pipeline/stage_plan.hpp"
#include "model/param_table.hpp"
#include "parallel/zero/zero_plan.hpp"
#include "parallel/zero/zero_storage.hpp"

namespace trident {

double MemoryEstimate::model_state() const {
  return bytes[int(MemCategory::parameters)] + bytes[int(MemCategory::gradients)] +
         bytes[int(MemCategory::optimizer)];
}

double MemoryEstimate::peak() const {
  double s = 0;
  for (double b : bytes) s += b;
  return s;
}

MemoryEstimate estimate_memory(const Deck& deck, const GridShape& shape, int zero_stage,
                               int pipe_rank) {
  // The profile partitioner needs measurements: it is predicted by parameter counts here.
  return estimate_memory(deck, shape, zero_stage,
                         make_stage_plan(deck, shape, pipe_rank, parameter_stage_costs(deck.model)));
}

namespace {

// What every part of a rank's estimate reads: the layout, the byte sizes of
// its precisions, and the sums so far.
struct EstimateContext {
  const Deck& deck;
  const GridShape& shape;
  int zero_stage;
  MemoryEstimate& e;
  double reduce_scatter = 0;  // the MPI library's, beyond the arenas
  const double f = sizeof(float);
  // 16-bit weights: resident in 2 bytes, f32 working copies of the units in
  // use, and f32 masters beside the Adam moments.
  DType weights = precision_dtype(deck.precision.dtype);
  double w = double(dtype_size(weights)), masters = weights == DType::f32 ? 0 : 1;
  // A 16-bit reduce_dtype: gradients stored (stage 0, 1) or reduced (2, 3) in
  // 16 bits, accumulated in f32 working copies; the optimizer unpacks chunks.
  DType grads = precision_dtype(deck.precision.reduce_dtype);
  double g = double(dtype_size(grads));
  double& at(MemCategory c) { return e.bytes[int(c)]; }
};

// Working buffers (not model state): f32 copies of the 16-bit units in use;
// at stages 0-2 a table that is one unit is read (and its 16-bit gradients at
// stages 0-1 added to) through a window instead.
void add_working_copies(EstimateContext& x, const TensorTable& table) {
  const int stage = x.zero_stage;
  auto working = [&](bool table_window) {
    double bytes = 0;
    for (std::size_t slot : WorkingCopies::slot_sizes(table, table_window)) bytes += double(slot) * x.f;
    return bytes;
  };
  if (x.weights != DType::f32)
    x.at(MemCategory::buffers) += working(ZeroStorage::windows_table(table, stage, x.weights));
  if (x.grads != DType::f32 && stage <= 1)
    x.at(MemCategory::buffers) += working(ZeroStorage::windows_table_grads(table, stage, x.grads));
}

// ZeRO stage 0: whole parameters, gradients and optimizer state.
void add_replicated_state(EstimateContext& x, const TensorTable& table, const StageSpec& spec,
                          int pipe_rank) {
  const double n = double(table.size()), w = x.w, f = x.f;
  const int pp = x.shape.pp;
  x.at(MemCategory::parameters) += n * w;
  // pipedream: a stage stashes the weights of the forwards it runs ahead;
  // the tied embedding's gradients go from the last stage to the first
  // in buffers of their own: one there, one a micro-batch in flight here.
  if (x.deck.parallel.schedule == ScheduleKind::pipedream) {
    x.at(MemCategory::parameters) += (pipedream_in_flight(pp, pipe_rank) - 1) * n * w;
    const int wte_buffers = pp == 1 ? 0 : spec.embedding ? 1 : spec.head ? pp : 0;
    if (wte_buffers) x.at(MemCategory::buffers) += wte_buffers * double(table.at("wte").numel) * f;
  }
  x.at(MemCategory::gradients) += n * x.g;
  x.at(MemCategory::optimizer) += (2 + x.masters) * n * f;  // rank 0 updates in both dp modes
  x.at(MemCategory::buffers) += double(GradView::buffer_elements(x.grads, table.size())) * f;
}

// parallel.post_validation: the copy a step taken ahead of the global checks
// is undone from (optim/step_snapshot.hpp): the weights, and where this rank
// updates (data rank 0 in both modes) the moments and masters, once more.
void add_post_validation_copy(EstimateContext& x, const TensorTable& table) {
  if (!x.deck.parallel.post_validation) return;
  const double n = double(table.size()), copy = n * x.w + (2 + x.masters) * n * x.f;
  x.at(MemCategory::optimizer) += copy;
  x.e.undo_copy += copy;
}

// The optimizer's home (offload/): resident state, or the swap's staging;
// host memory and swap files beyond the arenas. With offload.params, the
// non-persistent parameter shards leave too.
void add_optimizer_home(EstimateContext& x, const ZeroPlan& plan, bool params_off) {
  const auto& off = x.deck.offload;
  const double shard = double(plan.shard_size()), w = x.w;
  const int kinds = 2 + int(x.masters);
  const auto home = OptimizerHome::arena_bytes(off, plan.shard_size(), kinds,
                                               x.deck.system.device == Device::cpu);
  x.at(MemCategory::optimizer) += double(home.optimizer);
  x.at(MemCategory::buffers) += double(home.buffers);
  x.e.host += double(OptimizerHome::host_bytes(off, plan.shard_size(), kinds, x.grads));
  if (params_off && off.params == OffloadTarget::cpu) x.e.host += shard * w;
  x.e.swap += double(OptimizerHome::swap_bytes(off, plan.shard_size(), kinds));
  if (params_off && off.params == OffloadTarget::nvme)  // rounded up a page
    x.e.swap += std::ceil(shard * w / SwapFile::kAlign) * SwapFile::kAlign;
}

// ZeRO stages 1-3: model state is the resident parameters (whole at stages
// 1-2, this rank's shard at 3), the gradients (stage 1's whole ones, which
// hold the owned sums in place; stages 2-3's owned sums), the moments. With
// offload.params only the persistent units' slices stay, and the home's
// staging joins the buffers.
void add_sharded_state(EstimateContext& x, const TensorTable& table, const ZeroPlan& plan) {
  const int stage = x.zero_stage, dp = x.shape.replicas();  // ZeRO shards over data x context
  const double n = double(table.size()), w = x.w, g = x.g, f = x.f;
  const double shard = double(plan.shard_size());
  const double large = double(ZeroStorage::large_slot_elements(plan));
  const double small = double(ZeroStorage::small_slot_elements(plan));
  auto pool = [&](int slots) { return large + (slots - 1) * small; };
  const bool params_off = stage == 3 && x.deck.offload.params != OffloadTarget::none;
  x.at(MemCategory::parameters) +=
      (stage <= 2 ? n : double(ZeroStorage::resident_param_elements(plan, params_off))) * w;
  if (params_off) {
    const auto [large_slice, small_slice] = ZeroStorage::staging_slices(plan);
    x.at(MemCategory::buffers) += double(ParamHome::arena_bytes(
        x.deck.offload, x.weights, large_slice, small_slice, x.deck.system.device == Device::cpu));
  }
  x.at(MemCategory::gradients) += (stage == 1 ? n : shard) * g;
  add_optimizer_home(x, plan, params_off);
  // 16-bit gradients: the optimizer's and the accumulation's f32 chunks.
  x.at(MemCategory::buffers) +=
      double(GradView::buffer_elements(x.grads, plan.shard_size()) +
             ZeroStorage::accumulate_chunk_elements(plan, stage, x.grads)) * f;
  // Working buffers: stage 3's gather slots, stages 2-3's f32 gradient
  // slots (with their 16-bit copies for a 16-bit reduce), receive buffers.
  const double slot_bytes = f + (x.grads == DType::f32 ? 0 : g);
  if (stage == 3)
    x.at(MemCategory::buffers) += pool(ZeroStorage::param_slots(table, plan, x.weights)) * w;
  if (stage >= 2) x.at(MemCategory::buffers) += pool(ZeroStorage::kGradSlots) * slot_bytes;
  x.at(MemCategory::buffers) += ZeroStorage::recv_buffers(dp) * double(std::size_t(large) / dp) * g;
  x.reduce_scatter = std::max(x.reduce_scatter, reduce_scatter_temporaries(dp, large * g));
}

// A chunk's activation slots and W buffers; the first also the working
// buffer and scratch the rank's chunks share (one pass at a time).
void add_activations(EstimateContext& x, const ChunkPlan& chunk, bool first) {
  const Deck& deck = x.deck;
  const GridShape& shape = x.shape;
  const TensorParallelLayout tp{shape.tp, 0, deck.parallel.sequence_parallel};
  const ActivationPolicy policy =
      make_activation_policy(deck.train.recompute, deck.train.partition_activations, shape.tp,
                             tp.sp(), deck.precision.dtype);
  const int B = deck.train.micro_batch > 0 ? deck.train.micro_batch : deck.train.batch / shape.dp;
  x.at(MemCategory::activations) += chunk.activation_slots * slot_bytes(schedule_cost_deck(deck), shape, chunk.spec);
  // Context parallelism: the rank's seq_len / cp rows of each sequence.
  const int rows = deck.model.seq_len / shape.cp;
  const TokenLayout layout(B, deck.model.seq_len, {{0, 0, rows}});
  if (first) {
    x.at(MemCategory::activations) +=
        (double(GptModel::work_table(deck.model, layout, tp, policy).size()) +
         double(GptModel::scratch_table(deck.model, layout, tp, policy).size())) * x.f;
    // The ring's key/value blocks and their gradients, shared by the chunks
    // (bf16: with q, k and v widened from bits, as bf16 kernels give them).
    const GptConfig& m = deck.model;
    if (shape.cp > 1)
      x.at(MemCategory::buffers) +=
          double(RingAttention::buffer_floats(
              B, rows, tp.local_kv_heads(m) * m.head_size(),
              deck.precision.dtype == Precision::bf16 ? tp.local_qkv_width(m) : 0)) *
          sizeof(float);
  }
  // Zero bubble: the W buffers, kept from B for W.
  x.at(MemCategory::activations) +=
      chunk.weight_buffers * weight_buffer_bytes(schedule_cost_deck(deck), shape, chunk.spec);
}

}  // namespace

MemoryEstimate estimate_memory(const Deck& deck, const GridShape& shape, int zero_stage,
                               const StagePlan& stage_plan) {
  MemoryEstimate e;
  EstimateContext x{deck, shape, zero_stage, e};
  const GptConfig& m = deck.model;
  const TensorParallelLayout tp{shape.tp, 0, deck.parallel.sequence_parallel};
  const UnitLayout units = zero_unit_layout(deck.zero, deck.model, shape.replicas(), zero_stage, tp);
  // The rank's chunks: virtual stages r + c * pp, or the V's r and 2pp - 1 - r.
  for (const ChunkPlan& chunk : stage_plan.chunks) {
    const TensorTable table = build_gpt_param_table(m, tp, units, chunk.spec);
    const ZeroPlan plan(table, zero_stage > 0 ? shape.replicas() : 1, 0,
                        zero_stage > 0 ? std::size_t(deck.zero.persistence_threshold) : 0);
    add_working_copies(x, table);
    if (zero_stage == 0) add_replicated_state(x, table, chunk.spec, stage_plan.stage);
    else add_sharded_state(x, table, plan);
    if (zero_stage == 0) add_post_validation_copy(x, table);
    add_activations(x, chunk, &chunk == &stage_plan.chunks.front());
    // The tied embedding summed by messages (TiedGradExchange, without ZeRO):
    // the other end's share, and on the first stage the copy it sends.
    const bool tied_end = chunk.spec.embedding || chunk.spec.head;
    if (tied_end && zero_stage == 0 && tied_table_grads_in_b(schedule_cost_deck(deck), shape))
      x.at(MemCategory::buffers) +=
          (chunk.spec.embedding ? 2.0 : 1.0) * double(table.at("wte").numel) * sizeof(float);
  }
  // The input gradients being sent: one pool for the rank's chunks.
  x.at(MemCategory::activations) += stage_plan.send_pool.size * send_buffer_bytes(schedule_cost_deck(deck), shape);
  e.parameters = double(gpt_num_parameters(m));
  e.runtime = kRuntimeBaseBytes + x.reduce_scatter;
  const int B = deck.train.micro_batch > 0 ? deck.train.micro_batch : deck.train.batch / shape.dp;
  const bool split = splits_backward(deck.parallel.schedule) && shape.pp > 1;
  if (deck.system.device == Device::cuda)
    e.device_copies = cuda_operand_copy_bytes(m, B, m.seq_len / shape.cp, tp.local_vocab(m),
                                              deck.precision.dtype, tp.local_ff(m),
                                              deck.train.recompute == Recompute::full, split);
  e.checkpoint_staging = async_staging_bytes(deck, e, zero_stage);
  return e;
}

double async_staging_bytes(const Deck& deck, const MemoryEstimate& e, int zero_stage) {
  if (!deck.checkpoint.async) return 0;
  const double state = e.bytes[int(MemCategory::parameters)] +
                       e.bytes[int(MemCategory::optimizer)] + e.host + e.swap;
  const double bound = deck.checkpoint.staging_mb * double(1 << 20);
  // The staging exists only where something is read through it.
  const bool staged = deck.system.device != Device::cpu ||
                      deck.offload.optimizer != OffloadTarget::none ||
                      (zero_stage == 3 && deck.offload.params != OffloadTarget::none);
  const double wave = staged ? std::max(bound, double(2 << 20)) : 0;
  return std::min(state, wave) + std::min(state, bound);
}

double cuda_operand_copy_bytes(const GptConfig& m, int micro_batch, int rows, int local_vocab,
                               Precision dtype, int local_ff, bool recomputed,
                               bool weight_pass) {
  if (dtype != Precision::bf16) return 0;
  const double tokens = double(micro_batch) * rows;
  // One copy of an output gradient and one of an input, each as wide as the widest.
  const int dout = weight_pass ? std::max(local_vocab, local_ff) : local_vocab;
  const int input = recomputed ? std::max(m.d_model, local_ff) : m.d_model;
  return 2.0 * tokens * (double(dout) + input);
}

double reduce_scatter_temporaries(int dp, double largest_unit_bytes) {
  if (dp <= 1) return 0;
  return ZeroStorage::kRecvBuffers * (dp - 1) * std::floor(largest_unit_bytes / dp);
}

double zero_paper_bytes(double psi, int dp, int zero_stage, bool mixed) {
  const double p = mixed ? 2 : 4, g = mixed ? 2 : 4, k = mixed ? 12 : 8;
  switch (zero_stage) {
    case 0: return (p + g + k) * psi;
    case 1: return (p + g) * psi + k * psi / dp;
    case 2: return p * psi + (g + k) * psi / dp;
    default: return (p + g + k) * psi / dp;
  }
}

}  // namespace trident
