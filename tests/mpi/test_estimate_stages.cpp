// The memory estimate of every pipeline rank, not only the first, is what
// that rank's trainer allocates, category by category: the schedules keep
// different numbers of micro-batches in flight at each stage, PipeDream
// stashes fewer weights further down and keeps the tied embedding's gradients
// in flight at the last stage, and the last stage holds the head. The
// planner's memory for a CPU host is the fullest of these. Run with 4 ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include <fmt/format.h>

#include "io/deck.hpp"
#include "io/token_shard.hpp"
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
    for (int s = 0; s < 2; ++s) tr.step(s);
    if (grid.coord().dp == 0 && grid.coord().tp == 0) {
      const MemoryEstimate e = estimate_memory(d, shape, d.zero.stage, grid.coord().pp);
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
  for (const char* schedule : {"interleaved", "zb-v"})
    expect_estimate_at_every_stage(2, {"parallel.pp=2", "parallel.virtual_stages=2",
                                       fmt::format("parallel.schedule=\"{}\"", schedule)});
  expect_estimate_at_every_stage(4, {"parallel.pp=2", "parallel.dp=2", "zero.stage=1",
                                     "precision.dtype=\"bf16\""});
  expect_estimate_at_every_stage(4, {"parallel.pp=2", "parallel.tp=2", "zero.stage=3",
                                     "parallel.sequence_parallel=true"});
}
