// Mixed precision: bf16 and fp16 track the fp32 run of the same layout over
// 50 steps, serially and in a 3D layout; 16-bit weights are exactly the
// rounded f32 masters; an injected overflow on one rank skips the step on
// every rank, leaves every weight bit-identical and halves the loss scale once
// the hysteresis runs out. Run with 8 ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/half.hpp"
#include "io/deck.hpp"
#include "io/token_shard.hpp"
#include "support/test_support.hpp"
#include "train/trainer.hpp"

using namespace trident;
using trident::testing::first_ranks;
using trident::testing::world_rank;

namespace {

const std::string& shard_dir() {
  static const std::string dir = trident::testing::rank_shard_dir("precision", 60000);
  return dir;
}

Deck make_deck(std::vector<std::string> sets, int ranks) {
  // lr 3e-3: at the tiny deck's 1e-2 one window of this text makes a loss
  // spike whose height is chaotic in any precision.
  const std::vector<std::string> base = {"model.layers=4", "train.batch=8", "train.micro_batch=2",
                                         "train.steps=50", "train.lr=3e-3"};
  sets.insert(sets.begin(), base.begin(), base.end());
  const std::string text = trident::testing::tiny_deck(shard_dir() + "/train.bin",
                                                       shard_dir() + "/train.bin");
  Deck d = parse_deck(text, "precision.toml", sets);
  resolve_layout(d, ranks);
  return d;
}

// Losses of `steps` steps of the first `ranks` ranks (empty on the others).
std::vector<double> losses(int ranks, const std::vector<std::string>& sets, int steps) {
  std::vector<double> out;
  MPI_Comm comm = first_ranks(ranks);
  if (comm == MPI_COMM_NULL) return out;
  Deck d = make_deck(sets, ranks);
  Grid grid(comm, resolve_layout(d, ranks));
  auto be = make_cpu_backend(1);
  MemoryLedger ledger;
  TokenDataset data(d.data.train, d.model.seq_len, "data.train");
  Trainer tr(d, grid, *be, ledger, data, nullptr);
  for (int s = 0; s < steps; ++s) out.push_back(tr.step(s).loss);
  MPI_Comm_free(&comm);
  return out;
}

double max_rel(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]) / std::abs(b[i]));
  return m;
}

struct Layout {
  const char* name;
  int ranks;
  std::vector<std::string> sets;
};

TEST(Precision, SixteenBitTracksFp32SeriallyAndIn3D) {
  const std::vector<Layout> layouts = {
      {"serial", 1, {}},
      {"dp2 tp2 pp2 sp 1f1b zero1", 8,
       {"parallel.tp=2", "parallel.pp=2", "parallel.sequence_parallel=true", "zero.stage=1"}}};
  for (const Layout& L : layouts) {
    if (L.ranks > trident::testing::world_size()) continue;
    auto run = [&](const char* dtype, const char* reduce) {
      std::vector<std::string> s = L.sets;
      s.push_back(fmt::format("precision.dtype=\"{}\"", dtype));
      s.push_back(fmt::format("precision.reduce_dtype=\"{}\"", reduce));
      return losses(L.ranks, s, 50);
    };
    const auto f32 = run("fp32", "fp32"), bf16 = run("bf16", "fp32"), f16 = run("fp16", "fp32");
    // Gradients stored, accumulated and reduced in 16 bits as well.
    const auto bf16_g = run("bf16", "bf16"), f16_g = run("fp16", "fp16");
    if (world_rank() != 0) continue;
    const double e_bf16 = max_rel(bf16, f32), e_f16 = max_rel(f16, f32);
    const double e_bf16_g = max_rel(bf16_g, f32), e_f16_g = max_rel(f16_g, f32);
    if (std::getenv("TRIDENT_TEST_VERBOSE"))
      for (std::size_t i = 0; i < f32.size(); ++i)
        std::printf("%zu %.5f %.5f %.5f %.5f %.5f\n", i, f32[i], bf16[i], f16[i], bf16_g[i],
                    f16_g[i]);
    std::printf("%s: loss %.4f -> %.4f (fp32), %.4f (bf16), %.4f (fp16), %.4f (bf16 grads), "
                "%.4f (fp16 grads); max relative difference over 50 steps: bf16 %.2e, fp16 "
                "%.2e, bf16 grads %.2e, fp16 grads %.2e\n", L.name, f32.front(), f32.back(),
                bf16.back(), f16.back(), bf16_g.back(), f16_g.back(), e_bf16, e_f16, e_bf16_g,
                e_f16_g);
    EXPECT_LT(f32.back(), f32.front() - 1.0);  // it learns
    // bf16 keeps 8 bits of mantissa, fp16 11: the stated tolerances.
    EXPECT_LT(e_bf16, 5e-3) << L.name;  // measured <= 1.2e-3
    EXPECT_LT(e_f16, 2e-3) << L.name;   // measured <= 3e-4
    EXPECT_LT(e_bf16_g, 5e-3) << L.name;  // measured <= 1.3e-3
    EXPECT_LT(e_f16_g, 2e-3) << L.name;
    EXPECT_GT(e_bf16, 0.0);  // 16-bit arithmetic really happened
    EXPECT_GT(e_f16, 0.0);
    EXPECT_NE(bf16_g, bf16);  // and the gradients' 16 bits changed something
    EXPECT_NE(f16_g, f16);
  }
}

