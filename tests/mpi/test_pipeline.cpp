// Pipeline parallelism: every synchronous schedule at pp in {2, 4} and several
// micro-batch counts, and 3D layouts (the zero-bubble schedules also with SP,
// recompute and ZeRO 1-3; in bf16 equal to 1F1B), train the serial model (loss every step,
// gathered gradients after 10 steps, 1e-5 relative); stage 0 keeps as many
// micro-batches' activations as theory says, and zb-h1 and zb-v's measured
// peak stays within 1F1B's; the profile partitioner finds the brute-force
// optimum. Run with 8 ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include <fmt/format.h>

#include <map>
#include <random>

#include "io/deck.hpp"
#include "io/token_shard.hpp"
#include "parallel/pipeline/partition.hpp"
#include "plan/estimate.hpp"
#include "support/test_support.hpp"
#include "train/trainer.hpp"

using namespace trident;
using trident::testing::first_ranks;
using trident::testing::world_size;

namespace {

constexpr int kSteps = 10;
constexpr double kTol = 1e-5;
using GlobalTensors = std::map<std::string, std::vector<float>>;

struct PipeRun {
  std::vector<double> losses;
  double val_loss = 0;  // evaluation after the last step
  GlobalTensors grads;
  double activation_bytes = 0;
  int stage0_slots = 0;
};

const std::string& shard_dir() {
  static const std::string dir = trident::testing::rank_shard_dir("pp", 40000);
  return dir;
}

// Every tensor of the serial model, assembled from the stages and shards.
GlobalTensors gather_global(Trainer& tr, Grid& grid, const GptConfig& c) {
  GlobalTensors out;
  const TensorTable serial = build_gpt_param_table(c);  // a local: tensors() is a reference
  for (const TensorInfo& g : serial.tensors()) {
    std::size_t n = 1;
    for (auto d : g.global_shape) n *= std::size_t(d);
    std::vector<float> buf(n, 0.0f);
    for (ModelChunk& ch : tr.chunks()) {
      const TensorInfo* t = ch.model->param_table().find(g.name);
      if (!t || !t->primary || grid.coord().dp != 0 || (t->split_dim < 0 && grid.coord().tp != 0))
        continue;
      for (std::size_t i = 0; i < t->numel; ++i)
        if (auto gi = t->global_index(i); gi >= 0) buf[std::size_t(gi)] = ch.model->grads().f32(*t)[i];
    }
    grid.world().all_reduce(buf.data(), n, DType::f32, ReduceOp::sum);
    out[g.name] = std::move(buf);
  }
  return out;
}

PipeRun train(MPI_Comm comm, const std::vector<std::string>& sets) {
  // lr 1e-3 (GPT-2 small trains at 6e-4): a realistic rate at which Adam's
  // amplification of fp32 summation-order noise stays well inside 1e-5.
  // A schedule that deadlocks fails in a minute, naming the stuck transfer.
  std::vector<std::string> all = {"train.lr=1e-3", "model.layers=8", "train.micro_batch=1",
                                  "system.comm_timeout_s=60"};
  all.insert(all.end(), sets.begin(), sets.end());
  const std::string text = trident::testing::tiny_deck(shard_dir() + "/train.bin",
                                                       shard_dir() + "/train.bin", "");
  Deck d = parse_deck(text, "pp.toml", all);
  int world = 0;
  MPI_Comm_size(comm, &world);
  Grid grid(comm, resolve_layout(d, world));
  auto be = make_cpu_backend(1);
  MemoryLedger ledger;
  TokenDataset data(d.data.train, d.model.seq_len, "data.train");
  Trainer tr(d, grid, *be, ledger, data, &data);
  PipeRun run;
  for (int s = 0; s < kSteps; ++s) run.losses.push_back(tr.step(s).loss);
  run.val_loss = tr.evaluate();
  if (d.zero.stage == 0) run.grads = gather_global(tr, grid, d.model);  // ZeRO: losses only
  run.activation_bytes = double(ledger.peak(MemCategory::activations));
  run.stage0_slots = int(tr.chunks().front().slots.size());
  return run;
}



void expect_serial(const PipeRun& run, const PipeRun& serial, const std::string& what,
                   double& worst) {
  for (int s = 0; s < kSteps; ++s) {
    const double rel = std::abs(run.losses[s] - serial.losses[s]) / serial.losses[s];
    worst = std::max(worst, rel);
    EXPECT_LE(rel, kTol) << what << " step " << s;
  }
  const double val = std::abs(run.val_loss - serial.val_loss) / serial.val_loss;
  worst = std::max(worst, val);
  EXPECT_LE(val, kTol) << what << " evaluation";
  for (const auto& [name, g] : serial.grads) {
    const double rel = trident::testing::rel_diff(run.grads.at(name).data(), g.data(), g.size());
    worst = std::max(worst, rel);
    if (rel > kTol) ADD_FAILURE() << what << ": gradient " << name << " differs by " << rel;
  }
}

}  // namespace

