// ZeRO stages 1-3: the same losses as plain data parallelism, model-state
// bytes exactly as the estimator predicts, stage 3's model state its shard and
// its working buffers a few units, and communication per step as the ZeRO
// paper's accounting. Run with 4 ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include "io/deck.hpp"
#include "io/token_shard.hpp"
#include "plan/estimate.hpp"
#include "support/test_support.hpp"
#include "engine/zero_engine.hpp"
#include "train/trainer.hpp"

using namespace trident;
using trident::testing::first_ranks;
using trident::testing::world_size;

namespace {

constexpr int kSteps = 20;
constexpr double kTol = 1e-5;

const std::string& shard_dir() {
  static const std::string dir = trident::testing::rank_shard_dir("zero", 40000);
  return dir;
}

Deck make_deck(const std::vector<std::string>& sets) {
  std::vector<std::string> all = {"train.lr=3e-3", "zero.persistence_threshold=1000"};
  all.insert(all.end(), sets.begin(), sets.end());
  const std::string text = trident::testing::tiny_deck(shard_dir() + "/train.bin",
                                                       shard_dir() + "/train.bin", "batch = 8\n");
  return parse_deck(text, "zero.toml", all);
}

struct ZeroRun {
  std::vector<double> losses;
  MemoryLedger ledger;
  MemoryEstimate estimate;
  CommStats data, world;
  std::size_t partitioned = 0, persistent = 0, embeddings = 0, shard = 0, largest_unit = 0;
  int cut_units = 0;  // units of a cut table
};

void run(MPI_Comm comm, const std::vector<std::string>& sets, ZeroRun& out, int steps = kSteps) {
  Deck d = make_deck(sets);
  int world = 0;
  MPI_Comm_size(comm, &world);
  const GridShape shape = resolve_layout(d, world);
  Grid grid(comm, shape);
  auto be = make_cpu_backend(1);
  TokenDataset data(d.data.train, d.model.seq_len, "data.train");
  Trainer tr(d, grid, *be, out.ledger, data, nullptr);
  grid.data_context().reset_stats();  // gradients travel on data x context
  grid.world().reset_stats();
  for (int s = 0; s < steps; ++s) out.losses.push_back(tr.step(s).loss);
  out.data = grid.data_context().stats();
  out.world = grid.world().stats();
  out.estimate = estimate_memory(d, shape, d.zero.stage);
  if (auto* engine = dynamic_cast<ZeroEngine*>(&tr.engine())) {
    ZeroStorage* z = &engine->zero_storage();
    for (const auto& u : z->plan().units()) {
      (u.persistent ? out.persistent : out.partitioned) += u.size();
      out.cut_units += u.cut() ? 1 : 0;
    }
    out.embeddings = z->plan().units()[0].size();
    out.shard = z->plan().shard_size();
    out.largest_unit = ZeroStorage::large_slot_elements(z->plan());
  }
}



}  // namespace

TEST(Zero, EveryStageTrainsLikePlainDataParallelism) {
  // dp in {1, 2, 4}, and tp = 2 x dp = 2; micro_batch 1 so stages 2 and 3
  // reduce every micro-batch into the accumulated shard.
  struct Layout { int ranks; std::string tp; };
  for (const Layout& l : {Layout{1, "1"}, Layout{2, "1"}, Layout{4, "1"}, Layout{4, "2"}}) {
    if (l.ranks > world_size()) continue;
    MPI_Comm comm = first_ranks(l.ranks);
    if (comm == MPI_COMM_NULL) continue;
    const std::vector<std::string> layout = {"parallel.tp=" + l.tp, "train.micro_batch=1"};
    ZeroRun base;
    run(comm, layout, base);
    for (int stage = 1; stage <= 3; ++stage) {
      auto sets = layout;
      sets.push_back("zero.stage=" + std::to_string(stage));
      ZeroRun z;
      run(comm, sets, z);
      for (int s = 0; s < kSteps; ++s)
        EXPECT_NEAR(z.losses[s], base.losses[s], kTol * base.losses[s])
            << "ranks " << l.ranks << " tp " << l.tp << " stage " << stage << " step " << s;
    }
    MPI_Comm_free(&comm);
  }
}

