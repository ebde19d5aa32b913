// Data-parallel equivalence: N ranks with per-rank batch B train the same
// model as one rank with batch N*B; gather mode equals all-reduce mode; bucket
// sizes and gradient accumulation do not change the result. TrainedRun with 4 ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include <memory>

#include "comm/mpi_communicator.hpp"
#include "io/deck.hpp"
#include "io/token_shard.hpp"
#include "support/test_support.hpp"
#include "parallel/data/grad_buckets.hpp"
#include "train/trainer.hpp"

using namespace trident;
using trident::testing::first_ranks;
using trident::testing::rel_diff;

namespace {

constexpr int kSteps = 20;
constexpr double kTol = 1e-5;  // norm-wise relative, per tensor (fp32)

struct TrainedRun {
  std::vector<float> params;
  std::vector<double> losses;
  std::uint64_t data_all_reduces = 0;
  std::size_t buckets = 0;
  TensorTable table;
};

const std::string& shards() {
  static std::string dir;
  if (dir.empty()) {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    dir = trident::testing::scratch_dir("dp_r" + std::to_string(r));
    trident::testing::make_text_shard(dir, "train.bin", 60000);
    trident::testing::make_text_shard(dir, "val.bin", 4000);
  }
  return dir;
}

TrainedRun train_on(MPI_Comm comm, const std::vector<std::string>& sets) {
  const std::string deck_text = trident::testing::tiny_deck(
      shards() + "/train.bin", shards() + "/val.bin", "steps = 20\n");
  Deck d = parse_deck(deck_text, "dp.toml", sets);
  int world = 0;
  MPI_Comm_size(comm, &world);
  GridShape shape = resolve_layout(d, world);
  Grid grid(comm, shape);
  auto be = make_cpu_backend(1);
  MemoryLedger ledger;
  TokenDataset train(d.data.train, d.model.seq_len, "data.train");
  Trainer tr(d, grid, *be, ledger, train, nullptr);
  TrainedRun run;
  for (int s = 0; s < kSteps; ++s) run.losses.push_back(tr.step(s).loss);
  const Arena& p = tr.model().params();
  run.params.assign(p.f32(), p.f32() + p.numel());
  // Gradients and the loss are reduced over data x context (at cp 1, the data ranks).
  run.data_all_reduces = grid.data_context().stats().calls_of(CommOp::all_reduce);
  run.table = tr.model().param_table();
  return run;
}

// Compares every parameter tensor norm-wise. The key slice of attn.qkv.b is
// left out: its exact gradient is zero (a bias added to every key shifts each
// softmax row uniformly), so in fp32 it is pure rounding noise whose sign
// depends on summation order, and Adam turns noise into lr-sized steps. The
// q and v slices of the same tensor are compared as usual.
void expect_same_model(const TrainedRun& a, const TrainedRun& ref, double tol, const char* what) {
  for (const TensorInfo& t : ref.table.tensors()) {
    const float *x = a.params.data() + t.offset, *y = ref.params.data() + t.offset;
    if (t.name.ends_with("attn.qkv.b")) {
      const std::size_t C = t.numel / 3;
      EXPECT_LE(rel_diff(x, y, C), tol) << what << ": " << t.name << " (q)";
      EXPECT_LE(rel_diff(x + 2 * C, y + 2 * C, C), tol) << what << ": " << t.name << " (v)";
      continue;
    }
    EXPECT_LE(rel_diff(x, y, t.numel), tol) << what << ": " << t.name;
  }
  ASSERT_EQ(a.losses.size(), ref.losses.size());
  for (std::size_t i = 0; i < a.losses.size(); ++i)
    EXPECT_NEAR(a.losses[i], ref.losses[i], tol * std::abs(ref.losses[i])) << what << " step " << i;
}


}  // namespace

TEST(DataParallel, NRanksWithBatchBEqualOneRankWithBatchNB) {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  for (int n : {2, 4}) {
    if (n > world) continue;
    const int B = 2;
    const std::string batch = "train.batch=" + std::to_string(n * B);
    MPI_Comm group = first_ranks(n);
    if (group == MPI_COMM_NULL) continue;
    TrainedRun serial = train_on(MPI_COMM_SELF, {batch, "train.micro_batch=" + std::to_string(n * B)});
    TrainedRun dp = train_on(group, {batch, "train.micro_batch=" + std::to_string(B)});
    expect_same_model(dp, serial, kTol, n == 2 ? "dp=2" : "dp=4");
    EXPECT_LT(serial.losses.back(), serial.losses.front() - 0.5) << "the model did not learn";
    // Every replica holds bit-identical weights.
    std::vector<float> first(dp.params);
    MPI_Bcast(first.data(), int(first.size()), MPI_FLOAT, 0, group);
    int same = first == dp.params, all = 0;
    MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, group);
    EXPECT_EQ(all, 1) << "replicas diverged";
    MPI_Comm_free(&group);
  }
}

TEST(DataParallel, GatherModeEqualsAllReduceMode) {
  TrainedRun ar = train_on(MPI_COMM_WORLD, {"train.batch=8"});
  TrainedRun ga = train_on(MPI_COMM_WORLD, {"train.batch=8", "parallel.dp_mode=\"gather\""});
  expect_same_model(ga, ar, kTol, "gather vs allreduce");
}

TEST(DataParallel, BucketSizeOnlyChangesHowManyAllReduces) {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world < 2) GTEST_SKIP() << "needs two ranks";
  TrainedRun one = train_on(MPI_COMM_WORLD, {"train.batch=8", "parallel.bucket_mb=1000"});
  TrainedRun many = train_on(MPI_COMM_WORLD, {"train.batch=8", "parallel.bucket_mb=0.004"});
  expect_same_model(many, one, 1e-6, "small buckets");
  // One all-reduce per bucket per step, plus one for the loss.
  const auto buckets_one = plan_grad_buckets(one.table, 1000ull << 20).size();
  const auto buckets_many = plan_grad_buckets(many.table, std::size_t(0.004 * (1 << 20))).size();
  EXPECT_EQ(buckets_one, 1u);
  EXPECT_GT(buckets_many, 10u);
  EXPECT_EQ(one.data_all_reduces, kSteps * (buckets_one + 1));
  EXPECT_EQ(many.data_all_reduces, kSteps * (buckets_many + 1));
}

TEST(DataParallel, GradientAccumulationEqualsOneLargeMicroBatch) {
  TrainedRun accum = train_on(MPI_COMM_SELF, {"train.batch=8", "train.micro_batch=2"});
  TrainedRun whole = train_on(MPI_COMM_SELF, {"train.batch=8", "train.micro_batch=8"});
  expect_same_model(accum, whole, kTol, "accumulation");
}
