#include "train/scheduled_runner_costs.hpp"

#include "parallel/pipeline/schedule_sim.hpp"

namespace trident {

void PassClock::add(const PipelineAction& a, double seconds) {
  if (a.forward) f += seconds, ++nf;
  else if (a.part == BackwardPart::input) b += seconds, ++nb;
  else if (a.part == BackwardPart::weights) w += seconds, ++nw;
  else both += seconds, ++nboth;
}

double measured_floor(Communicator& world, const StagePlan& plan,
                      const std::vector<PassClock>& clocks) {
  const int V = int(plan.partition.size()) - 1;
  // Per virtual stage: the sums and counts of F, B, W and fused passes.
  std::vector<double> sums(std::size_t(8 * V), 0.0);
  for (std::size_t c = 0; c < clocks.size() && c < plan.chunks.size(); ++c) {
    const PassClock& k = clocks[c];
    double* at = &sums[std::size_t(8 * plan.chunks[c].virtual_stage)];
    const double mine[8] = {k.f, k.b, k.w, k.both, double(k.nf), double(k.nb), double(k.nw),
                            double(k.nboth)};
    for (int i = 0; i < 8; ++i) at[i] += mine[i];
  }
  if (world.size() > 1) world.all_reduce(sums.data(), sums.size(), DType::f64, ReduceOp::sum);
  ZeroBubbleCosts costs;
  for (int vs = 0; vs < V; ++vs) {
    const double* s = &sums[std::size_t(8 * vs)];
    auto mean = [&](int i) { return s[i + 4] > 0 ? s[i] / s[i + 4] : 0.0; };
    if (s[4] == 0 || s[5] + s[7] == 0) return -1;  // no forward or no backward measured
    const bool split = s[5] > 0;
    costs.f.push_back(mean(0));
    costs.b.push_back(split ? mean(1) : mean(3));
    costs.w.push_back(split ? mean(2) : 0.0);
  }
  const int chunks = int(plan.chunks.size());
  return replayed_bubble(plan.all_actions, chunks, places_chunks_in_v(plan.schedule), costs);
}

}  // namespace trident
