// What one pipeline rank runs and allocates for a step, decided before any
// model exists: the partition over virtual stages, this rank's actions, and
// per chunk its activation slots and W buffers, plus the rank's send pool.
// One function builds it, so the trainer allocates exactly what `trident
// estimate` and `trident plan` count.
#pragma once
#include <vector>

#include "grid/grid.hpp"
#include "io/deck.hpp"
#include "parallel/pipeline/partition.hpp"
#include "parallel/pipeline/schedule.hpp"
#include "model/stage_spec.hpp"

namespace trident {

// One model chunk of the rank: a virtual stage's blocks and its buffers.
struct ChunkPlan {
  int virtual_stage = 0;
  StageSpec spec;
  int activation_slots = 0;
  int weight_buffers = 0;              // zero bubble: outputs' gradients kept from B for W
  bool sends_input_grad = false;       // not the first virtual stage
  bool operator==(const ChunkPlan&) const = default;
};

struct StagePlan {
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  int stages = 1;          // pipeline ranks
  int stage = 0;           // this rank
  int micro_batches = 1;
  Partition partition;     // blocks over the virtual stages
  std::vector<double> stage_costs;       // predicted per virtual stage, in the partition costs' unit
  std::vector<PipelineAction> actions;   // this rank's step
  // Every pipeline rank's step (actions is entry `stage`): what replays of
  // the whole pipeline run, as the bubble floor under measured costs.
  std::vector<std::vector<PipelineAction>> all_actions;
  std::vector<ChunkPlan> chunks;         // this rank's, in chunk order
  SendBufferPool send_pool;              // the input gradients' send buffers, shared by the chunks
  // Zero bubble: the idle share of every rank's lists replayed with the FLOP
  // costs they were built from; -1 for other schedules.
  double list_bubble = -1;
  bool operator==(const StagePlan&) const = default;
};

// Partition costs by parameter count: each block's, the embeddings on the
// first stage, the final norm on the last. What `partition = "parameters"`
// balances, and what the estimator predicts "profile" by (it cannot measure).
StageCosts parameter_stage_costs(const GptConfig& model);

// The plan of pipeline rank `pipe_rank` for `deck`'s model, schedule and
// batch on `shape`, partitioned by `partition_costs` (uniform ignores them
// except for the predicted stage costs).
StagePlan make_stage_plan(const Deck& deck, const GridShape& shape, int pipe_rank,
                          const StageCosts& partition_costs);

}  // namespace trident