TEST(Precision, WeightsAreTheRoundedMasters) {
  MPI_Comm comm = first_ranks(1);
  if (comm == MPI_COMM_NULL) return;
  for (const char* dtype : {"bf16", "fp16"}) {
    Deck d = make_deck({fmt::format("precision.dtype=\"{}\"", dtype)}, 1);
    Grid grid(comm, resolve_layout(d, 1));
    auto be = make_cpu_backend(1);
    MemoryLedger ledger;
    TokenDataset data(d.data.train, d.model.seq_len, "data.train");
    Trainer tr(d, grid, *be, ledger, data, nullptr);
    for (int s = 0; s < 3; ++s) tr.step(s);
    ModelChunk& ch = tr.chunks().front();
    const Arena& p = ch.model->params();
    const Arena* m = ch.engine->masters();
    ASSERT_NE(m, nullptr);
    // The weights are stored in 16 bits: 2 bytes a parameter, each the
    // masters' rounding (bits equal to the CPU's round-to-nearest-even).
    ASSERT_EQ(p.dtype(), tr.weight_dtype());
    ASSERT_EQ(p.bytes(), 2 * p.numel());
    const auto* bits = static_cast<const std::uint16_t*>(p.data());
    const bool bf = tr.weight_dtype() == DType::bf16;
    std::size_t differ = 0;
    for (std::size_t i = 0; i < p.numel(); ++i) {
      const float w = m->f32()[i];
      ASSERT_EQ(bits[i], bf ? f32_to_bf16(w) : f32_to_f16(w)) << dtype << " " << i;
      differ += (bf ? bf16_to_f32(bits[i]) : f16_to_f32(bits[i])) != w;
    }
    EXPECT_GT(differ, p.numel() / 2) << dtype;  // the masters keep more bits
  }
  MPI_Comm_free(&comm);
}

// Weights of every chunk, as this rank holds them.
std::vector<float> local_weights(Trainer& tr) {
  std::vector<float> all;
  for (ModelChunk& ch : tr.chunks()) {
    std::vector<float> p;
    ch.model->storage().gather_params_to_host(p);
    all.insert(all.end(), p.begin(), p.end());
    Arena* m = ch.engine->masters();
    if (m) all.insert(all.end(), m->f32(), m->f32() + m->numel());
  }
  return all;
}