TEST(Zero, Stages2And3WithTheTableCutIntoUnitsTrainLikePlainDataParallelism) {
  // The token embedding in 3 units of row pieces (reduced one unit at a time;
  // stage 3 gathers each for use, stage 2 all-gathers the updated table),
  // fp32 and bf16 weights, tp 1 and 2.
  for (const std::string stage : {"2", "3"})
    for (const std::string dtype : {"fp32", "bf16"})
      for (const std::string tp : {"1", "2"}) {
        const std::vector<std::string> layout = {"parallel.tp=" + tp, "train.micro_batch=1",
                                                 "precision.dtype=\"" + dtype + "\""};
        ZeroRun base, z;
        run(MPI_COMM_WORLD, layout, base, 6);
        auto sets = layout;
        sets.insert(sets.end(), {"zero.stage=" + stage, "zero.table_units=3"});
        run(MPI_COMM_WORLD, sets, z, 6);
        EXPECT_EQ(z.cut_units, world_size() > 1 ? 3 : 0);
        for (int s = 0; s < 6; ++s)
          EXPECT_NEAR(z.losses[s], base.losses[s], kTol * base.losses[s])
              << "stage " << stage << " " << dtype << " tp " << tp << " step " << s;
      }
}

TEST(Zero, MeasuredBytesEqualTheEstimatorExactly) {
  // fp32; 16-bit weights (2-byte resident parameters, f32 working copies of
  // the units in use, f32 masters); and 16-bit gradients besides (stored in
  // 16 bits at stages 0-1, reduced in 16 bits at every stage).
  const std::pair<std::string, std::string> precisions[] = {
      {"fp32", "fp32"}, {"bf16", "fp32"}, {"bf16", "bf16"}};
  for (const auto& [dtype, reduce] : precisions)
    for (const std::string tp : {"1", "2"}) {
      for (int stage = 0; stage <= 4; ++stage) {  // 4: stage 3 with the table cut in 3 units
        ZeroRun z;
        run(MPI_COMM_WORLD, {"parallel.tp=" + tp, "zero.stage=" + std::to_string(std::min(stage, 3)),
                             "zero.table_units=" + std::to_string(stage == 4 ? 3 : 0),
                             "precision.dtype=\"" + dtype + "\"",
                             "precision.reduce_dtype=\"" + reduce + "\""}, z, 1);
        for (MemCategory c : {MemCategory::parameters, MemCategory::gradients,
                              MemCategory::optimizer, MemCategory::activations,
                              MemCategory::buffers})
          EXPECT_EQ(double(z.ledger.peak(c)), z.estimate.bytes[int(c)])
              << dtype << "/" << reduce << " tp " << tp << " stage " << stage << " " << mem_category_name(c);
        EXPECT_EQ(double(z.ledger.peak_total()), z.estimate.peak());
      }
    }
  // The optimizer state offloaded: in host memory (the same memory on the
  // CPU backend, outside the arenas) or in a swap file streamed through
  // staging buffers.
  for (const std::string home : {"cpu", "nvme"}) {
    ZeroRun z;
    run(MPI_COMM_WORLD, {"zero.stage=2", "precision.dtype=\"bf16\"",
                         "offload.optimizer=\"" + home + "\"",
                         "offload.nvme_path=\"" + shard_dir() + "\"", "offload.block_mb=0.0625"},
        z, 1);
    for (MemCategory c : {MemCategory::optimizer, MemCategory::buffers})
      EXPECT_EQ(double(z.ledger.peak(c)), z.estimate.bytes[int(c)])
          << home << " " << mem_category_name(c);
    EXPECT_EQ(z.estimate.bytes[int(MemCategory::optimizer)], 0.0) << home;
    EXPECT_EQ(double(z.ledger.peak_total()), z.estimate.peak()) << home;
  }
  // The stage 3 parameter shard offloaded: only the persistent units' slices
  // stay as parameters; staging (and a swap file's stream blocks) joins the
  // buffers. The losses stay those of the resident shard, bit for bit.
  for (const std::string dtype : {"fp32", "bf16"}) {
    const std::vector<std::string> base = {"zero.stage=3", "precision.dtype=\"" + dtype + "\"",
                                           "offload.nvme_path=\"" + shard_dir() + "\"",
                                           "offload.block_mb=0.0625"};
    ZeroRun resident;
    run(MPI_COMM_WORLD, base, resident, 3);
    for (const std::string home : {"cpu", "nvme"}) {
      ZeroRun z;
      auto sets = base;
      sets.push_back("offload.params=\"" + home + "\"");
      sets.push_back("offload.optimizer=\"" + home + "\"");
      run(MPI_COMM_WORLD, sets, z, 3);
      for (MemCategory c : {MemCategory::parameters, MemCategory::gradients,
                            MemCategory::optimizer, MemCategory::activations,
                            MemCategory::buffers})
        EXPECT_EQ(double(z.ledger.peak(c)), z.estimate.bytes[int(c)])
            << dtype << " params " << home << " " << mem_category_name(c);
      EXPECT_EQ(double(z.ledger.peak_total()), z.estimate.peak()) << dtype << " params " << home;
      const double kept = z.estimate.bytes[int(MemCategory::parameters)];
      EXPECT_GT(kept, 0.0) << "the persistent units stay";
      EXPECT_LT(kept, resident.estimate.bytes[int(MemCategory::parameters)] / 4);
      EXPECT_EQ(z.losses, resident.losses) << dtype << " params " << home;
    }
  }
}

