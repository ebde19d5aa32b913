// Resuming training from checkpoints, through the trainer and the
// checkpointer the binary uses (run with 4 ranks). Under the same layout, N
// steps + save + restart + N steps equals 2N straight steps bit for bit; under
// another layout (data-parallel degree, dp_mode) the continuation matches the
// original within fp32 reduction-order noise.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>

#include "comm/agree.hpp"
#include "core/error.hpp"
#include "io/deck.hpp"
#include "io/token_shard.hpp"
#include "support/test_support.hpp"
#include "train/checkpoint_state.hpp"
#include "train/checkpointer.hpp"
#include "train/trainer.hpp"

using namespace trident;
using trident::testing::first_ranks;
using trident::testing::rel_diff;

namespace {

constexpr int kSteps = 20, kSaveAt = 10;
constexpr double kTol = 1e-5;  // relative, across layouts (fp32 summation order)

struct Trained {
  std::vector<double> losses;  // of the steps this run took
  std::vector<float> params;
  TensorTable table;
};

const std::string& shards() {
  static std::string dir;
  if (dir.empty()) {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    dir = trident::testing::scratch_dir("resume_r" + std::to_string(r));
    trident::testing::make_text_shard(dir, "train.bin", 60000);
  }
  return dir;
}

std::string ckpt_dir(const std::string& name) {
  return trident::testing::scratch_dir("resume_ckpt") + "/" + name;
}


// Trains on the first `ranks` ranks with checkpoints every kSaveAt steps into
// ckpt_dir(name), from `resume` (a file) when given, up to kSteps.
Trained train(int ranks, const std::string& name, std::vector<std::string> sets,
          const std::string& resume = "") {
  Trained run;
  MPI_Comm comm = first_ranks(ranks);
  if (comm == MPI_COMM_NULL) return run;
  sets.push_back("checkpoint.dir=\"" + ckpt_dir(name) + "\"");
  sets.push_back("checkpoint.every=" + std::to_string(kSaveAt));
  sets.push_back("checkpoint.keep=0");
  // lr 1e-3: across layouts Adam amplifies fp32 summation-order noise less.
  const std::string text = trident::testing::tiny_deck(
      shards() + "/train.bin", shards() + "/train.bin",
      "steps = " + std::to_string(kSteps) + "\nbatch = 8\n");
  sets.insert(sets.begin(), {"train.lr=1e-3", "model.layers=4", "zero.persistence_threshold=1000"});
  Deck d = parse_deck(text, name + ".toml", sets);
  {
    Grid grid(comm, resolve_layout(d, ranks));
    auto be = make_cpu_backend(1);
    MemoryLedger ledger;
    TokenDataset data(d.data.train, d.model.seq_len, "data.train");
    Trainer tr(d, grid, *be, ledger, data, nullptr);
    Checkpointer ck(d, grid, tr);
    const int first = resume.empty() ? 0 : ck.resume(resume);
    for (int s = first; s < kSteps; ++s) {
      run.losses.push_back(tr.step(s).loss);
      EXPECT_FALSE(ck.after_step(s + 1));
    }
    run.params = trident::testing::gather_global_params(tr, grid, d.model, run.table);
  }
  MPI_Comm_free(&comm);
  return run;
}

std::string step_file(const std::string& name, int step) {
  return ckpt_dir(name) + "/step_" + std::string(6 - std::to_string(step).size(), '0') +
         std::to_string(step) + ".h5";
}

// Losses compared as bits, and the final weights.
void expect_bit_exact(const Trained& resumed, const Trained& straight, const std::string& what) {
  ASSERT_EQ(resumed.losses.size(), std::size_t(kSteps - kSaveAt)) << what;
  for (int i = 0; i < kSteps - kSaveAt; ++i) {
    const double a = resumed.losses[i], b = straight.losses[kSaveAt + i];
    EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0) << what << ": step " << kSaveAt + i + 1 << " loss "
                                               << a << " vs " << b;
  }
  EXPECT_EQ(resumed.params, straight.params) << what << ": final weights differ";
}

