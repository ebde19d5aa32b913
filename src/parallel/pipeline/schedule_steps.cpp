// Steps replayed back to back: the joins between them (StepJoins) and the
// steady idle share per step (steady_bubble).
#include <algorithm>
#include <stdexcept>

#include "parallel/pipeline/schedule_sim.hpp"

namespace trident {

StepJoins::StepJoins(std::vector<std::size_t> step_len, std::vector<double> tail, bool barrier,
                     int steps, std::vector<std::size_t> share_at)
    : step_len_(std::move(step_len)),
      tail_(std::move(tail)),
      barrier_(barrier),
      share_at_(std::move(share_at)),
      ended_(std::size_t(steps), std::vector<double>(tail_.size(), -1)),
      shared_(ended_),
      settled_(std::size_t(steps), std::vector<bool>(tail_.size(), false)) {}

double StepJoins::tail_from(std::size_t k, std::size_t r) const {
  const std::size_t p = tail_.size();
  if (share_at_.empty() || (r != 0 && r != p - 1)) return ended_[k][r];
  return std::max(ended_[k][r], shared_[k][r == 0 ? p - 1 : 0]);
}

StepJoins::Join StepJoins::before(int s, std::size_t i, bool speculative, double start) const {
  const std::size_t rank = std::size_t(s), len = step_len_[rank], k = i / len, p = tail_.size();
  Join j;
  j.start = start;
  if (k == 0) return j;
  const std::vector<double>& ended = ended_[k - 1];
  double latest = 0;  // every rank's step k - 1 ended (with its tail, without a barrier)
  for (std::size_t r = 0; r < p; ++r) {
    if (ended[r] < 0) {
      j.wait = barrier_ ? i % len == 0 : !settled_[k][rank] || i % len == 0;
      if (j.wait) return j;
      latest = -1;
      break;
    }
    latest = std::max(latest, barrier_ ? ended[r] : tail_from(k - 1, r) + tail_[r]);
  }
  if (barrier_) {
    if (i % len == 0) j.start = std::max(j.start, latest + tail_[rank]);
    return j;
  }
  if (i % len == 0) j.start = std::max(j.start, tail_from(k - 1, rank) + tail_[rank]);
  if (settled_[k][rank]) return j;
  if (speculative) j.leave_at = latest;
  else j.start = std::max(j.start, latest);
  j.settles = true;
  return j;
}

void StepJoins::after(int s, std::size_t i, double end, bool settles) {
  const std::size_t rank = std::size_t(s), len = step_len_[rank];
  if (settles) settled_[i / len][rank] = true;
  if ((i + 1) % len == 0) ended_[i / len][rank] = end;
  if (!share_at_.empty() && i % len == share_at_[rank]) shared_[i / len][rank] = end;
}

std::vector<std::size_t> tied_share_at(const std::vector<std::vector<PipelineAction>>& ranks,
                                       TiedJoin join) {
  if (join == TiedJoin::none) return {};
  std::vector<std::size_t> at;
  for (const auto& list : ranks) at.push_back(list.size() - 1);
  if (join == TiedJoin::last_input_grad) {
    const auto& last = ranks.back();
    for (std::size_t i = 0; i < last.size(); ++i)
      if (!last[i].forward && last[i].part != BackwardPart::weights) at.back() = i;
  }
  return at;
}

double steady_bubble(const std::vector<std::vector<PipelineAction>>& ranks, int chunks,
                     bool v_shape, const ZeroBubbleCosts& costs, const std::vector<double>& tail,
                     bool barrier, int steps, TiedJoin tied) {
  const int p = int(ranks.size());
  int m = 0;
  for (const auto& list : ranks)
    for (const PipelineAction& a : list) m = std::max(m, a.micro_batch + 1);
  // Step k's micro-batch i is micro-batch k * m + i of one long replay.
  std::vector<std::vector<PipelineAction>> repeated(ranks.size());
  std::vector<std::size_t> step_len;
  double busy = 0, working = 0;
  for (int s = 0; s < p; ++s) {
    step_len.push_back(ranks[s].size());
    for (int k = 0; k < steps; ++k)
      for (PipelineAction a : ranks[s]) {
        a.micro_batch += k * m;
        repeated[s].push_back(a);
      }
    for (const PipelineAction& a : ranks[s])
      busy += pass_duration(a, virtual_stage_of(v_shape, p, s, a.chunk), &costs);
  }
  StepJoins joins(step_len, tail, barrier, steps, tied_share_at(ranks, tied));
  const ScheduleReplay r = replay_schedule(repeated, chunks, v_shape, &costs, &joins);
  if (!r.deadlock.empty()) throw std::logic_error("steady_bubble: " + r.deadlock);
  // Per rank, the period over the second half of the steps, less its tail.
  const int h = steps / 2;
  for (int s = 0; s < p; ++s)
    working += (joins.ended(steps - 1, s) - joins.ended(steps - 1 - h, s)) / h - tail[s];
  return 1.0 - busy / working;
}

}  // namespace trident
