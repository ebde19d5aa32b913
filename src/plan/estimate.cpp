#include "plan/estimate.hpp"

#include <algorithm>
#include <cmath>

#include "engine/grad_engine.hpp"
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

namespace {

// The blocks each virtual stage owns, as the trainer chooses them (the profile
// partitioner needs measurements: it is predicted by parameter counts here).
Partition predicted_partition(const Deck& deck, int virtual_stages) {
  const auto& m = deck.model;
  if (deck.parallel.partition == PartitionMethod::uniform)
    return partition_uniform(m.layers, virtual_stages);
  StageCosts costs;
  costs.block.assign(m.layers, 0.0);
  const TensorTable whole = build_gpt_param_table(m);  // a local: tensors() is a reference
  for (const TensorInfo& t : whole.tensors()) {
    if (t.layer >= 0) costs.block[t.layer] += double(t.numel);
    else if (t.name == "lnf.w" || t.name == "lnf.b") costs.last += double(t.numel);
    else costs.first += double(t.numel);
  }
  return partition_min_max(costs, virtual_stages);
}

}  // namespace

MemoryEstimate estimate_memory(const Deck& deck, const GridShape& shape, int stage,
                               int pipe_rank) {
  MemoryEstimate e;
  const GptConfig& m = deck.model;
  const TensorParallelLayout tp{shape.tp, 0, deck.parallel.sequence_parallel};
  const UnitLayout units = zero_unit_layout(deck.zero, deck.model, shape.dp, stage, tp);
  const int v = deck.parallel.virtual_stages, V = shape.pp * v;
  const int B = deck.train.micro_batch > 0 ? deck.train.micro_batch : deck.train.batch / shape.dp;
  const int micro_batches = std::max(1, deck.train.batch / (shape.dp * B));
  const Partition part = predicted_partition(deck, V);
  const ScheduleKind kind = deck.parallel.schedule;
  const bool split = splits_backward(kind) && shape.pp > 1;
  const ZeroBubbleCosts costs = split ? zero_bubble_costs(schedule_cost_deck(deck), shape, part) : ZeroBubbleCosts{};
  const auto actions = build_schedule(kind, shape.pp, pipe_rank, micro_batches, v,
                                      split ? &costs : nullptr);
  const double f = sizeof(float);
  // 16-bit weights: resident in 2 bytes, f32 working copies of the units in
  // use, and f32 masters beside the Adam moments.
  const DType weights = precision_dtype(deck.precision.dtype);
  const double w = double(dtype_size(weights)), masters = weights == DType::f32 ? 0 : 1;
  // A 16-bit reduce_dtype: gradients stored (stage 0, 1) or reduced (2, 3) in
  // 16 bits, accumulated in f32 working copies; the optimizer unpacks chunks.
  const DType grads = precision_dtype(deck.precision.reduce_dtype);
  const double g = double(dtype_size(grads));
  auto at = [&](MemCategory c) -> double& { return e.bytes[int(c)]; };
  double reduce_scatter = 0;  // the MPI library's, beyond the arenas
  for (int c = 0; c < v; ++c) {  // the rank's chunks: virtual stages r + c * pp, or the V's r and 2pp - 1 - r
    const int vs = virtual_stage_of(v_placement(kind), shape.pp, pipe_rank, c);
    const StageSpec spec{part[vs], part[vs + 1] - part[vs], vs == 0, vs == V - 1};
    const TensorTable table = build_gpt_param_table(m, tp, units, spec);
    const double n = double(table.size());
    const ZeroPlan plan(table, stage > 0 ? shape.dp : 1, 0,
                        stage > 0 ? std::size_t(deck.zero.persistence_threshold) : 0);
    // Working buffers (not model state): f32 copies of the 16-bit units in
    // use; at stages 0-2 a table that is one unit is read (and its 16-bit
    // gradients at stages 0-1 added to) through a window instead.
    auto working = [&](bool table_window) {
      double bytes = 0;
      for (std::size_t slot : WorkingCopies::slot_sizes(table, table_window)) bytes += double(slot) * f;
      return bytes;
    };
    if (weights != DType::f32)
      at(MemCategory::buffers) += working(ZeroStorage::windows_table(table, stage, weights));
    if (grads != DType::f32 && stage <= 1)
      at(MemCategory::buffers) += working(ZeroStorage::windows_table_grads(table, stage, grads));
    if (stage == 0) {
      at(MemCategory::parameters) += n * w;
      // pipedream: a stage stashes the weights of the forwards it runs ahead;
      // the tied embedding's gradients go from the last stage to the first
      // in buffers of their own: one there, one a micro-batch in flight here.
      if (kind == ScheduleKind::pipedream) {
        at(MemCategory::parameters) += (pipedream_in_flight(shape.pp, pipe_rank) - 1) * n * w;
        const int wte_buffers = shape.pp == 1 ? 0 : spec.embedding ? 1 : spec.head ? shape.pp : 0;
        if (wte_buffers) at(MemCategory::buffers) += wte_buffers * double(table.at("wte").numel) * f;
      }
      at(MemCategory::gradients) += n * g;
      at(MemCategory::optimizer) += (2 + masters) * n * f;  // rank 0 updates in both dp modes
      at(MemCategory::buffers) += double(GradView::buffer_elements(grads, table.size())) * f;
    } else {
      const double shard = double(plan.shard_size());
      const double large = double(ZeroStorage::large_slot_elements(plan));
      const double small = double(ZeroStorage::small_slot_elements(plan));
      auto pool = [&](int slots) { return large + (slots - 1) * small; };
      // Model state: the resident parameters (whole at stages 1-2, this
      // rank's shard at 3), the gradients (stage 1's whole ones, which hold
      // the owned sums in place; stages 2-3's owned sums), the moments.
      // With offload.params only the persistent units' slices stay, and the
      // home's staging joins the buffers.
      const bool params_off = stage == 3 && deck.offload.params != OffloadTarget::none;
      at(MemCategory::parameters) +=
          (stage <= 2 ? n : double(ZeroStorage::resident_param_elements(plan, params_off))) * w;
      if (params_off) {
        const auto [large_slice, small_slice] = ZeroStorage::staging_slices(plan);
        at(MemCategory::buffers) += double(ParamHome::arena_bytes(
            deck.offload, weights, large_slice, small_slice, deck.system.device == Device::cpu));
      }
      at(MemCategory::gradients) += (stage == 1 ? n : shard) * g;
      // The optimizer's home (offload/): resident state, or the swap's staging.
      const auto home = OptimizerHome::arena_bytes(deck.offload, plan.shard_size(),
                                                   2 + int(masters),
                                                   deck.system.device == Device::cpu);
      at(MemCategory::optimizer) += double(home.optimizer);
      at(MemCategory::buffers) += double(home.buffers);
      e.host += double(OptimizerHome::host_bytes(deck.offload, plan.shard_size(),
                                                 2 + int(masters), grads));
      if (params_off && deck.offload.params == OffloadTarget::cpu) e.host += shard * w;
      e.swap += double(OptimizerHome::swap_bytes(deck.offload, plan.shard_size(), 2 + int(masters)));
      if (params_off && deck.offload.params == OffloadTarget::nvme)  // rounded up a page
        e.swap += std::ceil(shard * w / SwapFile::kAlign) * SwapFile::kAlign;
      // 16-bit gradients: the optimizer's and the accumulation's f32 chunks.
      at(MemCategory::buffers) +=
          double(GradView::buffer_elements(grads, plan.shard_size()) +
                 ZeroStorage::accumulate_chunk_elements(plan, stage, grads)) * f;
      // Working buffers: stage 3's gather slots, stages 2-3's f32 gradient
      // slots (with their 16-bit copies for a 16-bit reduce), receive buffers.
      const double slot_bytes = f + (grads == DType::f32 ? 0 : g);
      if (stage == 3) at(MemCategory::buffers) += pool(ZeroStorage::param_slots(table, plan, weights)) * w;
      if (stage >= 2) at(MemCategory::buffers) += pool(ZeroStorage::kGradSlots) * slot_bytes;
      at(MemCategory::buffers) +=
            ZeroStorage::recv_buffers(shape.dp) * double(std::size_t(large) / shape.dp) * g;
      reduce_scatter = std::max(reduce_scatter, reduce_scatter_temporaries(shape.dp, large * g));
    }
    const ActivationPolicy policy =
        make_activation_policy(deck.train.recompute, deck.train.partition_activations, shape.tp,
                               tp.sp(), deck.precision.dtype);
    const int slots = activation_slots(actions, c);
    // A rank's chunks share one working buffer and scratch (one pass at a time).
    at(MemCategory::activations) += slots * slot_bytes(schedule_cost_deck(deck), shape, spec);
    if (c == 0)
      at(MemCategory::activations) += (double(GptModel::work_table(m, B, tp, policy).size()) +
                                       double(GptModel::scratch_table(m, B, tp, policy).size())) * f;
    // Zero bubble: the W buffers, kept from B for W.
    at(MemCategory::activations) +=
        max_pending_weights(actions, c) * weight_buffer_bytes(schedule_cost_deck(deck), shape, spec);
  }
  // The input gradients being sent: one pool for the rank's chunks.
  std::vector<bool> sends;
  for (int c = 0; c < v; ++c)
    sends.push_back(virtual_stage_of(v_placement(kind), shape.pp, pipe_rank, c) > 0);
  at(MemCategory::activations) +=
      send_buffer_pool(actions, sends).size * send_buffer_bytes(schedule_cost_deck(deck), shape);
  e.parameters = double(gpt_num_parameters(m));
  e.runtime = kRuntimeBaseBytes + reduce_scatter;
  if (deck.system.device == Device::cuda)
    e.device_copies =
        cuda_operand_copy_bytes(m, B, tp.local_vocab(m), deck.precision.dtype, tp.local_ff(m),
                                deck.train.recompute == Recompute::full, split);
  return e;
}

