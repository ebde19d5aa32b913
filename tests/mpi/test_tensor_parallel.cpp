// Tensor parallelism: every (tp, dp) layout, with and without sequence
// parallelism, trains the serial model (loss every step, gathered gradients
// after 10 steps, within 1e-5 relative); each block costs exactly the
// collectives Megatron's scheme prescribes; parameters per rank shrink by tp.
// Run with 8 ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include <fmt/format.h>

#include <map>
#include <numeric>

#include "io/deck.hpp"
#include "io/token_shard.hpp"
#include "parallel/tensor/tensor_comm.hpp"
#include "support/test_support.hpp"
#include "train/trainer.hpp"

using namespace trident;
using trident::testing::first_ranks;
using trident::testing::world_size;

namespace {

constexpr int kSteps = 10;
constexpr double kTol = 1e-5;

using GlobalTensors = std::map<std::string, std::vector<float>>;

struct TpRun {
  std::vector<double> losses;
  GlobalTensors grads;
};

const std::string& shard_dir() {
  static const std::string dir = trident::testing::rank_shard_dir("tp", 40000);
  return dir;
}

// Every tensor in its global shape, assembled from the shards of one replica.
GlobalTensors gather_global(const TensorTable& table, const Arena& arena, Grid& grid) {
  GlobalTensors out;
  for (const TensorInfo& t : table.tensors()) {
    std::size_t n = 1;
    for (auto d : t.global_shape) n *= std::size_t(d);
    std::vector<float> g(n, 0.0f);
    const bool contributes = grid.coord().dp == 0 && (t.split_dim >= 0 || grid.coord().tp == 0);
    if (contributes)
      for (std::size_t i = 0; i < t.numel; ++i)
        if (auto gi = t.global_index(i); gi >= 0) g[std::size_t(gi)] = arena.f32(t)[i];
    grid.world().all_reduce(g.data(), n, DType::f32, ReduceOp::sum);
    out[t.name] = std::move(g);
  }
  return out;
}

TpRun train(MPI_Comm comm, const std::vector<std::string>& sets) {
  const std::string text = trident::testing::tiny_deck(
      shard_dir() + "/train.bin", shard_dir() + "/train.bin",
      // lr 1e-3 (GPT-2 small trains at 6e-4): Adam amplifies fp32
      // summation-order noise far less than at the tiny deck's 1e-2.
      "batch = 4\nmicro_batch = 1\n");
  std::vector<std::string> all_sets = {"train.lr=1e-3"};
  all_sets.insert(all_sets.end(), sets.begin(), sets.end());
  Deck d = parse_deck(text, "tp.toml", all_sets);
  int world = 0;
  MPI_Comm_size(comm, &world);
  Grid grid(comm, resolve_layout(d, world));
  auto be = make_cpu_backend(1);
  MemoryLedger ledger;
  TokenDataset data(d.data.train, d.model.seq_len, "data.train");
  Trainer tr(d, grid, *be, ledger, data, nullptr);
  TpRun run;
  for (int s = 0; s < kSteps; ++s) run.losses.push_back(tr.step(s).loss);
  run.grads = gather_global(tr.model().param_table(), tr.model().grads(), grid);
  return run;
}



}  // namespace