TEST(Pipeline, EverySynchronousScheduleTrainsTheSerialModel) {
  double worst = 0;
  for (int pp : {2, 4}) {
    if (pp > world_size()) continue;
    MPI_Comm comm = first_ranks(pp);
    if (comm == MPI_COMM_NULL) continue;
    for (int m : {1, pp, 2 * pp}) {
      const std::string batch = "train.batch=" + std::to_string(m);
      const PipeRun serial = train(MPI_COMM_SELF, {batch});
      for (const char* sched : {"naive", "gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v"}) {
        const bool inter = std::string(sched) == "interleaved";
        if (inter && m % pp != 0) continue;  // interleaving needs whole groups of pp
        const PipeRun run = train(comm, {batch, "parallel.pp=" + std::to_string(pp),
                                         fmt::format("parallel.schedule=\"{}\"", sched),
                                         inter ? "parallel.virtual_stages=2" : "parallel.virtual_stages=1"});
        expect_serial(run, serial, fmt::format("pp={} m={} {}", pp, m, sched), worst);
      }
    }
    MPI_Comm_free(&comm);
  }
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  if (r == 0) std::printf("worst relative difference to serial: %.2e\n", worst);
}

TEST(Pipeline, ThreeDimensionalLayoutsTrainTheSerialModel) {
  if (world_size() < 8) GTEST_SKIP() << "needs 8 ranks";
  const PipeRun serial = train(MPI_COMM_SELF, {"train.batch=8"});
  double worst = 0;
  for (const char* sched : {"gpipe", "1f1b", "interleaved"}) {
    for (const char* sp : {"false", "true"}) {
      const bool inter = std::string(sched) == "interleaved";
      const PipeRun run = train(MPI_COMM_WORLD,
                                {"train.batch=8", "parallel.pp=2", "parallel.tp=2",
                                 fmt::format("parallel.sequence_parallel={}", sp),
                                 fmt::format("parallel.schedule=\"{}\"", sched),
                                 inter ? "parallel.virtual_stages=2" : "parallel.virtual_stages=1"});
      expect_serial(run, serial, fmt::format("dp2 tp2 pp2 {} sp={}", sched, sp), worst);
    }
  }
  for (const char* zero : {"1", "2", "3"}) {  // ZeRO with pipelining too
    const PipeRun run = train(MPI_COMM_WORLD, {"train.batch=8", "parallel.pp=2", "parallel.tp=2",
                                               std::string("zero.stage=") + zero,
                                               "zero.persistence_threshold=1000"});
    for (int s = 0; s < kSteps; ++s)
      EXPECT_NEAR(run.losses[s], serial.losses[s], kTol * serial.losses[s]) << "zero " << zero;
  }
}

