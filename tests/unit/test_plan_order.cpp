// The planner's list order (order_fastest_first): predictions within 0.5% of
// the group's fastest are a tie, listed simplest first, even where ties chain
// (a within 0.5% of b, b of c, but a and c 0.9% apart), and the same
// predictions come out in the same order whatever order they go in.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "plan/planner.hpp"

using namespace trident;

namespace {

Prediction predicted(const std::string& name, double step_s, int zero, int cp, double memory) {
  Prediction p;
  p.step_s = step_s;
  p.zero_stage = zero;
  p.shape.cp = cp;
  p.memory_bytes = memory;
  p.micro_batch = int(name[0]);  // tells them apart in the test
  return p;
}

std::string names(const std::vector<Prediction>& ps) {
  std::string out;
  for (const Prediction& p : ps) out += char(p.micro_batch);
  return out;
}

}  // namespace

TEST(PlanOrder, ChainedNearTiesAreGroupedFromTheFastest) {
  // a < b < c, each within 0.5% of the next, a and c 0.9% apart; the simpler
  // the slower, so "within 0.5% the simpler wins" pair by pair would cycle.
  const std::vector<Prediction> given = {
      predicted("a", 1.000, 2, 1, 10), predicted("b", 1.0045, 1, 1, 10),
      predicted("c", 1.009, 0, 1, 10),
      predicted("e", 1.002, 1, 2, 10),   // a's group: as simple as b but a context group
      predicted("f", 1.0045, 1, 1, 20),  // b's twin with more memory
      predicted("g", 1.020, 0, 1, 5)};   // a group of its own
  // a leads {a, e, b, f}, listed by ZeRO stage, then cp, then memory: b f e a;
  // c (0.9% from a) leads the next group, g the last.
  const std::string expected = "bfeacg";
  std::vector<int> order(given.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = int(i);
  int permutations = 0;
  do {
    std::vector<Prediction> ps;
    for (int i : order) ps.push_back(given[i]);
    order_fastest_first(ps);
    ASSERT_EQ(names(ps), expected) << "input permutation " << permutations;
    ++permutations;
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(permutations, 720);
}

TEST(PlanOrder, ExactTiesFallBackToTheLayout) {
  // Equal in every key but the layout: ordered by the layout string.
  std::vector<Prediction> ps = {predicted("y", 1.0, 0, 1, 1), predicted("x", 1.0, 0, 1, 1)};
  ps[0].shape.tp = 2;  // "tp=2,..." after "tp=1,..."
  order_fastest_first(ps);
  EXPECT_EQ(names(ps), "xy");
  std::swap(ps[0], ps[1]);
  order_fastest_first(ps);
  EXPECT_EQ(names(ps), "xy");
}
