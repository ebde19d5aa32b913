// The memory estimate of every pipeline rank, not only the first, is what
// that rank's trainer allocates, category by category: the schedules keep
// different numbers of micro-batches in flight at each stage, PipeDream
// stashes fewer weights further down and keeps the tied embedding's gradients
// in flight at the last stage, and the last stage holds the head. The
// planner's memory for a CPU host is the fullest of these. The trainer's
// stage plan is make_stage_plan's, the one the estimator counts from, and the
// trainer allocates what the plan says. Run with 4 ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include <fmt/format.h>

#include "io/deck.hpp"
#include "io/token_shard.hpp"
#include "parallel/pipeline/stage_plan.hpp"
#include "plan/estimate.hpp"
#include "support/test_support.hpp"
#include "train/trainer.hpp"

using namespace trident;
using trident::testing::first_ranks;
using trident::testing::world_size;

namespace {

const std::string& shard_dir() {
  static const std::string dir = trident::testing::rank_shard_dir("estimate_stages", 40000);
  return dir;
}

// The trainer's plan is the estimator's (parameter partition), and its
// chunks hold the slots and W buffers the plan names.
void expect_trainer_allocates_its_plan(Trainer& tr, const Deck& d, const GridShape& shape,
                                       int pipe_rank, const std::string& what) {
  const StagePlan estimated = make_stage_plan(d, shape, pipe_rank, parameter_stage_costs(d.model));
  const StagePlan& trained = tr.plan();
  EXPECT_TRUE(trained == estimated) << what << ": the trainer's plan differs from the estimator's";
  ASSERT_EQ(tr.chunks().size(), trained.chunks.size()) << what;
  int send_buffers = 0;
  for (std::size_t c = 0; c < trained.chunks.size(); ++c) {
    const ModelChunk& ch = tr.chunks()[c];
    const ChunkPlan& planned = trained.chunks[c];
    EXPECT_EQ(ch.virtual_stage, planned.virtual_stage) << what << " chunk " << c;
    EXPECT_TRUE(ch.spec == planned.spec) << what << " chunk " << c;
    EXPECT_EQ(ch.slots.size(), planned.activation_slots) << what << " chunk " << c;
    EXPECT_EQ(ch.slots.weight_buffer_count(), planned.weight_buffers) << what << " chunk " << c;
    if (planned.sends_input_grad) send_buffers += planned.activation_slots;
  }
  // The pool: the buffers the zero-bubble lists name, else one per slot of
  // each chunk that sends.
  int named = 0;
  for (const PipelineAction& a : trained.actions) named = std::max(named, a.send_buffer + 1);
  EXPECT_EQ(trained.send_pool.size, trained.send_pool.first.empty() ? named : send_buffers) << what;
  for (int zero = 0; zero <= 3; ++zero) {
    const MemoryEstimate by_rank = estimate_memory(d, shape, zero, pipe_rank);
    const MemoryEstimate by_plan = estimate_memory(d, shape, zero, trained);
    for (int c = 0; c < kMemCategories; ++c)
      EXPECT_EQ(by_rank.bytes[c], by_plan.bytes[c]) << what << " zero " << zero << " category " << c;
  }
}

// Two steps of the layout on `ranks` ranks; each data-rank-0 rank checks its
// ledger's peaks against estimate_memory at its pipeline rank.
void expect_estimate_at_every_stage(int ranks, const std::vector<std::string>& sets) {
  MPI_Comm comm = first_ranks(ranks);
  if (comm == MPI_COMM_NULL) return;
  std::vector<std::string> all = {"model.layers=8", "train.micro_batch=1", "train.batch=8",
                                  "system.comm_timeout_s=60"};
  all.insert(all.end(), sets.begin(), sets.end());
  Deck d = parse_deck(trident::testing::tiny_deck(shard_dir() + "/train.bin",
                                                  shard_dir() + "/train.bin", ""),
                      "stages.toml", all);
  const GridShape shape = resolve_layout(d, ranks);
  {
    Grid grid(comm, shape);
    auto be = make_cpu_backend(1);
    MemoryLedger ledger;
    TokenDataset data(d.data.train, d.model.seq_len, "data.train");
    Trainer tr(d, grid, *be, ledger, data, nullptr);
    expect_trainer_allocates_its_plan(tr, d, shape, grid.coord().pp, fmt::format("{}", fmt::join(sets, " ")));
    for (int s = 0; s < 2; ++s) tr.step(s);
    if (grid.coord().dp == 0 && grid.coord().tp == 0) {
      const MemoryEstimate e = estimate_memory(d, shape, d.zero.stage, grid.coord().pp);
      // Post-validation's undo copy: in the optimizer's bytes, and apart.
      double undo = 0;
      for (ModelChunk& ch : tr.chunks()) undo += double(ch.engine->undo_bytes());
      EXPECT_EQ(undo, e.undo_copy) << fmt::format("{}", fmt::join(sets, " "));
      EXPECT_EQ(undo > 0, d.parallel.post_validation);
      for (int c = 0; c < kMemCategories; ++c) {
        const double measured = double(ledger.peak(MemCategory(c)));
        if (measured == e.bytes[c]) continue;
        // Only rank 0 prints gtest's failures: every rank names its own.
        const std::string what = fmt::format("{} at pipeline rank {}: category {} allocated {} B, "
                                             "estimated {} B", fmt::join(sets, " "),
                                             grid.coord().pp, c, measured, e.bytes[c]);
        std::fprintf(stderr, "%s\n", what.c_str());
        ADD_FAILURE() << what;
      }
    }
  }
  MPI_Comm_free(&comm);
}

}  // namespace

TEST(EstimateStages, EveryPipelineRankAllocatesItsEstimate) {
  if (world_size() < 4) GTEST_SKIP() << "needs 4 ranks";
  for (const char* schedule : {"1f1b", "gpipe", "pipedream", "zb-h1"})
    expect_estimate_at_every_stage(4, {"parallel.pp=4", fmt::format("parallel.schedule=\"{}\"",
                                                                    schedule)});
  expect_estimate_at_every_stage(4, {"parallel.pp=4", "parallel.schedule=\"zb-h1\"",
                                     "parallel.partition=\"parameters\""});
  for (const char* schedule : {"interleaved", "zb-v"})
    expect_estimate_at_every_stage(2, {"parallel.pp=2", "parallel.virtual_stages=2",
                                       fmt::format("parallel.schedule=\"{}\"", schedule)});
  expect_estimate_at_every_stage(4, {"parallel.pp=2", "parallel.dp=2", "zero.stage=1",
                                     "precision.dtype=\"bf16\""});
  expect_estimate_at_every_stage(4, {"parallel.pp=2", "parallel.tp=2", "zero.stage=3",
                                     "parallel.sequence_parallel=true"});
  expect_estimate_at_every_stage(2, {"parallel.pp=2", "parallel.schedule=\"zb-v\"",
                                     "parallel.post_validation=true", "precision.dtype=\"bf16\""});
  expect_estimate_at_every_stage(4, {"parallel.pp=2", "parallel.dp=2", "parallel.dp_mode=\"gather\"",
                                     "parallel.schedule=\"zb-h2\"", "parallel.post_validation=true"});
}
