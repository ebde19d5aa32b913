// Activation recomputation: none, selective and full (partitioned or not
// under tensor parallelism) train the same model bit for bit, in every
// layout: the same losses, gradients and weights. Full recomputation keeps
// at most one block's activations plus the saved block inputs. TrainRun with 4 ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include <fmt/format.h>

#include <cstring>

#include "io/deck.hpp"
#include "io/token_shard.hpp"
#include "support/test_support.hpp"
#include "engine/zero_engine.hpp"
#include "train/trainer.hpp"

using namespace trident;
using trident::testing::first_ranks;

namespace {

constexpr int kSteps = 4;

struct TrainRun {
  std::vector<double> losses;
  std::vector<float> grads, params;  // this rank's, after the last step
  double activation_peak = 0;
};

const std::string& shard_dir() {
  static const std::string dir = trident::testing::rank_shard_dir("recompute", 20000);
  return dir;
}

TrainRun train(int ranks, std::vector<std::string> sets) {
  TrainRun run;
  MPI_Comm comm = first_ranks(ranks);
  if (comm == MPI_COMM_NULL) return run;
  const std::vector<std::string> base = {"train.lr=1e-3", "model.layers=4", "train.batch=4",
                                         "train.micro_batch=1"};
  sets.insert(sets.begin(), base.begin(), base.end());
  const std::string text = trident::testing::tiny_deck(shard_dir() + "/train.bin",
                                                       shard_dir() + "/train.bin");
  Deck d = parse_deck(text, "recompute.toml", sets);
  Grid grid(comm, resolve_layout(d, ranks));
  auto be = make_cpu_backend(1);
  MemoryLedger ledger;
  TokenDataset data(d.data.train, d.model.seq_len, "data.train");
  Trainer tr(d, grid, *be, ledger, data, nullptr);
  for (int s = 0; s < kSteps; ++s) run.losses.push_back(tr.step(s).loss);
  for (ModelChunk& ch : tr.chunks()) {
    if (auto* zero = dynamic_cast<ZeroEngine*>(ch.engine.get())) {
      zero->zero_storage().for_each_owned_grads([&](const Arena& a, std::size_t first,
                                                    std::size_t n) {
        run.grads.insert(run.grads.end(), a.f32() + first, a.f32() + first + n);
      });
    } else {
      const float* g = ch.model->grads().f32();
      run.grads.insert(run.grads.end(), g, g + ch.model->grads().numel());
    }
    std::vector<float> p;
    ch.model->storage().gather_params_to_host(p);
    run.params.insert(run.params.end(), p.begin(), p.end());
  }
  run.activation_peak = double(ledger.peak(MemCategory::activations));
  MPI_Comm_free(&comm);
  return run;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

struct Layout {
  const char* name;
  int ranks;
  std::vector<std::string> sets;
};

const std::vector<Layout> kLayouts = {
    {"serial", 1, {}},
    {"tp2", 2, {"parallel.tp=2"}},
    {"tp2+sp", 2, {"parallel.tp=2", "parallel.sequence_parallel=true"}},
    {"tp4", 4, {"parallel.tp=4"}},
    {"pp2 1f1b", 2, {"parallel.pp=2"}},
    {"dp2 tp2 zero3", 4, {"parallel.tp=2", "zero.stage=3", "zero.persistence_threshold=0"}},
    {"tp2 pp2 sp gpipe", 4,
     {"parallel.tp=2", "parallel.pp=2", "parallel.sequence_parallel=true",
      "parallel.schedule=\"gpipe\""}},
    {"dp2 pp2 interleaved", 4,
     {"parallel.pp=2", "parallel.schedule=\"interleaved\"", "parallel.virtual_stages=2"}},
    // 16-bit activations: saved in bf16/fp16, unpacked or recomputed the same.
    {"serial bf16", 1, {"precision.dtype=\"bf16\""}},
    {"tp2 pp2 bf16", 4, {"parallel.tp=2", "parallel.pp=2", "precision.dtype=\"bf16\""}},
    {"dp2 tp2 zero3 fp16", 4,
     {"parallel.tp=2", "zero.stage=3", "zero.persistence_threshold=0", "precision.dtype=\"fp16\""}},
};

TEST(Recompute, EveryModeTrainsTheSameModelBitForBitInEveryLayout) {
  for (const Layout& L : kLayouts) {
    if (L.ranks > trident::testing::world_size()) continue;
    auto with = [&](std::vector<std::string> extra) {
      std::vector<std::string> s = L.sets;
      s.insert(s.end(), extra.begin(), extra.end());
      return train(L.ranks, s);
    };
    const TrainRun none = with({"train.recompute=\"none\""});
    std::vector<std::pair<std::string, TrainRun>> others;
    others.emplace_back("selective", with({"train.recompute=\"selective\""}));
    others.emplace_back("full", with({"train.recompute=\"full\""}));
    others.emplace_back("full, not partitioned",
                        with({"train.recompute=\"full\"", "train.partition_activations=false"}));
    if (trident::testing::world_rank() >= L.ranks) continue;
    for (const auto& [mode, r] : others) {
      SCOPED_TRACE(fmt::format("{}: recompute {}", L.name, mode));
      EXPECT_TRUE(same_bits(r.losses, none.losses));
      EXPECT_TRUE(same_bits(r.grads, none.grads));
      EXPECT_TRUE(same_bits(r.params, none.params));
      // Selective has nothing to drop: flash attention keeps no probabilities.
      if (mode == "selective") EXPECT_EQ(r.activation_peak, none.activation_peak);
      else EXPECT_LT(r.activation_peak, none.activation_peak);
    }
  }
}

TEST(Recompute, FullKeepsOneBlockPlusTheSavedInputs) {
  // One block's activations, measured: what a fourth block adds without recompute.
  const TrainRun none3 = train(1, {"model.layers=3"}), none4 = train(1, {});
  const TrainRun full4 = train(1, {"train.recompute=\"full\""});
  const TrainRun sel4 = train(1, {"train.recompute=\"selective\""});
  if (trident::testing::world_rank() != 0) return;
  const double block = none4.activation_peak - none3.activation_peak;
  const double input = 1 * 16 * 32 * sizeof(float);  // micro_batch x seq_len x d_model
  const double bound = none4.activation_peak - 3 * block + 4 * input;
  std::printf("activation peak, 4 blocks: none %.0f B, selective %.0f B, full %.0f B; one block "
              "%.0f B; bound for full %.0f B\n", none4.activation_peak, sel4.activation_peak,
              full4.activation_peak, block, bound);
  EXPECT_LE(full4.activation_peak, bound);
  // Selective keeps what none keeps: the attention probabilities it would drop
  // are never stored (flash attention).
  EXPECT_EQ(sel4.activation_peak, none4.activation_peak);
}

TEST(Recompute, PartitionedInputsSaveMemoryUnderTensorParallelism) {
  const TrainRun part = train(2, {"parallel.tp=2", "train.recompute=\"full\"", "model.layers=8"});
  const TrainRun whole = train(2, {"parallel.tp=2", "train.recompute=\"full\"", "model.layers=8",
                              "train.partition_activations=false"});
  if (trident::testing::world_rank() >= 2) return;
  // Seven of the eight block inputs are halved (the stage output stays
  // whole); the working buffer gains one whole input to gather into.
  const double input = 16 * 32 * sizeof(float);
  EXPECT_EQ(whole.activation_peak - part.activation_peak, 7 * input / 2 - input);
}

}  // namespace
