// Replicated checkpoint data is written by all its replicas: data rank r of
// dp writes the r-th part of each slice, counted, and the parts tile the
// slice exactly (the writer's own check then sees one copy per element).
#include <gtest/gtest.h>

#include "train/checkpoint_state.hpp"

using namespace trident;

TEST(ReplicaPart, TheDataGroupsPartsTileEachReplicatedSlice) {
  TensorTable table;
  table.add({"w", {70, 1001}});
  table.add({"b", {3}});
  std::vector<float> data(table.size());
  for (const TensorInfo& t : table.tensors()) {
    for (int dp : {1, 2, 3, 4}) {
      std::size_t next = 0, counted = 0;
      for (int r = 0; r < dp; ++r) {
        GridCoord c;
        c.dp = r;
        const TensorSlice whole = whole_shard(t, data.data() + t.offset, r == 0);
        const TensorSlice part = replica_part(whole, c, dp, sizeof(float));
        EXPECT_EQ(part.lo, next) << t.name << " dp " << dp << " rank " << r;
        EXPECT_EQ(part.data, data.data() + t.offset + part.lo);
        if (part.hi > part.lo) EXPECT_TRUE(part.counted);
        counted += part.hi - part.lo;
        next = part.hi;
      }
      EXPECT_EQ(next, t.numel);
      EXPECT_EQ(counted, t.numel);
    }
  }
}
