// Steps replayed back to back (steady_bubble): with the synchronous step's
// barrier the per-step idle share is one step's, the textbook figure for
// 1F1B; without it (post-validation) work crosses the step boundary and
// zero bubble's lists leave less idle than one step's replay.
#include <gtest/gtest.h>

#include "parallel/pipeline/schedule.hpp"
#include "parallel/pipeline/schedule_sim.hpp"

using namespace trident;

namespace {

std::vector<std::vector<PipelineAction>> lists(ScheduleKind kind, int p, int m) {
  std::vector<std::vector<PipelineAction>> ranks;
  const int v = places_chunks_in_v(kind) ? 2 : 1;
  for (int s = 0; s < p; ++s) ranks.push_back(build_schedule(kind, p, s, m, v));
  return ranks;
}

}  // namespace

// With the barrier, steps back to back leave each step's idle: for 1F1B at
// unit costs the textbook (p - 1) / (m + p - 1), with or without a tail
// (the same on every rank: its own work, not idle).
TEST(ScheduleSteps, WithTheBarrier1F1BKeepsItsTextbookBubble) {
  for (int p = 2; p <= 4; ++p)
    for (int m = p; m <= 2 * p; ++m) {
      const ZeroBubbleCosts unit = unit_costs(ScheduleKind::zb_h1, p, m);
      const auto ranks = lists(ScheduleKind::one_f_one_b, p, m);
      EXPECT_NEAR(steady_bubble(ranks, 1, false, unit, std::vector<double>(std::size_t(p), 0.0),
                                true),
                  double(p - 1) / (m + p - 1), 1e-12);
      EXPECT_NEAR(steady_bubble(ranks, 1, false, unit, std::vector<double>(std::size_t(p), 1.0), true),
                  double(p - 1) / (m + p - 1), 1e-12);
    }
}

// zb-h2, p 2, m 2, F and B one unit, W one unit on stage 0 and two on
// stage 1 (lists: stage 0 F0 F1 B0 W0 B1 W1, stage 1 F0 B0 F1 B1 W0 W1).
// One step: stage 0 ends at 7, stage 1 at 9; 14 units of passes over 2 x 9:
// 2/9 idle. Without the barrier stage 0 computes the next F0 at 7-8 and
// sends it at 9, once stage 1's step is posted: the steps repeat every 8
// units, 1 - 14/16 = 1/8 idle.
TEST(ScheduleSteps, WithoutTheBarrierZbH2CrossesTheStepBoundary) {
  const auto ranks = lists(ScheduleKind::zb_h2, 2, 2);
  ZeroBubbleCosts costs = unit_costs(ScheduleKind::zb_h2, 2, 2);
  costs.w[1] = 2;
  const std::vector<double> none(2, 0.0);
  EXPECT_NEAR(replayed_bubble(ranks, 1, false, costs), 2.0 / 9, 1e-12);
  EXPECT_NEAR(steady_bubble(ranks, 1, false, costs, none, true), 2.0 / 9, 1e-12);
  EXPECT_NEAR(steady_bubble(ranks, 1, false, costs, none, false), 1.0 / 8, 1e-12);
  // A tail on each rank: its own work, not idle; stage 0's comes before its
  // next F0, stage 1's overlaps it (posted at 9 + 1 = 10, F0 sent at 10).
  EXPECT_NEAR(steady_bubble(ranks, 1, false, costs, {1.0, 1.0}, false), 1.0 / 8, 1e-12);
  // Tied embeddings on both ends: stage 0 waits for stage 1's last pass (9)
  // before its step, so the next F0 leaves at 10 and nothing is won.
  EXPECT_NEAR(steady_bubble(ranks, 1, false, costs, none, false, 8, TiedJoin::last_pass), 2.0 / 9, 1e-12);
  // Stage 1's share sent after its last B (B1 ends at 5): stage 0 begins its
  // tail at its own end (7), as untied, and the steps repeat every 8 units.
  EXPECT_NEAR(steady_bubble(ranks, 1, false, costs, none, false, 8, TiedJoin::last_input_grad),
              1.0 / 8, 1e-12);
  // Where stage 0 ends last (W 2.5 units there: it ends at 10, stage 1 at 9),
  // both ends' tails wait for stage 0's own end: sending early changes nothing.
  ZeroBubbleCosts slow0 = costs;
  slow0.w[0] = 2.5;
  EXPECT_NEAR(steady_bubble(ranks, 1, false, slow0, none, false, 8, TiedJoin::last_input_grad),
              steady_bubble(ranks, 1, false, slow0, none, false, 8, TiedJoin::last_pass), 1e-12);
}

// Where each rank's tied share is final: its last pass, or on the last rank
// its last B (zb-h2, p 2, m 2: stage 1 runs F0 B0 F1 B1 W0 W1, B1 at 3).
TEST(ScheduleSteps, TiedShareAt) {
  const auto ranks = lists(ScheduleKind::zb_h2, 2, 2);
  EXPECT_TRUE(tied_share_at(ranks, TiedJoin::none).empty());
  EXPECT_EQ(tied_share_at(ranks, TiedJoin::last_pass), (std::vector<std::size_t>{5, 5}));
  EXPECT_EQ(tied_share_at(ranks, TiedJoin::last_input_grad), (std::vector<std::size_t>{5, 3}));
}

// Without the barrier no list loses: the steady idle share is at most the
// synchronous one, for every zero-bubble schedule at unit costs.
TEST(ScheduleSteps, WithoutTheBarrierNoListLoses) {
  for (ScheduleKind k : {ScheduleKind::one_f_one_b, ScheduleKind::zb_h1, ScheduleKind::zb_h2,
                         ScheduleKind::zb_v})
    for (int p = 2; p <= 4; ++p)
      for (int m = p; m <= 3 * p; ++m) {
        const bool v = places_chunks_in_v(k);
        const ZeroBubbleCosts unit = unit_costs(k, p, m);
        const auto ranks = lists(k, p, m);
        const std::vector<double> tails(std::size_t(p), 0.25);
        EXPECT_LE(steady_bubble(ranks, v ? 2 : 1, v, unit, tails, false),
                  steady_bubble(ranks, v ? 2 : 1, v, unit, tails, true) + 1e-12)
            << choice_name(k) << " p " << p << " m " << m;
      }
}