TEST(Zero, SixteenBitWeightsAndGradientsTrainAlikeAndHalveTheTraffic) {
  // bf16 weights under every stage: the losses of bf16 plain data
  // parallelism, and every parameter all-gather moves 2 bytes an element.
  // With bf16 gradients too, every gradient reduce-scatter moves 2 bytes an
  // element; stage 1 reduces the step's 16-bit sums as stage 0 does, stages
  // 2-3 reduce each micro-batch in 16 bits and accumulate the slices in f32.
  // Each 16-bit partial sum is rounded, so the result depends on the order in
  // which MPI combines the ranks, and MPI_Reduce_scatter need not follow
  // MPI_Allreduce's (Open MPI's do at 4 ranks; MPICH's give 1.04e-5): within
  // 1e-4 of stage 0.
  const int steps = 6;
  const int micro_batches = 8 / world_size();
  for (const std::string reduce : {"fp32", "bf16"}) {
    const std::vector<std::string> bf16 = {"precision.dtype=\"bf16\"", "train.micro_batch=1",
                                           "precision.reduce_dtype=\"" + reduce + "\""};
    ZeroRun base;
    run(MPI_COMM_WORLD, bf16, base, steps);
    for (int stage = 1; stage <= 3; ++stage) {
      auto sets = bf16;
      sets.push_back("zero.stage=" + std::to_string(stage));
      ZeroRun z;
      run(MPI_COMM_WORLD, sets, z, steps);
      const double tol = reduce == "bf16" ? 1e-4 : 1e-5;
      for (int s = 0; s < steps; ++s)
        EXPECT_NEAR(z.losses[s], base.losses[s], tol * base.losses[s])
            << reduce << " stage " << stage << " step " << s;
      // Stage 3 gathers each unit for forward and backward of each micro-batch.
      const std::uint64_t gathered = (stage < 3 ? 1 : 2 * micro_batches) * z.partitioned * 2;
      EXPECT_EQ(z.data.bytes_of(CommOp::all_gather), steps * gathered) << "stage " << stage;
      const std::uint64_t esz = reduce == "bf16" ? 2 : 4;
      const std::uint64_t reduced = (stage < 2 ? 1 : micro_batches) * z.partitioned * esz;
      EXPECT_EQ(z.data.bytes_of(CommOp::reduce_scatter), steps * reduced) << "stage " << stage;
    }
  }
}