TEST(TensorParallel, EveryLayoutTrainsTheSerialModel) {
  const TpRun serial = train(MPI_COMM_SELF, {});
  double worst_loss = 0, worst_grad = 0;
  for (int tp : {1, 2, 4}) {
    for (int dp : {1, 2}) {
      for (bool sp : {false, true}) {
        if (tp * dp > world_size() || (sp && tp == 1)) continue;
        MPI_Comm comm = first_ranks(tp * dp);
        if (comm == MPI_COMM_NULL) continue;
        const std::string what = fmt::format("tp={} dp={} sp={}", tp, dp, sp);
        TpRun run = train(comm, {"parallel.tp=" + std::to_string(tp),
                                 std::string("parallel.sequence_parallel=") + (sp ? "true" : "false")});
        for (int s = 0; s < kSteps; ++s) {
          const double rel = std::abs(run.losses[s] - serial.losses[s]) / serial.losses[s];
          worst_loss = std::max(worst_loss, rel);
          EXPECT_LE(rel, kTol) << what << " step " << s;
        }
        for (const auto& [name, g] : serial.grads) {
          const double rel = trident::testing::rel_diff(run.grads.at(name).data(), g.data(), g.size());
          worst_grad = std::max(worst_grad, rel);
          EXPECT_LE(rel, kTol) << what << " gradient " << name;
        }
        MPI_Comm_free(&comm);
      }
    }
  }
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  if (r == 0)
    std::printf("worst relative difference to serial: loss %.2e, gradient %.2e\n", worst_loss,
                worst_grad);
}

// The Llama family (rotary positions, RMSNorm, SwiGLU, no biases, an untied
// head) with grouped-query attention: tensor ranks split query heads and
// key/value heads (kv_heads 2 of heads 4), SwiGLU's gate and up alike.
TEST(TensorParallel, LlamaWithGroupedQueryAttentionTrainsTheSerialModel) {
  const std::vector<std::string> llama = {"model.family=llama", "model.kv_heads=2"};
  const TpRun serial = train(MPI_COMM_SELF, llama);
  double worst_loss = 0, worst_grad = 0;
  for (int dp : {1, 2}) {
    for (bool sp : {false, true}) {
      if (2 * dp > world_size()) continue;
      MPI_Comm comm = first_ranks(2 * dp);
      if (comm == MPI_COMM_NULL) continue;
      const std::string what = fmt::format("tp=2 dp={} sp={}", dp, sp);
      std::vector<std::string> sets = llama;
      sets.push_back("parallel.tp=2");
      sets.push_back(std::string("parallel.sequence_parallel=") + (sp ? "true" : "false"));
      TpRun run = train(comm, sets);
      for (int s = 0; s < kSteps; ++s) {
        const double rel = std::abs(run.losses[s] - serial.losses[s]) / serial.losses[s];
        worst_loss = std::max(worst_loss, rel);
        EXPECT_LE(rel, kTol) << what << " step " << s;
      }
      ASSERT_EQ(run.grads.size(), serial.grads.size()) << what;
      for (const auto& [name, g] : serial.grads) {
        const double rel = trident::testing::rel_diff(run.grads.at(name).data(), g.data(), g.size());
        worst_grad = std::max(worst_grad, rel);
        EXPECT_LE(rel, kTol) << what << " gradient " << name;
      }
      MPI_Comm_free(&comm);
    }
  }
  if (trident::testing::world_rank() == 0)
    std::printf("Llama: worst relative difference to serial: loss %.2e, gradient %.2e\n",
                worst_loss, worst_grad);
}

namespace {
// Tensor-group collectives of one forward and one backward of a `layers`-deep
// model, and the tensor-table lookups of both (the model resolves its handles
// when it is built: none).
struct Counts {
  CommStats fwd, bwd;
  std::uint64_t lookups = 0;
};
Counts count_collectives(int layers, bool sp) {
  Grid grid(MPI_COMM_WORLD, {2, world_size() / 2, 1});
  auto be = make_cpu_backend(1);
  MemoryLedger ledger;
  GptConfig c{layers, 32, 4, 16, 257};
  GptModelOptions o;
  o.tp = TensorParallelLayout{2, grid.coord().tp, sp};
  TensorComm group(&grid.tensor(), o.tp);
  o.tensor_group = &group;
  GptModel m(c, 2, *be, ledger, o);
  MicroBatchStorage storage(m, *be, ledger);
  m.init_parameters(1);
  std::vector<std::int32_t> tok(32), tgt(32);
  std::iota(tok.begin(), tok.end(), 0), std::iota(tgt.begin(), tgt.end(), 1);
  Counts out;
  const std::uint64_t lookups_before = TensorTable::lookups();
  grid.tensor().reset_stats();
  m.forward(storage.acts(), tok.data(), tgt.data(), 1.0f / 32);
  out.fwd = grid.tensor().stats();
  grid.tensor().reset_stats();
  m.backward(storage.acts(), nullptr, true);
  out.bwd = grid.tensor().stats();
  out.lookups = TensorTable::lookups() - lookups_before;
  return out;
}
std::int64_t per_block(const CommStats& one, const CommStats& three, CommOp op) {
  return (std::int64_t(three.calls_of(op)) - std::int64_t(one.calls_of(op))) / 2;
}
}  // namespace

