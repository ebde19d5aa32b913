#include "parallel/pipeline/partition.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <limits>

namespace trident {

Partition partition_uniform(int layers, int stages) {
  Partition p(stages + 1);
  for (int s = 0; s <= stages; ++s) p[s] = int(std::int64_t(layers) * s / stages);
  return p;
}

namespace {
double range_cost(const StageCosts& c, const std::vector<double>& prefix, int a, int b, int stage,
                  int stages) {
  double t = prefix[b] - prefix[a];
  if (stage == 0) t += c.first;
  if (stage == stages - 1) t += c.last;
  // A stage sends its output and receives a gradient at each inner boundary.
  t += c.boundary * ((stage > 0) + (stage < stages - 1));
  return t;
}
}  // namespace

std::vector<double> stage_costs(const StageCosts& c, const Partition& p) {
  const int stages = int(p.size()) - 1;
  std::vector<double> prefix(c.block.size() + 1, 0.0);
  for (std::size_t i = 0; i < c.block.size(); ++i) prefix[i + 1] = prefix[i] + c.block[i];
  std::vector<double> out;
  for (int s = 0; s < stages; ++s) out.push_back(range_cost(c, prefix, p[s], p[s + 1], s, stages));
  return out;
}

Partition partition_min_max(const StageCosts& c, int stages) {
  const int L = int(c.block.size());
  std::vector<double> prefix(L + 1, 0.0);
  for (int i = 0; i < L; ++i) prefix[i + 1] = prefix[i] + c.block[i];
  const double inf = std::numeric_limits<double>::infinity();
  // best[s][i]: minimal slowest-stage cost for blocks [0, i) on stages 0..s-1.
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(L + 1, inf));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(L + 1, 0));
  best[0][0] = 0;
  for (int s = 1; s <= stages; ++s)
    for (int i = s; i <= L - (stages - s); ++i)
      for (int j = s - 1; j < i; ++j) {
        if (best[s - 1][j] == inf) continue;
        const double v = std::max(best[s - 1][j], range_cost(c, prefix, j, i, s - 1, stages));
        if (v < best[s][i]) best[s][i] = v, cut[s][i] = j;
      }
  Partition p(stages + 1);
  p[stages] = L;
  for (int s = stages; s > 0; --s) p[s - 1] = cut[s][p[s]];
  return p;
}

double brute_force_min_max(const StageCosts& c, int stages) {
  const int L = int(c.block.size());
  double best = std::numeric_limits<double>::infinity();
  Partition p(stages + 1, 0);
  p[stages] = L;
  std::function<void(int)> rec = [&](int s) {  // choose p[s] for s = 1 .. stages-1
    if (s == stages) {
      const auto costs = stage_costs(c, p);
      best = std::min(best, *std::max_element(costs.begin(), costs.end()));
      return;
    }
    for (int b = p[s - 1] + 1; b <= L - (stages - s); ++b) p[s] = b, rec(s + 1);
  };
  rec(1);
  return best;
}

std::string format_partition(const Partition& p) {
  std::string s;
  for (std::size_t i = 0; i + 1 < p.size(); ++i)
    s += fmt::format("{}[{}..{})", i ? " " : "", p[i], p[i + 1]);
  return s;
}

StageSpec stage_spec_of(const Partition& part, int vs) {
  const int V = int(part.size()) - 1;
  return StageSpec{part[vs], part[vs + 1] - part[vs], vs == 0, vs == V - 1};
}

}  // namespace trident