TEST(Pipeline, ZeroBubbleSchedulesTrainTheSerialModelIn3D) {
  if (world_size() < 8) GTEST_SKIP() << "needs 8 ranks";
  const PipeRun serial = train(MPI_COMM_SELF, {"train.batch=8"});
  const std::vector<std::vector<std::string>> layouts = {
      {},
      {"parallel.sequence_parallel=true"},
      {"parallel.sequence_parallel=true", "train.recompute=\"full\""},
      {"train.recompute=\"selective\""},
      {"zero.stage=1"},
      {"zero.stage=2", "parallel.sequence_parallel=true"},
      {"zero.stage=3", "zero.persistence_threshold=1000", "train.recompute=\"full\""}};
  double worst = 0;
  for (const char* sched : {"zb-h1", "zb-h2", "zb-v"}) {
    for (const auto& extra : layouts) {
      std::vector<std::string> sets = {"train.batch=8", "parallel.pp=2", "parallel.tp=2",
                                       fmt::format("parallel.schedule=\"{}\"", sched)};
      sets.insert(sets.end(), extra.begin(), extra.end());
      std::string what = fmt::format("dp2 tp2 pp2 {}", sched);
      for (const auto& e : extra) what += " " + e;
      PipeRun run = train(MPI_COMM_WORLD, sets);
      if (run.grads.empty()) run.grads = serial.grads;  // ZeRO: losses only, as above
      expect_serial(run, serial, what, worst);
    }
    // bf16: B and W apart are the same ops as together, so 1F1B's run exactly.
    const std::vector<std::string> bf16 = {"train.batch=8", "parallel.pp=2", "parallel.tp=2",
                                           "parallel.sequence_parallel=true",
                                           "precision.dtype=\"bf16\""};
    auto with = [&](const char* s) {
      auto v = bf16;
      v.push_back(fmt::format("parallel.schedule=\"{}\"", s));
      return v;
    };
    const PipeRun f1b = train(MPI_COMM_WORLD, with("1f1b")), zb = train(MPI_COMM_WORLD, with(sched));
    EXPECT_EQ(zb.losses, f1b.losses) << sched << " bf16";
  }
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  if (r == 0) std::printf("zero bubble in 3D: worst relative difference to serial: %.2e\n", worst);
}

TEST(Pipeline, StageZeroKeepsPpMicroBatchesUnder1F1BAndMUnderGPipe) {
  if (world_size() < 4) GTEST_SKIP() << "needs 4 ranks";
  MPI_Comm comm = first_ranks(4);
  if (comm == MPI_COMM_NULL) return;
  const int m = 8;
  const PipeRun f1b = train(comm, {"train.batch=8", "parallel.pp=4", "parallel.schedule=\"1f1b\""});
  const PipeRun gp = train(comm, {"train.batch=8", "parallel.pp=4", "parallel.schedule=\"gpipe\""});
  int r = 0;
  MPI_Comm_rank(comm, &r);
  if (r == 0) {  // stage 0
    EXPECT_EQ(f1b.stage0_slots, 4);
    EXPECT_EQ(gp.stage0_slots, m);
    // The activation counter: slots x one micro-batch's saved activations + scratch.
    const GptConfig c{8, 32, 4, 16, 257};
    TensorTable saved = GptModel::saved_activation_table(c, TokenLayout(1, c.seq_len), {}, StageSpec{0, 2, true, false});
    saved.align_end(TensorTable::kAlign);
    const double scratch = double(GptModel::scratch_table(c, TokenLayout(1, c.seq_len), {}, {}).size()) * 4;
    auto expect = [&](int slots) { return (double(saved.size()) * slots) * 4 + scratch + 2.0 * 16 * slots * 4; };
    EXPECT_EQ(f1b.activation_bytes, expect(4));
    EXPECT_EQ(gp.activation_bytes, expect(m));
  }
  MPI_Comm_free(&comm);
}

