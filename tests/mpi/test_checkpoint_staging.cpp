// Device memory (the CUDA backend's) goes to and from checkpoint files through
// host buffers. Staged through the CPU backend's own copies, a save must give
// the same file (every dataset's checksum) and a load the same training state
// as the direct path, with the data replicas sharing the read (run with 2
// ranks: dp = 2).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <filesystem>

#include "checkpoint/checkpoint_dir.hpp"
#include "checkpoint/checkpoint_reader.hpp"
#include "comm/mpi_communicator.hpp"
#include "io/deck.hpp"
#include "io/token_shard.hpp"
#include "support/test_support.hpp"
#include "train/checkpoint_state.hpp"
#include "train/trainer.hpp"

using namespace trident;

namespace {

Deck staging_deck(const std::string& shard, int seed) {
  const std::string text =
      trident::testing::tiny_deck(shard, shard, "steps = 10\nbatch = 8\n");
  return parse_deck(text, "staging.toml",
                    {"model.layers=2", "train.seed=" + std::to_string(seed)});
}

// Passes every operation to an MPI communicator without being one, as the
// NCCL and host-staged communicators that replace a GPU job's groups.
class ForwardingCommunicator final : public Communicator {
 public:
  ForwardingCommunicator(MPI_Comm c, std::string name)
      : Communicator(name), inner_(make_communicator(c, name)) {
    set_max_tag(inner_->max_tag());
  }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  Request iall_reduce(void* b, std::size_t n, DType t, ReduceOp op) override {
    return inner_->iall_reduce(b, n, t, op);
  }
  Request ireduce(void* b, std::size_t n, DType t, ReduceOp op, int root) override {
    return inner_->ireduce(b, n, t, op, root);
  }
  Request ireduce_scatter(const void* s, void* r, std::size_t n, DType t, ReduceOp op) override {
    return inner_->ireduce_scatter(s, r, n, t, op);
  }
  Request iall_gather(const void* s, void* r, std::size_t n, DType t) override {
    return inner_->iall_gather(s, r, n, t);
  }
  Request ibroadcast(void* b, std::size_t n, DType t, int root) override {
    return inner_->ibroadcast(b, n, t, root);
  }
  Request isend(const void* b, std::size_t n, DType t, int peer, int tag) override {
    return inner_->isend(b, n, t, peer, tag);
  }
  Request irecv(void* b, std::size_t n, DType t, int peer, int tag) override {
    return inner_->irecv(b, n, t, peer, tag);
  }
  Request ibarrier() override { return inner_->ibarrier(); }

 private:
  std::unique_ptr<Communicator> inner_;
};

}  // namespace

// A GPU job replaces every group's communicator (world included); checkpoints
// go through the grid's host communicator and work the same.
TEST(CheckpointStaging, GroupsThatAreNotMpiSaveAndLoad) {
  MPI_Comm comm = trident::testing::first_ranks(2);
  if (comm == MPI_COMM_NULL) return;
  const std::string dir = trident::testing::scratch_dir("forwarding_data");
  const std::string shard = trident::testing::make_text_shard(dir, "train.bin", 20000);
  const std::string ckpt = trident::testing::scratch_dir("forwarding_ckpt");
  {
    Deck d = staging_deck(shard, 1);
    Grid grid(comm, resolve_layout(d, 2));
    grid.use_communicators([](MPI_Comm c, std::string name) {
      return std::make_unique<ForwardingCommunicator>(c, std::move(name));
    });
    ASSERT_EQ(dynamic_cast<MpiCommunicator*>(&grid.world()), nullptr);
    auto be = make_cpu_backend(1);
    MemoryLedger ledger, ledger2;
    TokenDataset data(d.data.train, d.model.seq_len, "data.train");
    Trainer trained(d, grid, *be, ledger, data, nullptr);
    for (int s = 0; s < 2; ++s) trained.step(s);
    const TensorTable global = build_gpt_param_table(d.model);
    save_checkpoint(grid, ckpt, 0, training_meta(d, grid, trained, 2, 0), global,
                    training_sets(trained, grid.coord()));

    Deck other = staging_deck(shard, 2);
    resolve_layout(other, 2);
    Trainer loaded(other, grid, *be, ledger2, data, nullptr);
    std::vector<TensorSet> into = training_sets(loaded, grid.coord());
    CheckpointMeta read_meta;
    load_checkpoint(grid, ckpt + "/" + checkpoint_name(2), other.model, global, into, read_meta);
    loaded.set_optimizer_steps(read_meta.optimizer_steps);
    const double want = trained.step(2).loss, got = loaded.step(2).loss;
    EXPECT_EQ(std::memcmp(&want, &got, sizeof want), 0) << got << " vs " << want;
  }
  MPI_Comm_free(&comm);
}

TEST(CheckpointStaging, StagedSlicesSaveAndLoadTheSameState) {
  MPI_Comm comm = trident::testing::first_ranks(2);
  if (comm == MPI_COMM_NULL) return;
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  const std::string dir = trident::testing::scratch_dir("staging_r" + std::to_string(rank));
  const std::string shard = trident::testing::make_text_shard(dir, "train.bin", 20000);
  const std::string ckpt = trident::testing::scratch_dir("staging_ckpt");
  {
    Deck d = staging_deck(shard, 1);
    Grid grid(comm, resolve_layout(d, 2));
    ASSERT_EQ(grid.shape().dp, 2);
    auto be = make_cpu_backend(1);
    MemoryLedger ledger, ledger2;
    TokenDataset data(d.data.train, d.model.seq_len, "data.train");
    Trainer trained(d, grid, *be, ledger, data, nullptr);
    for (int s = 0; s < 3; ++s) trained.step(s);
    const TensorTable global = build_gpt_param_table(d.model);
    const CheckpointMeta meta = training_meta(d, grid, trained, 3, 0);
    std::vector<TensorSet> sets = training_sets(trained, grid.coord());
    save_checkpoint(grid, ckpt + "/direct", 0, meta, global, sets);
    for (TensorSet& s : sets) s.staged_through = be.get();
    save_checkpoint(grid, ckpt + "/staged", 0, meta, global, sets);

    const std::string name = checkpoint_name(3);
    CheckpointReader direct(grid.world(), ckpt + "/direct/" + name);
    CheckpointReader staged(grid.world(), ckpt + "/staged/" + name);
    const auto a = direct.datasets(), b = staged.datasets();
    ASSERT_EQ(a.size(), b.size());
    ASSERT_GT(a.size(), 0u);
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].spec.path, b[i].spec.path);
      EXPECT_EQ(a[i].checksum, b[i].checksum) << a[i].spec.path;
    }

    // Loaded staged into a trainer that started from other weights, the state
    // is the saved one: the next step's loss is the same, bit for bit.
    Deck other = staging_deck(shard, 2);
    resolve_layout(other, 2);
    Trainer loaded(other, grid, *be, ledger2, data, nullptr);
    std::vector<TensorSet> into = training_sets(loaded, grid.coord());
    for (TensorSet& s : into) s.staged_through = be.get();
    CheckpointMeta read_meta;
    load_checkpoint(grid, ckpt + "/direct/" + name, other.model, global, into, read_meta);
    loaded.set_optimizer_steps(read_meta.optimizer_steps);
    const double want = trained.step(3).loss, got = loaded.step(3).loss;
    EXPECT_EQ(std::memcmp(&want, &got, sizeof want), 0) << got << " vs " << want;
  }
  MPI_Comm_free(&comm);
}
