// trident plan with context parallelism: a long sequence that no layout
// without a context group fits is split over one, at the memory `trident
// estimate` gives that layout; a short one keeps cp 1; the ring's transfers
// are a cost term of their own, and gradients reduce over data x context.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "io/deck.hpp"
#include "plan/estimate.hpp"
#include "support/cpu_host.hpp"
#include "plan/planner.hpp"

using namespace trident;

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// The long-context model: d 512, 8 heads, 4 layers, bf16, 4 sequences a step.
std::string long_deck(int seq_len) {
  return "[model]\nlayers = 4\nd_model = 512\nheads = 8\nseq_len = " + std::to_string(seq_len) +
         "\nvocab = 257\n[data]\ntrain = \"unused.bin\"\n[train]\nbatch = 4\n"
         "[precision]\ndtype = \"bf16\"\n";
}

using trident::testing::cpu_host;

PlanRequest request(const std::string& text, int gpus) {
  PlanRequest r;
  r.deck_path = "context.toml";
  r.deck_text = text;
  r.gpus = gpus;
  return r;
}

// The least memory per rank of any layout considered, with or without a context group.
double least_memory(const PlanResult& r, bool context) {
  double least = std::numeric_limits<double>::infinity();
  for (const auto* list : {&r.fitting, &r.too_large})
    for (const Prediction& p : *list)
      if ((p.shape.cp > 1) == context) least = std::min(least, p.memory_bytes);
  return least;
}

// What `trident estimate` says of `p`'s layout: the fullest pipeline rank's arenas.
double estimated_peak(const PlanRequest& r, const Prediction& p) {
  Deck d = parse_deck(r.deck_text, r.deck_path, layout_overrides(layout_string(p)));
  const GridShape shape = resolve_layout(d, r.gpus);
  double fullest = 0;
  for (int stage = 0; stage < shape.pp; ++stage)
    fullest = std::max(fullest, estimate_memory(d, shape, d.zero.stage, stage).peak());
  return fullest;
}

double cost(const Prediction& p, const std::string& part) {
  for (const auto& [name, seconds] : p.costs)
    if (name == part) return seconds;
  return -1;
}

}  // namespace

TEST(PlanContext, LongSequencesSplitWhereNoWholeSequenceFits) {
  const PlanRequest r = request(long_deck(32768), 4);
  const PlanResult roomy = plan_all(r, cpu_host(1024));
  const double without = least_memory(roomy, false), with = least_memory(roomy, true);
  ASSERT_LT(with, without) << "a context group holds a quarter of each sequence's activations";
  // Memory for the ranks between the two: no layout of whole sequences fits.
  const double budget = (with + without) / 2;
  const PlanResult tight = plan_all(r, cpu_host(4 * budget / kGiB));
  ASSERT_FALSE(tight.fitting.empty());
  for (const Prediction& p : tight.fitting) EXPECT_GT(p.shape.cp, 1) << layout_string(p);
  const Prediction& best = tight.fitting.front();
  EXPECT_NE(layout_string(best).find(",cp="), std::string::npos);
  EXPECT_LE(best.memory_bytes, best.capacity_bytes);
  EXPECT_EQ(best.memory_bytes, estimated_peak(r, best)) << layout_string(best);
  EXPECT_GT(cost(best, "cp-comm"), 0.0);
}

TEST(PlanContext, ShortSequencesKeepWholeSequences) {
  // At 4096 tokens cp 2 is tried (2048 rows a rank) but the ring only adds work.
  for (const char* cluster : {"dgx-h100", "host"}) {
    const Cluster c = std::string(cluster) == "host" ? cpu_host(64) : find_cluster(cluster);
    const PlanResult r = plan_all(request(long_deck(4096), 4), c);
    ASSERT_FALSE(r.fitting.empty());
    EXPECT_EQ(r.fitting.front().shape.cp, 1) << cluster << ": " << layout_string(r.fitting.front());
    EXPECT_TRUE(std::any_of(r.fitting.begin(), r.fitting.end(),
                            [](const Prediction& p) { return p.shape.cp == 2; }))
        << cluster;
  }
  // 2048 tokens: no context group leaves a rank 2048 rows or more, none is tried.
  const PlanResult r = plan_all(request(long_deck(2048), 4), find_cluster("dgx-h100"));
  ASSERT_FALSE(r.fitting.empty());
  EXPECT_TRUE(std::none_of(r.fitting.begin(), r.fitting.end(),
                           [](const Prediction& p) { return p.shape.cp > 1; }));
}

// dp 2 x cp 2 at two sequences a micro-batch against dp 4 at one: the same
// tokens a rank and micro-batch, the same micro-batches, a gradient reduction
// over the same four replicas. They differ by the ring's transfers alone.
TEST(PlanContext, TheRingIsItsOwnTermAndGradientsReduceOverDataAndContext) {
  const PlanRequest r = request(long_deck(16384), 4);
  for (const char* name : {"dgx-h100", "host"}) {
    SCOPED_TRACE(name);
    const Cluster c = std::string(name) == "host" ? cpu_host(64) : find_cluster(name);
    const Prediction data =
        plan_layout(r, layout_overrides("tp=1,pp=1,dp=4,v=1,mb=1,zero=1,sp=0,recompute=none"), c);
    const Prediction context = plan_layout(
        r, layout_overrides("tp=1,pp=1,dp=2,cp=2,v=1,mb=2,zero=1,sp=0,recompute=none"), c);
    EXPECT_EQ(context.shape.cp, 2);
    EXPECT_EQ(cost(data, "cp-comm"), -1);  // no term without a context group
    const double ring = cost(context, "cp-comm");
    EXPECT_GT(ring, 0.0);
    for (const char* same : {"gemm", "memory-bound", "dp-comm", "dp-latency", "optimizer"})
      EXPECT_NEAR(cost(context, same), cost(data, same), 1e-9 * data.step_s) << same;
    EXPECT_NEAR(context.step_s - data.step_s, ring, 1e-9 * data.step_s);
  }
  // On a GPU the ring hides behind attention as far as the cluster's overlap lets it.
  Cluster hidden = find_cluster("dgx-h100"), exposed = hidden;
  exposed.comm_overlap = 0;
  const auto layout = layout_overrides("tp=1,pp=1,dp=1,cp=4,v=1,mb=1,zero=1,sp=0,recompute=full");
  EXPECT_LT(cost(plan_layout(r, layout, hidden), "cp-comm"),
            cost(plan_layout(r, layout, exposed), "cp-comm"));
}
