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
                      const std::vector<PassClock>& clocks, const FloorOptions& options) {
  const int V = int(plan.partition.size()) - 1;
  const int p = int(plan.all_actions.size());
  // Per virtual stage: the sums and counts of F, B, W and fused passes; then
  // per pipeline rank the sum and count of its step tails.
  std::vector<double> sums(std::size_t(8 * V + 2 * p), 0.0);
  if (!plan.chunks.empty()) {
    double* tail = &sums[std::size_t(8 * V + 2 * plan.chunks.front().virtual_stage)];
    tail[0] += options.step_tail, tail[1] += 1;
  }
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
  const bool v_shape = places_chunks_in_v(plan.schedule);
  if (!options.across_steps) return replayed_bubble(plan.all_actions, chunks, v_shape, costs);
  std::vector<double> tails;
  for (int s = 0; s < p; ++s) {
    const double* t = &sums[std::size_t(8 * V + 2 * s)];
    tails.push_back(t[1] > 0 ? t[0] / t[1] : 0.0);
  }
  return steady_bubble(plan.all_actions, chunks, v_shape, costs, tails, options.barrier,
                       /*steps=*/8, options.tied);
}

}  // namespace trident