double cuda_operand_copy_bytes(const GptConfig& m, int micro_batch, int local_vocab,
                               Precision dtype, int local_ff, bool recomputed,
                               bool weight_pass) {
  if (dtype != Precision::bf16) return 0;
  const double tokens = double(micro_batch) * m.seq_len;
  // One copy of an output gradient and one of an input, each as wide as the widest.
  const int dout = weight_pass ? std::max(local_vocab, local_ff) : local_vocab;
  const int input = recomputed ? std::max(m.d_model, local_ff) : m.d_model;
  return 2.0 * tokens * (double(dout) + input);
}

double reduce_scatter_temporaries(int dp, double largest_unit_bytes) {
  if (dp <= 1) return 0;
  return ZeroStorage::kRecvBuffers * (dp - 1) * std::floor(largest_unit_bytes / dp);
}

double zero_paper_bytes(double psi, int dp, int stage, bool mixed) {
  const double p = mixed ? 2 : 4, g = mixed ? 2 : 4, k = mixed ? 12 : 8;
  switch (stage) {
    case 0: return (p + g + k) * psi;
    case 1: return (p + g) * psi + k * psi / dp;
    case 2: return p * psi + (g + k) * psi / dp;
    default: return (p + g + k) * psi / dp;
  }
}

}  // namespace trident
