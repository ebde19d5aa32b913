#include "parallel/pipeline/stage_plan.hpp"

#include <algorithm>

#include "model/gpt_params.hpp"
#include "model/param_table.hpp"
#include "parallel/pipeline/schedule_costs.hpp"
#include "parallel/pipeline/schedule_sim.hpp"

namespace trident {
namespace {

// This rank's actions; zero bubble also the replayed bubble of every rank's
// lists, which are built together.
void schedule_actions(StagePlan& plan, const Deck& deck, const GridShape& shape, int chunks) {
  const bool split = splits_backward(plan.schedule) && shape.pp > 1;
  if (!split) {
    for (int s = 0; s < shape.pp; ++s)
      plan.all_actions.push_back(
          build_schedule(plan.schedule, shape.pp, s, plan.micro_batches, chunks));
    plan.actions = plan.all_actions[std::size_t(plan.stage)];
    return;
  }
  const ZeroBubbleCosts costs = zero_bubble_costs(schedule_cost_deck(deck), shape, plan.partition);
  const auto lists = zero_bubble_schedule(plan.schedule, shape.pp, plan.micro_batches, costs);
  plan.all_actions = lists;
  plan.actions = lists[std::size_t(plan.stage)];
  plan.list_bubble = replayed_bubble(lists, int(costs.f.size()) / shape.pp,
                                     places_chunks_in_v(plan.schedule), costs);
}

}  // namespace

StageCosts parameter_stage_costs(const GptConfig& m) {
  StageCosts costs;
  costs.block.assign(m.layers, 0.0);
  const TensorTable whole = build_gpt_param_table(m);  // a local: tensors() is a reference
  for (const TensorInfo& t : whole.tensors()) {
    if (t.layer >= 0) costs.block[t.layer] += double(t.numel);
    else if (t.name == "lnf.w" || t.name == "lnf.b" || t.name == "lm_head.w") costs.last += double(t.numel);
    else costs.first += double(t.numel);
  }
  return costs;
}

StagePlan make_stage_plan(const Deck& deck, const GridShape& shape, int pipe_rank,
                          const StageCosts& partition_costs) {
  StagePlan plan;
  plan.schedule = deck.parallel.schedule;
  plan.stages = shape.pp;
  plan.stage = pipe_rank;
  const int B = deck.train.micro_batch > 0 ? deck.train.micro_batch : deck.train.batch / shape.dp;
  plan.micro_batches = std::max(1, deck.train.batch / (shape.dp * B));
  const int chunks = deck.parallel.virtual_stages, V = shape.pp * chunks;
  plan.partition = deck.parallel.partition == PartitionMethod::uniform
                       ? partition_uniform(deck.model.layers, V)
                       : partition_min_max(partition_costs, V);
  plan.stage_costs = stage_costs(partition_costs, plan.partition);
  schedule_actions(plan, deck, shape, chunks);
  std::vector<bool> sends;
  for (int c = 0; c < chunks; ++c) {
    ChunkPlan chunk;
    chunk.virtual_stage = virtual_stage_of(places_chunks_in_v(plan.schedule), shape.pp, pipe_rank, c);
    chunk.spec = stage_spec_of(plan.partition, chunk.virtual_stage);
    chunk.activation_slots = activation_slots(plan.actions, c);
    chunk.weight_buffers = max_pending_weights(plan.actions, c);
    chunk.sends_input_grad = chunk.virtual_stage > 0;
    sends.push_back(chunk.sends_input_grad);
    plan.chunks.push_back(chunk);
  }
  plan.send_pool = send_buffer_pool(plan.actions, sends);
  return plan;
}

}  // namespace trident