// Within kTol, per tensor; the key slice of attn.qkv.b is left out (its exact
// gradient is zero, so in fp32 it is summation-order noise; see docs/testing.md).
void expect_close(const Trained& resumed, const Trained& straight, const std::string& what) {
  ASSERT_EQ(resumed.losses.size(), std::size_t(kSteps - kSaveAt)) << what;
  for (int i = 0; i < kSteps - kSaveAt; ++i)
    EXPECT_NEAR(resumed.losses[i], straight.losses[kSaveAt + i],
                kTol * std::abs(straight.losses[kSaveAt + i])) << what << ": step " << i;
  for (const TensorInfo& t : straight.table.tensors()) {
    const float *x = resumed.params.data() + t.offset, *y = straight.params.data() + t.offset;
    if (t.name.ends_with("attn.qkv.b")) {
      const std::size_t C = t.numel / 3;
      EXPECT_LE(rel_diff(x, y, C), kTol) << what << ": " << t.name << " (q)";
      EXPECT_LE(rel_diff(x + 2 * C, y + 2 * C, C), kTol) << what << ": " << t.name << " (v)";
    } else {
      EXPECT_LE(rel_diff(x, y, t.numel), kTol) << what << ": " << t.name;
    }
  }
}

bool is_root() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r == 0;
}

}  // namespace

// The straight runs of each layout, shared by the tests below (each also
// writes its checkpoints at steps 10 and 20).
class Resume : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dp1 = new Trained(train(1, "dp1", {}));
    dp2 = new Trained(train(2, "dp2", {}));
    dp4 = new Trained(train(4, "dp4", {}));
    dp4_gather = new Trained(train(4, "dp4_gather", {"parallel.dp_mode=gather"}));
    tp2 = new Trained(train(2, "tp2", {"parallel.tp=2"}));
    pp2 = new Trained(train(2, "pp2", {"parallel.pp=2", "parallel.schedule=\"1f1b\""}));
    zero3 = new Trained(train(4, "zero3", {"zero.stage=3"}));
    three_d = new Trained(train(8, "3d", {"parallel.tp=2", "parallel.pp=2", "zero.stage=1"}));
  }
  static void TearDownTestSuite() {
    delete dp1, delete dp2, delete dp4, delete dp4_gather;
    delete tp2, delete pp2, delete zero3, delete three_d;
  }
  static Trained *dp1, *dp2, *dp4, *dp4_gather, *tp2, *pp2, *zero3, *three_d;
};
Trained *Resume::dp1, *Resume::dp2, *Resume::dp4, *Resume::dp4_gather, *Resume::tp2, *Resume::pp2,
    *Resume::zero3, *Resume::three_d;

TEST_F(Resume, EveryParallelismContinuesBitExactly) {
  const Trained a = train(2, "tp2_again", {"parallel.tp=2"}, step_file("tp2", kSaveAt));
  const Trained b = train(2, "pp2_again", {"parallel.pp=2", "parallel.schedule=\"1f1b\""},
                          step_file("pp2", kSaveAt));
  const Trained c = train(4, "zero3_again", {"zero.stage=3"}, step_file("zero3", kSaveAt));
  const Trained d = train(8, "3d_again", {"parallel.tp=2", "parallel.pp=2", "zero.stage=1"},
                          step_file("3d", kSaveAt));
  if (!is_root()) return;
  expect_bit_exact(a, *tp2, "tp=2");
  expect_bit_exact(b, *pp2, "pp=2 1f1b");
  expect_bit_exact(c, *zero3, "ZeRO-3 dp=4");
  expect_bit_exact(d, *three_d, "dp2 tp2 pp2 ZeRO-1");
}