// dp2 tp2 pp2, fp16; rank 5 alone gets an inf gradient at steps 3 and 4
// (hysteresis 2: the second overflow halves the scale). `layout` adds to it.
void expect_overflow_skips(const std::vector<std::string>& layout) {
  const int ranks = std::min(8, trident::testing::world_size());
  MPI_Comm comm = first_ranks(ranks);
  if (comm == MPI_COMM_NULL) return;
  std::vector<std::string> sets = {"precision.dtype=\"fp16\"", "precision.initial_scale=1024"};
  if (ranks == 8) sets.insert(sets.end(), {"parallel.tp=2", "parallel.pp=2"});
  sets.insert(sets.end(), layout.begin(), layout.end());
  Deck d = make_deck(sets, ranks);
  Grid grid(comm, resolve_layout(d, ranks));
  auto be = make_cpu_backend(1);
  MemoryLedger ledger;
  TokenDataset data(d.data.train, d.model.seq_len, "data.train");
  Trainer tr(d, grid, *be, ledger, data, nullptr);
  const int victim = ranks - 3;
  std::vector<double> scales;
  std::vector<bool> skipped;
  for (int s = 0; s < 6; ++s) {
    if (grid.rank() == victim && (s == 3 || s == 4)) setenv("TRIDENT_FAULT_INJECT", fmt::format("grad:inf@{}", s).c_str(), 1);
    const std::vector<float> before = local_weights(tr);
    const std::int64_t t_before = tr.optimizer_steps();
    StepStats st = tr.step(s);
    if (tr.defers_stats()) {  // post-validation: settled here, before the weights are read
      tr.settle();
      st = tr.take_settled().back();
    }
    unsetenv("TRIDENT_FAULT_INJECT");
    const std::vector<float> after = local_weights(tr);
    const bool same = before.size() == after.size() &&
                      std::memcmp(before.data(), after.data(), before.size() * 4) == 0;
    skipped.push_back(st.skipped);
    scales.push_back(tr.loss_scaler()->scale());
    if (s == 3 || s == 4) {
      EXPECT_TRUE(st.skipped) << "step " << s << " rank " << grid.rank();
      EXPECT_TRUE(same) << "a skipped step changed weights, step " << s << " rank " << grid.rank();
      EXPECT_EQ(tr.optimizer_steps(), t_before);
    } else {
      EXPECT_FALSE(st.skipped) << "step " << s;
      EXPECT_FALSE(same) << "step " << s;
    }
  }
  if (d.parallel.post_validation) {
    // The victim's own gradients show the overflow: it waits for the check.
    // Every other rank steps ahead and undoes the two skipped steps.
    const PostValidationCounts c = tr.post_validation();
    EXPECT_EQ(c.held, grid.rank() == victim ? 2 : 0) << "rank " << grid.rank();
    EXPECT_EQ(c.skipped, grid.rank() == victim ? 0 : 2) << "rank " << grid.rank();
    EXPECT_EQ(c.clipped, 0);
    EXPECT_EQ(c.ahead + c.held, 6);
  }
  EXPECT_EQ(scales[2], 1024.0);
  EXPECT_EQ(scales[3], 1024.0);  // first overflow: hysteresis 2 -> 1
  EXPECT_EQ(scales[4], 512.0);   // second: halved
  EXPECT_EQ(scales[5], 512.0);
  MPI_Comm_free(&comm);
}

TEST(Precision, InjectedOverflowSkipsTheStepEverywhereAndHalvesTheScale) {
  expect_overflow_skips({"zero.stage=2"});  // inf in an owned f32 slice
  // inf in a gradient stored in fp16 (reduced in fp16, unpacked by the optimizer)
  expect_overflow_skips({"precision.reduce_dtype=\"fp16\""});
  // inf in an owned slice stored in fp16
  expect_overflow_skips({"zero.stage=2", "precision.reduce_dtype=\"fp16\""});
}

// Post-validation (clipping off, so only the overflow check can undo a
// step): the steps taken ahead of the overflow are undone bit for bit.
TEST(Precision, PostValidationUndoesTheStepsTakenAheadOfAnOverflow) {
  if (trident::testing::world_size() < 8) GTEST_SKIP() << "needs 8 ranks (pp 2)";
  expect_overflow_skips({"parallel.schedule=\"zb-h1\"", "parallel.post_validation=true",
                         "train.grad_clip=0"});
}

TEST(Precision, SixteenBitGradientsTakeTwoBytes) {
  MPI_Comm comm = first_ranks(1);
  if (comm == MPI_COMM_NULL) return;
  Deck d = make_deck({"precision.dtype=\"bf16\"", "precision.reduce_dtype=\"bf16\""}, 1);
  Grid grid(comm, resolve_layout(d, 1));
  auto be = make_cpu_backend(1);
  MemoryLedger ledger;
  TokenDataset data(d.data.train, d.model.seq_len, "data.train");
  Trainer tr(d, grid, *be, ledger, data, nullptr);
  tr.step(0);
  const Arena& g = tr.chunks().front().model->grads();
  EXPECT_EQ(g.dtype(), DType::bf16);
  EXPECT_EQ(g.bytes(), 2 * g.numel());
  // Model state holds the 16-bit gradients alone (their f32 working copies
  // are working buffers).
  EXPECT_EQ(ledger.peak(MemCategory::gradients), g.bytes());
  // After backward the stored gradients are finite and not all zero.
  std::vector<float> host(g.numel());
  copy_to_host_as_f32(*be, host.data(), g.data(), g.dtype(), g.numel());
  double ss = 0;
  for (float x : host) ss += double(x) * x;
  EXPECT_TRUE(std::isfinite(ss));
  EXPECT_GT(ss, 0.0);
  MPI_Comm_free(&comm);
}

}  // namespace
