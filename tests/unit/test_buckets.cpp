// Gradient bucket planning for data parallelism.
#include <gtest/gtest.h>

#include "model/gpt_params.hpp"
#include "model/param_table.hpp"
#include "parallel/data/grad_buckets.hpp"

using namespace trident;

TEST(GradBuckets, TileTheArenaBackToFrontWithinTheCap) {
  GptConfig c{4, 64, 4, 32, 257};
  TensorTable t = build_gpt_param_table(c);
  const std::size_t cap = 64 * 1024;  // bytes
  auto buckets = plan_grad_buckets(t, cap);
  ASSERT_GT(buckets.size(), 3u);
  EXPECT_EQ(buckets.front().end, t.size());
  EXPECT_EQ(buckets.back().begin, 0u);
  for (std::size_t i = 1; i < buckets.size(); ++i) EXPECT_EQ(buckets[i].end, buckets[i - 1].begin);
  for (const auto& b : buckets) {
    // Over the cap only when a single tensor is larger than the cap.
    if (b.size() * 4 > cap) {
      int tensors = 0;
      for (const auto& ti : t.tensors()) tensors += ti.offset >= b.begin && ti.offset < b.end;
      EXPECT_EQ(tensors, 1);
    }
    // Never split a tensor.
    for (const auto& ti : t.tensors())
      EXPECT_FALSE(ti.offset < b.begin && ti.offset + ti.numel > b.begin) << ti.name;
  }
}

TEST(GradBuckets, OneBucketWhenTheCapIsLarge) {
  TensorTable t = build_gpt_param_table(GptConfig{2, 32, 4, 16, 257});
  auto buckets = plan_grad_buckets(t, std::size_t(1) << 30);
  ASSERT_EQ(buckets.size(), 1u);
  EXPECT_EQ(buckets[0].begin, 0u);
  EXPECT_EQ(buckets[0].end, t.size());
}

TEST(GradBuckets, ReadinessReleasesBucketsInOrder) {
  TensorTable t = build_gpt_param_table(GptConfig{3, 32, 4, 16, 257});
  auto buckets = plan_grad_buckets(t, 16 * 1024);
  BucketReadiness r(buckets);
  EXPECT_TRUE(r.mark_ready_from(t.size()).empty());
  auto first = r.mark_ready_from(t.at("h.2.ln1.w").offset);  // last block done
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(first.front(), 0u);
  for (auto i : first) EXPECT_GE(buckets[i].begin, t.at("h.2.ln1.w").offset);
  auto rest = r.mark_ready_from(0);
  EXPECT_EQ(first.size() + rest.size(), buckets.size());
  EXPECT_TRUE(r.all_ready());
}