// 16-bit runs save their f32 masters and the loss scaler: fp16 with a live
// scale (it grows every 4 clean steps, so it changes before and after the
// checkpoint) in dp2 tp2 pp2 with ZeRO-2, and bf16 at dp=2 with bf16
// gradients, continue bit for bit.
TEST(ResumePrecision, SixteenBitRunsContinueBitExactly) {
  const std::vector<std::string> fp16 = {"parallel.tp=2", "parallel.pp=2", "zero.stage=2",
                                         "precision.dtype=\"fp16\"", "precision.initial_scale=256",
                                         "precision.growth_interval=4"};
  const std::vector<std::string> bf16 = {"precision.dtype=\"bf16\"",
                                         "precision.reduce_dtype=\"bf16\""};
  const int ranks = std::min(8, trident::testing::world_size());
  const Trained f = train(ranks, "fp16_3d", fp16);
  const Trained f_again = train(ranks, "fp16_3d_again", fp16, step_file("fp16_3d", kSaveAt));
  const Trained b = train(2, "bf16_dp2", bf16);
  const Trained b_again = train(2, "bf16_dp2_again", bf16, step_file("bf16_dp2", kSaveAt));
  if (!is_root()) return;
  expect_bit_exact(f_again, f, "fp16 dp2 tp2 pp2 ZeRO-2, live loss scale");
  expect_bit_exact(b_again, b, "bf16 dp=2, bf16 gradients");
}

// ZeRO-3 with the token embedding cut into units of row pieces, at both ends
// of a pipeline (the tied copies summed slice by slice): each rank's slices of
// the table are one range of it, saved and reloaded as any ZeRO range.
TEST(ResumeCutTable, Zero3ContinuesBitExactlyAndReshardsToSerial) {
  const std::vector<std::string> cut = {"zero.stage=3", "zero.table_units=3", "parallel.pp=2",
                                        "parallel.schedule=\"1f1b\""};
  const Trained z = train(4, "zero3_cut", cut);
  const Trained again = train(4, "zero3_cut_again", cut, step_file("zero3_cut", kSaveAt));
  const Trained serial = train(1, "zero3_cut_to_1", {}, step_file("zero3_cut", kSaveAt));
  if (!is_root()) return;
  expect_bit_exact(again, z, "ZeRO-3 dp2 pp2, table in 3 units");
  expect_close(serial, z, "ZeRO-3 dp2 pp2 table cut -> serial");
}

TEST_F(Resume, CheckpointsReshardAcrossEveryParallelism) {
  // Written under one layout, continued under another; compared with the
  // writer's own continuation.
  const Trained tp_to_1 = train(1, "tp2_to_1", {}, step_file("tp2", kSaveAt));
  const Trained pp_to_4 = train(4, "pp2_to_4", {"parallel.pp=4", "parallel.schedule=\"gpipe\""},
                                step_file("pp2", kSaveAt));
  const Trained z3_to_z1 = train(2, "zero3_to_zero1", {"zero.stage=1"}, step_file("zero3", kSaveAt));
  const Trained d3_to_1 = train(1, "3d_to_serial", {}, step_file("3d", kSaveAt));
  const Trained serial_to_3d = train(8, "serial_to_3d",
                                     {"parallel.tp=2", "parallel.pp=2", "zero.stage=2",
                                      "parallel.sequence_parallel=true"},
                                     step_file("dp1", kSaveAt));
  if (!is_root()) return;
  expect_close(tp_to_1, *tp2, "tp2 -> tp1");
  expect_close(pp_to_4, *pp2, "pp2 1f1b -> pp4 gpipe");
  expect_close(z3_to_z1, *zero3, "ZeRO-3 dp4 -> ZeRO-1 dp2");
  expect_close(d3_to_1, *three_d, "dp2 tp2 pp2 -> serial");
  expect_close(serial_to_3d, *dp1, "serial -> dp2 tp2 pp2 SP ZeRO-2");
}