TEST(TensorParallel, EachBlockCostsTwoAllReducesForwardAndTwoBackward) {
  Counts one = count_collectives(1, false), three = count_collectives(3, false);
  EXPECT_EQ(per_block(one.fwd, three.fwd, CommOp::all_reduce), 2);
  EXPECT_EQ(per_block(one.bwd, three.bwd, CommOp::all_reduce), 2);
  EXPECT_EQ(three.fwd.calls_of(CommOp::all_gather) + three.bwd.calls_of(CommOp::all_gather), 0u);
  EXPECT_EQ(three.fwd.calls_of(CommOp::reduce_scatter) + three.bwd.calls_of(CommOp::reduce_scatter), 0u);
  EXPECT_EQ(three.lookups, 0u);
}

TEST(TensorParallel, SequenceParallelBlocksUseGatherScatterPairs) {
  Counts one = count_collectives(1, true), three = count_collectives(3, true);
  for (const auto* phase : {"forward", "backward"}) {
    const bool f = std::string(phase) == "forward";
    const CommStats &a = f ? one.fwd : one.bwd, &b = f ? three.fwd : three.bwd;
    // Backward gathers the two norms' outputs again for the weight gradients
    // (they are kept for this rank's tokens only) besides the two gradients.
    EXPECT_EQ(per_block(a, b, CommOp::all_gather), f ? 2 : 4) << phase;
    EXPECT_EQ(per_block(a, b, CommOp::reduce_scatter), 2) << phase;
  }
  EXPECT_EQ(per_block(one.fwd, three.fwd, CommOp::all_reduce), 0);
  // Backward adds one small all-reduce per block: the norms' gradients are
  // partial over this rank's tokens (4 * d_model floats, packed).
  EXPECT_EQ(per_block(one.bwd, three.bwd, CommOp::all_reduce), 1);
  EXPECT_EQ(three.lookups, 0u);
}

TEST(TensorParallel, ParametersPerRankShrinkByTp) {
  GptConfig c{2, 64, 4, 16, 257};
  TensorTable serial = build_gpt_param_table(c);
  for (int tp : {2, 4}) {
    std::size_t split = 0, replicated = 0, serial_split = 0, serial_replicated = 0;
    TensorTable shard = build_gpt_param_table(c, TensorParallelLayout{tp, 1, false});
    for (const TensorInfo& t : shard.tensors()) (t.split_dim >= 0 ? split : replicated) += t.numel;
    for (const TensorInfo& t : serial.tensors())
      (t.name == "wte" || t.name.find("ln") != std::string::npos || t.name.find("proj.b") != std::string::npos ||
               t.name == "wpe"
           ? (t.name == "wte" ? serial_split : serial_replicated)
           : serial_split) += t.numel;
    EXPECT_EQ(replicated, serial_replicated) << "tp=" << tp;
    // Split tensors: exactly 1/tp, but for the vocabulary padded to 64*tp.
    const std::size_t pad = (std::size_t(TensorParallelLayout::padded_vocab(c.vocab, tp)) -
                             TensorParallelLayout::padded_vocab(c.vocab, 1)) * c.d_model;
    EXPECT_EQ(split * tp, serial_split + pad) << "tp=" << tp;
  }
}
