// ZeRO's plan and storage as modules, apart from the trainer: the plan's
// shards cover every element of the table exactly once over the data ranks
// (persistent units whole on each), and refuses a table not padded for its
// dp; stage 3's storage gathers a unit into a slot that holds the whole unit
// while it has users, frees it after its last done_params, reuses freed slots
// for other units, and refuses to gather more units than it has slots or to
// hand out a unit nobody gathered; stage 2's gradient slots reduce-scatter
// each unit's gradients onto their owners. Run with 2 ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include <map>
#include <numeric>
#include <stdexcept>

#include "comm/mpi_communicator.hpp"
#include "compute/backend.hpp"
#include "memory/ledger.hpp"
#include "model/param_table.hpp"
#include "parallel/zero/zero_plan.hpp"
#include "parallel/zero/zero_storage.hpp"
#include "support/test_support.hpp"

using namespace trident;
using trident::testing::world_size;

namespace {

GptConfig tiny_model() {
  GptConfig m;
  m.layers = 5;
  m.d_model = 16;
  m.heads = 2;
  m.seq_len = 8;
  m.vocab = 40;
  return m;
}

// The table as ZeRO lays it out for dp ranks: units padded to dp equal
// slices; with table_units > 1 the token embedding cut into that many units.
TensorTable zero_table(int dp, int table_units) {
  UnitLayout units(std::size_t(dp) * TensorTable::kAlign);
  units.dp = dp;
  units.table_units = table_units;
  return build_gpt_param_table(tiny_model(), {}, units);
}

// Arena elements rank r owns: its slice of each partitioned unit.
std::vector<std::size_t> owned_elements(const ZeroPlan& plan, int r) {
  std::vector<std::size_t> out;
  for (const ZeroUnit& u : plan.units()) {
    if (u.persistent) continue;
    const std::size_t first = plan.slice_begin(u, r);
    for (std::size_t i = 0; i < plan.slice(u); ++i) out.push_back(first + i);
  }
  return out;
}

}  // namespace

TEST(ZeroPlan, ShardsCoverEveryElementOnceOverTheDataRanks) {
  for (int dp : {1, 2, 4})
    for (int table_units : {1, 2})
      for (std::size_t threshold : {std::size_t(0), std::size_t(200)}) {
        SCOPED_TRACE(::testing::Message() << "dp " << dp << " table_units " << table_units
                                        << " threshold " << threshold);
        const TensorTable table = zero_table(dp, table_units);
        std::map<std::size_t, int> owners;  // arena element -> ranks owning it
        std::size_t shard = 0;
        for (int r = 0; r < dp; ++r) {
          const ZeroPlan plan(table, dp, r, threshold);
          EXPECT_EQ(plan.rank(), r);
          for (std::size_t e : owned_elements(plan, r)) owners[e]++;
          if (r == 0) shard = plan.shard_size();
          EXPECT_EQ(plan.shard_size(), shard);  // every rank owns as much
          // Slices sit back to back in the shard, in unit order.
          std::size_t at = 0;
          for (const ZeroUnit& u : plan.units()) {
            EXPECT_EQ(u.shard_offset, at);
            at += plan.slice(u);
          }
          EXPECT_EQ(at, plan.shard_size());
        }
        const ZeroPlan plan(table, dp, 0, threshold);
        std::size_t partitioned = 0, persistent = 0;
        for (const ZeroUnit& u : plan.units()) {
          (u.persistent ? persistent : partitioned) += u.size();
          if (u.persistent) EXPECT_LT(u.size(), threshold);
          if (u.cut()) EXPECT_FALSE(u.persistent);  // a table's pieces are always sharded
          if (!u.persistent) EXPECT_EQ(u.size() % std::size_t(dp), 0u);
        }
        // Each partitioned element has exactly one owner.
        EXPECT_EQ(owners.size(), partitioned);
        for (const auto& [element, n] : owners) ASSERT_EQ(n, 1) << "element " << element;
        EXPECT_EQ(plan.shard_size(), partitioned / dp + persistent);
        // Every tensor element lies in a unit; nothing past the table does.
        for (const TensorInfo& t : table.tensors())
          for (std::size_t i = 0; i < t.numel; i += 7) {
            const int u = plan.unit_of_offset(t.offset + i);
            ASSERT_GE(u, 0) << t.name;
            if (table_units == 1 || t.name != "wte") EXPECT_EQ(u, t.unit) << t.name;
          }
        EXPECT_EQ(plan.unit_of_offset(table.size() + 1000), -1);
      }
}

TEST(ZeroPlan, LargestUnitIsTheLargestPartitionedOne) {
  const TensorTable table = zero_table(2, 1);
  const ZeroPlan all(table, 2, 0, 0);
  std::size_t largest = 0;
  for (const ZeroUnit& u : all.units()) largest = std::max(largest, u.size());
  EXPECT_EQ(all.largest_unit(), largest);
  // Every unit persistent: none is partitioned, the shard is the whole table.
  const ZeroPlan none(table, 2, 1, table.size() + 1);
  EXPECT_EQ(none.largest_unit(), 0u);
  EXPECT_EQ(none.shard_size(), table.size());
}

TEST(ZeroPlan, RefusesATableNotPaddedForItsDataRanks) {
  const TensorTable for_two = zero_table(2, 1);
  EXPECT_THROW(ZeroPlan(for_two, 3, 0, 0), std::logic_error);
  // Without ZeRO's padding no unit but by chance splits into 7 equal slices.
  const TensorTable unpadded = build_gpt_param_table(tiny_model());
  EXPECT_THROW(ZeroPlan(unpadded, 7, 0, 0), std::logic_error);
}