TEST(Zero, Stage3ModelStateIsItsShardAndItsBuffersAFewUnits) {
  // Model state is this rank's shard (parameters, gradient sums, moments:
  // 16 B an element in fp32); the gather slots (the unit in use, the
  // prefetched one, the tied head's pinned one), the three gradient slots and
  // the receive buffers are working buffers, each at most the largest unit.
  ZeroRun z;
  run(MPI_COMM_WORLD, {"zero.stage=3"}, z, 3);
  const std::size_t f = sizeof(float);
  EXPECT_EQ(z.ledger.peak(MemCategory::parameters), z.shard * f);
  EXPECT_EQ(z.ledger.peak(MemCategory::gradients), z.shard * f);
  EXPECT_EQ(z.ledger.peak(MemCategory::optimizer), 2 * z.shard * f);
  const std::size_t slots = ZeroStorage::kParamSlots + 1 + ZeroStorage::kGradSlots;
  EXPECT_LE(z.ledger.peak(MemCategory::buffers),
            (slots * z.largest_unit + ZeroStorage::kRecvBuffers * z.largest_unit) * f);
  // and the parameters far below the whole model once dp > 2
  if (world_size() >= 4)
    EXPECT_LT(z.ledger.peak(MemCategory::parameters), (z.partitioned + z.persistent) * f / 2);
}

TEST(Zero, Stage1HoldsNoMoreGradientMemoryThanStage0) {
  // Stage 1 sums its slices in place, in its full gradients, f32 or 16-bit.
  // (A shard of f32 sums beside 16-bit ones would add 4 B/param / dp.)
  for (const std::string reduce : {"fp32", "bf16"}) {
    const std::vector<std::string> sets = {"precision.dtype=\"" + reduce + "\"",
                                           "precision.reduce_dtype=\"" + reduce + "\""};
    ZeroRun plain, one;
    run(MPI_COMM_WORLD, sets, plain, 1);
    auto staged = sets;
    staged.push_back("zero.stage=1");
    run(MPI_COMM_WORLD, staged, one, 1);
    // The full gradients of the padded table and no shard of sums beside them.
    const std::size_t esz = reduce == "fp32" ? 4 : 2;
    EXPECT_EQ(one.ledger.peak(MemCategory::gradients), (one.partitioned + one.persistent) * esz)
        << reduce;
    // Stage 0's gradients but for the padding of each unit to a multiple of dp.
    EXPECT_LE(double(one.ledger.peak(MemCategory::gradients)),
              1.01 * double(plain.ledger.peak(MemCategory::gradients))) << reduce;
  }
}

TEST(Zero, CommunicationPerStepMatchesTheory) {
  // With one micro-batch per step: stages 1-2 reduce-scatter and all-gather
  // each partitioned element once (2 Psi); stage 3 gathers every block for
  // forward and again for backward and reduce-scatters once (3 Psi). The
  // embeddings are gathered twice in forward (lookup, then the tied head,
  // whose copy also serves its backward) and not again: the embedding's
  // backward needs no parameters. Persistent units and the loss go by
  // all-reduce over the data group; the norm with its overflow flag (two
  // doubles) by one all-reduce over the world.
  const int steps = 3;
  for (int stage = 1; stage <= 3; ++stage) {
    ZeroRun z;
    run(MPI_COMM_WORLD, {"zero.stage=" + std::to_string(stage)}, z, steps);
    const std::uint64_t psi = z.partitioned * sizeof(float);
    const std::uint64_t gathered = stage < 3 ? psi : 2 * psi;
    EXPECT_EQ(z.data.bytes_of(CommOp::reduce_scatter), steps * psi) << "stage " << stage;
    EXPECT_EQ(z.data.bytes_of(CommOp::all_gather), steps * gathered) << "stage " << stage;
    EXPECT_EQ(z.data.bytes_of(CommOp::all_reduce),
              steps * (z.persistent * sizeof(float) + sizeof(double)))
        << "stage " << stage;  // persistent grads, the loss
    EXPECT_EQ(z.world.bytes_of(CommOp::all_reduce), steps * 2 * sizeof(double)) << "stage " << stage;
  }
}