// zb-v runs both ends of the pipeline, and so both copies of the tied
// embedding, on one rank: a load fills both (with one left at its initial
// values the losses part at the first step after the resume).
TEST_F(Resume, VPlacementReadsBothTiedCopies) {
  const std::vector<std::string> zb_v = {"parallel.pp=2", "parallel.schedule=\"zb-v\""};
  const std::vector<std::string> zb_v_zero3 = {"parallel.pp=2", "parallel.schedule=\"zb-v\"",
                                               "zero.stage=3"};
  const Trained v = train(2, "zbv", zb_v);
  const Trained again = train(2, "zbv_again", zb_v, step_file("zbv", kSaveAt));
  const Trained from_serial = train(4, "serial_to_zbv_zero3", zb_v_zero3, step_file("dp1", kSaveAt));
  if (!is_root()) return;
  expect_bit_exact(again, v, "zb-v pp2");
  expect_close(from_serial, *dp1, "serial -> zb-v pp2 dp2 ZeRO-3");
}

TEST_F(Resume, SameLayoutContinuesBitExactly) {
  const Trained a = train(1, "dp1_again", {}, step_file("dp1", kSaveAt));
  const Trained b = train(2, "dp2_again", {}, step_file("dp2", kSaveAt));
  const Trained c = train(4, "dp4_again", {}, step_file("dp4", kSaveAt));
  const Trained d = train(4, "dp4_gather_again", {"parallel.dp_mode=gather"},
                      step_file("dp4_gather", kSaveAt));
  if (!is_root()) return;
  expect_bit_exact(a, *dp1, "dp=1");
  expect_bit_exact(b, *dp2, "dp=2");
  expect_bit_exact(c, *dp4, "dp=4");
  expect_bit_exact(d, *dp4_gather, "dp=4 gather");
}

TEST_F(Resume, AnotherLayoutContinuesWithinFp32Noise) {
  const Trained a = train(2, "dp4_to_dp2", {}, step_file("dp4", kSaveAt));
  const Trained b = train(1, "dp2_to_dp1", {}, step_file("dp2", kSaveAt));
  const Trained c = train(4, "dp1_to_dp4", {}, step_file("dp1", kSaveAt));
  const Trained d = train(4, "allreduce_to_gather", {"parallel.dp_mode=gather"},
                      step_file("dp4", kSaveAt));
  if (!is_root()) return;
  expect_close(a, *dp4, "dp4 -> dp2");
  expect_close(b, *dp2, "dp2 -> dp1");
  expect_close(c, *dp1, "dp1 -> dp4");
  expect_close(d, *dp4, "allreduce -> gather");
}

TEST_F(Resume, TheFinalCheckpointHoldsTheFinalWeights) {
  // Resuming the step-20 checkpoint runs no step and leaves its weights as they were.
  const Trained end = train(2, "dp2_end", {}, step_file("dp2", kSteps));
  if (!is_root()) return;
  EXPECT_TRUE(end.losses.empty());
  EXPECT_EQ(end.params, dp2->params);
}

TEST_F(Resume, AnotherModelIsRefusedNamingTheKey) {
  int code = 0;
  std::string msg;
  try {
    train(2, "dp2_wider", {"model.d_model=64"}, step_file("dp2", kSaveAt));
  } catch (const AgreedError& e) {
    code = e.exit_code, msg = e.what();
  }
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  if (r >= 2) return;  // not in the run
  EXPECT_EQ(code, kExitBadInput);
  EXPECT_NE(msg.find("model.d_model = 32 in the checkpoint but 64 in the deck"),
            std::string::npos) << msg;
}

TEST(Checkpoint, ChangedHyperparametersAreListed) {
  Deck d = parse_deck(trident::testing::tiny_deck("x.bin", "x.bin"), "t.toml", {});
  CheckpointMeta m;
  m.train = d.train;
  EXPECT_TRUE(changed_hyperparameters(m, d).empty());
  m.train.lr = 0.5;
  m.train.batch = 4;
  const auto changes = changed_hyperparameters(m, d);
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0], "train.batch = 8 in the deck, 4 in the checkpoint");
  EXPECT_EQ(changes[1], "train.lr = 0.01 in the deck, 0.5 in the checkpoint");
}
