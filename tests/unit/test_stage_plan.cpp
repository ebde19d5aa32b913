// The stage plan as make_stage_plan builds it for the trainer and the
// estimator: the partition covers the blocks, each chunk sits at the virtual
// stage its schedule places it, its slots are the schedule's activations in
// flight, the send pool follows the lists, and only zero bubble replays a
// bubble. (tests/mpi/test_estimate_stages.cpp checks that the trainer
// allocates what its plan says and that the estimator's plan is the same.)
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>

#include "io/deck.hpp"
#include "parallel/pipeline/stage_plan.hpp"
#include "support/test_support.hpp"

using namespace trident;

namespace {

Deck deck_with(const std::vector<std::string>& sets, int ranks, GridShape& shape) {
  std::vector<std::string> all = {"model.layers=8", "train.micro_batch=1", "train.batch=8"};
  all.insert(all.end(), sets.begin(), sets.end());
  Deck d = parse_deck(trident::testing::tiny_deck("unused.bin", "unused.bin"), "plan.toml", all);
  shape = resolve_layout(d, ranks);
  return d;
}

}  // namespace

TEST(StagePlan, OneFOneBKeepsStagesMinusStageSlotsAndOnePerSlotToSend) {
  GridShape shape;
  const Deck d = deck_with({"parallel.pp=4", "parallel.schedule=\"1f1b\""}, 4, shape);
  for (int s = 0; s < 4; ++s) {
    const StagePlan plan = make_stage_plan(d, shape, s, parameter_stage_costs(d.model));
    EXPECT_EQ(plan.micro_batches, 8);
    EXPECT_EQ(plan.partition, (Partition{0, 2, 4, 6, 8}));  // uniform
    ASSERT_EQ(plan.chunks.size(), 1u);
    EXPECT_EQ(plan.chunks[0].virtual_stage, s);
    EXPECT_EQ(plan.chunks[0].spec.first_block, 2 * s);
    EXPECT_EQ(plan.chunks[0].spec.embedding, s == 0);
    EXPECT_EQ(plan.chunks[0].spec.head, s == 3);
    EXPECT_EQ(plan.chunks[0].activation_slots, 4 - s);
    EXPECT_EQ(plan.chunks[0].weight_buffers, 0);
    EXPECT_EQ(plan.send_pool.size, s == 0 ? 0 : 4 - s);  // stage 0 sends no gradient
    EXPECT_EQ(plan.list_bubble, -1);
    EXPECT_EQ(plan.actions, build_schedule(ScheduleKind::one_f_one_b, 4, s, 8, 1));
  }
}

TEST(StagePlan, ParameterPartitionBalancesParameterCounts) {
  GridShape shape;
  const Deck d = deck_with({"parallel.pp=4", "parallel.partition=\"parameters\""}, 4, shape);
  const StagePlan plan = make_stage_plan(d, shape, 0, parameter_stage_costs(d.model));
  ASSERT_EQ(plan.partition.size(), 5u);
  EXPECT_EQ(plan.partition.front(), 0);
  EXPECT_EQ(plan.partition.back(), 8);
  const StageCosts costs = parameter_stage_costs(d.model);
  EXPECT_EQ(plan.partition, partition_min_max(costs, 4));
  // Its slowest stage is no slower than uniform's (the embeddings weigh on stage 0).
  const auto uniform = stage_costs(costs, partition_uniform(8, 4));
  ASSERT_EQ(plan.stage_costs.size(), 4u);
  EXPECT_LE(*std::max_element(plan.stage_costs.begin(), plan.stage_costs.end()),
            *std::max_element(uniform.begin(), uniform.end()));
  EXPECT_EQ(plan.stage_costs, stage_costs(costs, plan.partition));
  double total = costs.first + costs.last;
  for (double b : costs.block) total += b;
  double planned = 0;
  for (double c : plan.stage_costs) planned += c;
  EXPECT_DOUBLE_EQ(planned, total);  // every parameter on exactly one stage
}

TEST(StagePlan, ZeroBubbleVPlacesTwoChunksAndNamesItsSendBuffers) {
  GridShape shape;
  const Deck d = deck_with({"parallel.pp=2", "parallel.virtual_stages=2",
                            "parallel.schedule=\"zb-v\""}, 2, shape);
  for (int s = 0; s < 2; ++s) {
    const StagePlan plan = make_stage_plan(d, shape, s, parameter_stage_costs(d.model));
    ASSERT_EQ(plan.chunks.size(), 2u);
    EXPECT_EQ(plan.chunks[0].virtual_stage, s);
    EXPECT_EQ(plan.chunks[1].virtual_stage, 3 - s);
    // Rank 0 holds both ends of the model.
    EXPECT_EQ(plan.chunks[0].spec.embedding, s == 0);
    EXPECT_EQ(plan.chunks[1].spec.head, s == 0);
    EXPECT_EQ(plan.chunks[0].sends_input_grad, s != 0);
    EXPECT_TRUE(plan.chunks[1].sends_input_grad);
    EXPECT_TRUE(plan.send_pool.first.empty());  // the lists name the buffers
    int named = 0;
    for (const PipelineAction& a : plan.actions) named = std::max(named, a.send_buffer + 1);
    EXPECT_EQ(plan.send_pool.size, named);
    EXPECT_GT(named, 0);
    EXPECT_GE(plan.list_bubble, 0.0);
    EXPECT_LT(plan.list_bubble, 1.0);
    for (int c = 0; c < 2; ++c)
      EXPECT_EQ(plan.chunks[c].activation_slots, activation_slots(plan.actions, c));
  }
}

TEST(StagePlan, OneStageRunsTheWholeModelWithoutSendsOrBubble) {
  GridShape shape;
  const Deck d = deck_with({"parallel.schedule=\"gpipe\""}, 1, shape);
  const StagePlan plan = make_stage_plan(d, shape, 0, parameter_stage_costs(d.model));
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].spec.first_block, 0);
  EXPECT_EQ(plan.chunks[0].spec.num_blocks, 8);
  EXPECT_TRUE(plan.chunks[0].spec.embedding && plan.chunks[0].spec.head);
  EXPECT_EQ(plan.send_pool.size, 0);
  EXPECT_EQ(plan.chunks[0].activation_slots, 8);  // gpipe: every micro-batch in flight
  EXPECT_EQ(plan.list_bubble, -1);
}