// Qi et al. 2024, sections 3.1 and 6: ZB-H1 and ZB-V within 1F1B's peak
// activation memory. Measured by the ledger (slots, W buffers, working
// buffers and scratch): the peak over the ranks against 1F1B's (stage 0's p
// micro-batches), within 5%. zb-h1's later stages hold more than under 1F1B,
// never more than stage 0 does under it.
TEST(Pipeline, ZeroBubblePeakActivationsStayWithin1F1B) {
  for (int pp : {2, 4}) {
    if (pp > world_size()) continue;
    MPI_Comm comm = first_ranks(pp);
    if (comm == MPI_COMM_NULL) continue;
    for (int m : {pp, 2 * pp}) {
      auto peak = [&](const char* sched) {
        return train(comm, {fmt::format("train.batch={}", m), fmt::format("parallel.pp={}", pp),
                            fmt::format("parallel.schedule=\"{}\"", sched)})
            .activation_bytes;
      };
      const double f1b = peak("1f1b"), h1 = peak("zb-h1"), v = peak("zb-v");
      double maxima[3] = {f1b, h1, v};
      MPI_Allreduce(MPI_IN_PLACE, maxima, 3, MPI_DOUBLE, MPI_MAX, comm);
      int r = 0;
      MPI_Comm_rank(comm, &r);
      EXPECT_LE(maxima[1], 1.05 * maxima[0]) << "zb-h1 pp=" << pp << " m=" << m;
      EXPECT_LE(maxima[2], 1.05 * maxima[0]) << "zb-v pp=" << pp << " m=" << m;
      if (r == 0)
        std::printf("pp=%d m=%d peak activation bytes over the ranks: 1f1b %.0f, zb-h1 %.0f, "
                    "zb-v %.0f\n", pp, m, maxima[0], maxima[1], maxima[2]);
    }
    MPI_Comm_free(&comm);
  }
}

TEST(Pipeline, ChunksOfARankShareOneWorkingBufferAsTheEstimatorCounts) {
  // Two chunks per rank (interleaved, zb-v) hold one working buffer and
  // scratch between them: rank 0's activation bytes are the estimator's.
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  MPI_Comm comm = first_ranks(2);
  if (comm == MPI_COMM_NULL) return;
  for (const char* sched : {"interleaved", "zb-v"}) {
    const std::vector<std::string> sets = {"train.batch=4", "parallel.pp=2",
                                           fmt::format("parallel.schedule=\"{}\"", sched),
                                           std::string("parallel.virtual_stages=2")};
    const PipeRun run = train(comm, sets);
    // A schedule that deadlocks fails in a minute, naming the stuck transfer.
  std::vector<std::string> all = {"train.lr=1e-3", "model.layers=8", "train.micro_batch=1",
                                  "system.comm_timeout_s=60"};
    all.insert(all.end(), sets.begin(), sets.end());
    Deck d = parse_deck(trident::testing::tiny_deck(shard_dir() + "/train.bin",
                                                    shard_dir() + "/train.bin", ""),
                        "pp.toml", all);
    const GridShape shape = resolve_layout(d, 2);
    const MemoryEstimate e = estimate_memory(d, shape, d.zero.stage);
    int r = 0;
    MPI_Comm_rank(comm, &r);
    if (r == 0) EXPECT_EQ(run.activation_bytes, e.bytes[int(MemCategory::activations)]) << sched;
  }
  MPI_Comm_free(&comm);
}

TEST(Partition, DynamicProgramFindsTheBruteForceOptimum) {
  std::mt19937 gen(5);
  std::uniform_real_distribution<double> cost(0.1, 3.0);
  for (int trial = 0; trial < 200; ++trial) {
    StageCosts c;
    c.block.resize(4 + trial % 7);
    for (auto& b : c.block) b = cost(gen);
    c.first = cost(gen), c.last = cost(gen), c.boundary = cost(gen) * 0.2;
    const int stages = 2 + trial % 3;
    if (stages > int(c.block.size())) continue;
    const Partition p = partition_min_max(c, stages);
    const auto sc = stage_costs(c, p);
    EXPECT_NEAR(*std::max_element(sc.begin(), sc.end()), brute_force_min_max(c, stages), 1e-12);
    EXPECT_EQ(p.front(), 0);
    EXPECT_EQ(p.back(), int(c.block.size()));
    for (int s = 0; s < stages; ++s) EXPECT_LT(p[s], p[s + 1]);  // every stage has a block
  }
  // Unequal costs move blocks away from the expensive ends.
  StageCosts c{{1, 1, 1, 1, 1, 1, 1, 1}, 3, 3, 0};
  EXPECT_EQ(partition_min_max(c, 2), (Partition{0, 4, 8}));
  c.last = 5;
  EXPECT_EQ(partition_min_max(c, 2), (Partition{0, 5, 8}));
}
