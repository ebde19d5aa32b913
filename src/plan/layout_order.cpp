// The planner's list order: fastest first, the simpler layout first among
// those predicted within 0.5% (planner.hpp, order_fastest_first).
#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "plan/planner.hpp"

namespace trident {

namespace {

// Predicted times within 0.5% of each other count as a tie.
bool within_tolerance(double a, double b) {
  return std::abs(a - b) <= 0.005 * std::min(a, b);
}

struct Ranked {
  const Prediction* p;
  std::string layout;  // the last tie-breaker, so that no two entries compare equal
};

auto fastest_key(const Ranked& r) {
  return std::tie(r.p->step_s, r.p->zero_stage, r.p->shape.cp, r.p->memory_bytes, r.layout);
}
auto simplest_key(const Ranked& r) {
  return std::tie(r.p->zero_stage, r.p->shape.cp, r.p->memory_bytes, r.p->step_s, r.layout);
}

}  // namespace

// "Within 0.5% the simpler layout wins" compared pair by pair is no strict
// weak order (ties are not transitive), so the ties are made groups first.
void order_fastest_first(std::vector<Prediction>& predictions) {
  std::vector<Ranked> ranked;
  ranked.reserve(predictions.size());
  for (const Prediction& p : predictions) ranked.push_back({&p, layout_string(p)});
  std::sort(ranked.begin(), ranked.end(),
            [](const Ranked& a, const Ranked& b) { return fastest_key(a) < fastest_key(b); });
  for (auto group = ranked.begin(); group != ranked.end();) {
    auto end = std::find_if(group, ranked.end(), [&](const Ranked& r) {
      return !within_tolerance(group->p->step_s, r.p->step_s);
    });
    std::sort(group, end,
              [](const Ranked& a, const Ranked& b) { return simplest_key(a) < simplest_key(b); });
    group = end;
  }
  std::vector<Prediction> ordered;
  ordered.reserve(predictions.size());
  for (const Ranked& r : ranked) ordered.push_back(*r.p);
  predictions = std::move(ordered);
}

}  // namespace trident