namespace {

struct ZeroFixture {
  TensorTable table;
  ZeroPlan plan;
  std::unique_ptr<ComputeBackend> backend = make_cpu_backend(1);
  MemoryLedger ledger;
  std::unique_ptr<Communicator> data = make_communicator(MPI_COMM_WORLD, "data");
  std::unique_ptr<ZeroStorage> storage;
  std::vector<float> values;  // every parameter, as the host set them

  ZeroFixture(int stage, int dp, int rank)
      : table(zero_table(dp, stage == 3 ? 2 : 1)), plan(table, dp, rank, 0) {
    storage = std::make_unique<ZeroStorage>(stage, table, plan, *backend, ledger, *data);
    values.resize(table.size());
    std::iota(values.begin(), values.end(), 1.0f);
    storage->set_params_from_host(0, values.data(), values.size());
  }
  // The blocks' units in order.
  std::vector<int> block_units() const {
    std::vector<int> out;
    for (std::size_t u = 0; u < plan.units().size(); ++u)
      if (plan.units()[u].block) out.push_back(int(u));
    return out;
  }
  const TensorInfo& first_tensor_of(int unit) const {
    for (const TensorInfo& t : table.tensors())
      if (t.unit == unit) return t;
    throw std::logic_error("no tensor in unit");
  }
  // The gathered unit holds every rank's slice: the host's values.
  void expect_gathered(int unit) {
    const TensorInfo& t = first_tensor_of(unit);
    const float* p = storage->param(t);
    for (std::size_t i = 0; i < t.numel; ++i) ASSERT_EQ(p[i], values[t.offset + i]) << t.name;
  }
};

}  // namespace

TEST(ZeroStorage, GatheredUnitLivesWhileItHasUsers) {
  if (world_size() != 2) GTEST_SKIP() << "needs 2 ranks";
  ZeroFixture z(3, 2, trident::testing::world_rank());
  const int b0 = z.block_units().front();
  const TensorInfo& t = z.first_tensor_of(b0);
  EXPECT_THROW(z.storage->param(t), std::logic_error);  // nobody gathered it
  // Backward: the first block prefetches nothing after it.
  z.storage->need_params(b0, Pass::backward);
  z.expect_gathered(b0);
  z.storage->need_params(b0, Pass::backward);  // a second user
  z.storage->done_params(b0);
  z.expect_gathered(b0);  // still held by the second
  z.storage->done_params(b0);
  EXPECT_THROW(z.storage->param(t), std::logic_error);  // released
}

TEST(ZeroStorage, FreedSlotsAreReusedAndAllBusyIsAnError) {
  if (world_size() != 2) GTEST_SKIP() << "needs 2 ranks";
  ZeroFixture z(3, 2, trident::testing::world_rank());
  const std::vector<int> blocks = z.block_units();
  const int slots = ZeroStorage::param_slots(z.table, z.plan, DType::f32);
  ASSERT_GT(int(blocks.size()), slots) << "the test needs more blocks than slots";
  // Backward order: no block's prefetch lands in a slot a later need wants.
  for (int k = 0; k < slots; ++k) z.storage->need_params(blocks[k], Pass::backward);
  for (int k = 0; k < slots; ++k) z.expect_gathered(blocks[k]);
  // Every slot has a user: one more unit cannot be gathered.
  EXPECT_THROW(z.storage->need_params(blocks[slots], Pass::backward), std::logic_error);
  // A freed slot takes the next unit, which reads its own values, not the last occupant's.
  z.storage->done_params(blocks[0]);
  z.storage->need_params(blocks[slots], Pass::backward);
  z.expect_gathered(blocks[slots]);
  for (int k = 1; k < slots; ++k) z.expect_gathered(blocks[k]);
  EXPECT_THROW(z.storage->param(z.first_tensor_of(blocks[0])), std::logic_error);
  for (int k = 1; k <= slots; ++k) z.storage->done_params(blocks[k]);
}

TEST(ZeroStorage, Stage2GradientSlotsReduceOntoTheOwners) {
  if (world_size() != 2) GTEST_SKIP() << "needs 2 ranks";
  const int rank = trident::testing::world_rank();
  ZeroFixture z(2, 2, rank);
  z.storage->begin_step();
  // Each rank's gradients: rank + 1 everywhere; the owners' sums are 1 + 2.
  for (int u = int(z.plan.units().size()) - 1; u >= 0; --u) {
    z.storage->need_grads(u);
    for (const TensorInfo& t : z.table.tensors()) {
      if (t.unit != u) continue;
      float* g = z.storage->grad(t);
      for (std::size_t i = 0; i < t.numel; ++i) g[i] = float(rank + 1);
    }
    z.storage->done_grads(u, /*last=*/true);
  }
  z.storage->finish_backward();
  for (std::size_t u = 0; u < z.plan.units().size(); ++u) {
    const ZeroUnit& U = z.plan.units()[u];
    const float* owned = static_cast<const float*>(z.storage->owned_grads(int(u)));
    // Padding aside, the owned slice holds the sum over both ranks.
    for (const TensorInfo& t : z.table.tensors()) {
      if (t.unit != int(u)) continue;
      for (std::size_t i = 0; i < t.numel; ++i) {
        const std::size_t packed = U.range.packed_index(t.offset + i);
        const std::size_t first = std::size_t(rank) * z.plan.slice(U);
        if (packed < first || packed >= first + z.plan.slice(U)) continue;
        ASSERT_EQ(owned[packed - first], 3.0f) << t.name << " element " << i;
      }
    }
  }
}
