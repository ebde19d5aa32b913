#include "parallel/pipeline/schedule_sim.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <tuple>

namespace trident {
namespace {

bool is_input_grad(const PipelineAction& a) { return !a.forward && a.part != BackwardPart::weights; }

}  // namespace

double pass_duration(const PipelineAction& a, int vs, const ZeroBubbleCosts* costs) {
  if (!costs) return !a.forward && a.part == BackwardPart::both ? 2 : 1;
  const auto& c = *costs;
  if (a.forward) return c.f[vs];
  if (a.part == BackwardPart::input) return c.b[vs];
  return a.part == BackwardPart::weights ? c.w[vs] : c.b[vs] + c.w[vs];
}

namespace {

std::string describe(const PipelineAction& a) {
  const char* kind = a.forward ? "F" : a.part == BackwardPart::input ? "B" : a.part == BackwardPart::weights ? "W" : "BW";
  return fmt::format("{}{} (chunk {})", kind, a.micro_batch, a.chunk);
}

}  // namespace

ScheduleReplay replay_schedule(const std::vector<std::vector<PipelineAction>>& ranks, int v,
                               bool v_shape, const ZeroBubbleCosts* costs, StepJoins* joins) {
  const int p = int(ranks.size()), V = p * v;
  // Finish time of the F and of the input-gradient pass, and when the rank
  // reached the latter and posted its receive, per (virtual stage, micro-batch).
  std::map<std::pair<int, int>, double> f_end, b_end, b_posted;
  // A B that names its send buffer waits (after its own receive) until the B
  // that receives the gradient last sent from that buffer has posted its
  // receive: (rank, buffer) -> (virtual stage, micro-batch) of that gradient.
  std::map<std::pair<int, int>, std::pair<int, int>> sender;
  // When each F started (posted its receive), and per (rank, chunk, slot)
  // the micro-batch whose activation was last sent from that slot.
  std::map<std::pair<int, int>, double> f_posted;
  std::map<std::tuple<int, int, int>, int> slot_sent;
  std::vector<std::size_t> next(p, 0);
  std::vector<double> free_at(p, 0);
  ScheduleReplay r;
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      for (; next[s] < ranks[s].size(); ++next[s]) {
        const PipelineAction& a = ranks[s][next[s]];
        const int vs = virtual_stage_of(v_shape, p, s, a.chunk);
        const bool speculative = a.forward && vs == 0 && V > 1;
        StepJoins::Join join{false, free_at[s]};
        if (joins) join = joins->before(s, next[s], speculative, free_at[s]);
        if (join.wait) break;
        double start = join.start;
        if (is_input_grad(a)) b_posted.emplace(std::make_pair(vs, a.micro_batch), start);
        if (a.forward) f_posted.emplace(std::make_pair(vs, a.micro_batch), start);
        const bool sends_grad = is_input_grad(a) && vs > 0 && a.send_buffer >= 0;
        if (sends_grad) {
          auto held = sender.find({s, a.send_buffer});
          if (held != sender.end()) {
            auto it = b_posted.find({held->second.first - 1, held->second.second});
            if (it == b_posted.end()) break;
            if (it->second > start + 1e-9 && r.early_reuse.empty())
              r.early_reuse = fmt::format("rank {}: {} reuses send buffer {} before the gradient "
                                          "of micro-batch {} sent from it is received",
                                          s, describe(a), a.send_buffer, held->second.second);
            start = std::max(start, it->second);
          }
        }
        const auto slot_key = std::make_tuple(s, a.chunk, a.slot);
        if (a.forward && a.slot >= 0 && vs < V - 1) {
          auto held = slot_sent.find(slot_key);
          if (held != slot_sent.end()) {
            auto it = f_posted.find({vs + 1, held->second});
            if (it == f_posted.end()) break;
            if (it->second > start + 1e-9 && r.early_reuse.empty())
              r.early_reuse = fmt::format("rank {}: {} reuses slot {} before the activation of "
                                          "micro-batch {} sent from it is received",
                                          s, describe(a), a.slot, held->second);
            start = std::max(start, it->second);
          }
        }
        // What this action receives: the previous stage's F, the next one's B.
        if (a.forward && vs > 0) {
          auto it = f_end.find({vs - 1, a.micro_batch});
          if (it == f_end.end()) break;
          start = std::max(start, it->second);
        } else if (is_input_grad(a) && vs < V - 1) {
          auto it = b_end.find({vs + 1, a.micro_batch});
          if (it == b_end.end()) break;
          start = std::max(start, it->second);
        }
        free_at[s] = std::max(start + pass_duration(a, vs, costs), join.leave_at);
        if (joins) joins->after(s, next[s], free_at[s], join.settles);
        if (a.forward) f_end[{vs, a.micro_batch}] = free_at[s];
        if (a.forward && a.slot >= 0 && vs < V - 1) slot_sent[slot_key] = a.micro_batch;
        if (sends_grad) sender[{s, a.send_buffer}] = {vs, a.micro_batch};
        if (is_input_grad(a)) b_end[{vs, a.micro_batch}] = free_at[s];
        progress = true;
      }
    }
  }
  for (int s = 0; s < p; ++s) {
    r.time = std::max(r.time, free_at[s]);
    r.makespan = std::llround(r.time);
    if (next[s] < ranks[s].size() && r.deadlock.empty())
      r.deadlock = fmt::format("rank {} waits forever at {}", s, describe(ranks[s][next[s]]));
  }
  return r;
}

double replayed_bubble(const std::vector<std::vector<PipelineAction>>& ranks, int chunks,
                       bool v_shape, const ZeroBubbleCosts& costs) {
  const ScheduleReplay r = replay_schedule(ranks, chunks, v_shape, &costs);
  if (!r.deadlock.empty()) throw std::logic_error("replayed_bubble: " + r.deadlock);
  const int p = int(ranks.size());
  double busy = 0;
  for (int s = 0; s < p; ++s)
    for (const PipelineAction& a : ranks[s])
      busy += pass_duration(a, virtual_stage_of(v_shape, p, s, a.chunk), &costs);
  return 1.0 - busy / (p * r.time);
}

std::string message_order_problem(const std::vector<std::vector<PipelineAction>>& ranks,
                                  int chunks, bool v_shape) {
  const int p = int(ranks.size()), V = p * chunks;
  // (sender, receiver, forward) -> (receiving virtual stage, micro-batch) in order
  std::map<std::tuple<int, int, bool>, std::vector<std::pair<int, int>>> sent, received;
  for (int s = 0; s < p; ++s)
    for (const PipelineAction& a : ranks[s]) {
      const int vs = virtual_stage_of(v_shape, p, s, a.chunk), mb = a.micro_batch;
      auto rank = [&](int v) { return rank_of_virtual_stage(v_shape, p, v); };
      if (a.forward) {
        if (vs > 0) received[{rank(vs - 1), s, true}].push_back({vs, mb});
        if (vs < V - 1) sent[{s, rank(vs + 1), true}].push_back({vs + 1, mb});
      } else if (is_input_grad(a)) {
        if (vs < V - 1) received[{rank(vs + 1), s, false}].push_back({vs, mb});
        if (vs > 0) sent[{s, rank(vs - 1), false}].push_back({vs - 1, mb});
      }
    }
  for (const auto& [pair, order] : sent)
    if (received[pair] != order)
      return fmt::format("{} from rank {} to rank {} are received in another order than sent",
                         std::get<2>(pair) ? "activations" : "gradients", std::get<0>(pair),
                         std::get<1>(pair));
  return "";
}

std::string validate_schedule(ScheduleKind kind, int p, int m, int v) {
  const bool v_shape = places_chunks_in_v(kind);
  if (v_shape) v = 2;
  std::vector<std::vector<PipelineAction>> ranks;
  // (direction, receiving virtual stage, micro-batch) -> sends minus receives
  std::map<std::tuple<bool, int, int>, int> messages;
  const int V = p * v;
  for (int s = 0; s < p; ++s) {
    ranks.push_back(build_schedule(kind, p, s, m, v));
    // Per (chunk, micro-batch): position of its F, B and W in the list.
    std::map<std::pair<int, int>, std::vector<int>> seen;
    std::map<std::pair<int, int>, int> in_slot;  // (chunk, slot) -> its micro-batch, -1 freed
    for (std::size_t k = 0; k < ranks[s].size(); ++k) {
      const PipelineAction& a = ranks[s][k];
      const int vs = virtual_stage_of(v_shape, p, s, a.chunk);
      if (a.micro_batch < 0 || a.micro_batch >= m || a.chunk < 0 || a.chunk >= v)
        return fmt::format("rank {}: {} is out of range", s, describe(a));
      auto& pos = seen[{a.chunk, a.micro_batch}];
      if (pos.empty()) pos.assign(3, -1);
      const int idx = a.forward ? 0 : a.part == BackwardPart::weights ? 2 : 1;
      if (pos[idx] >= 0) return fmt::format("rank {}: {} runs twice", s, describe(a));
      pos[idx] = int(k);
      if (!a.forward && a.part == BackwardPart::both) pos[2] = int(k);
      if (a.forward && a.slot >= 0) {
        auto held = in_slot.find({a.chunk, a.slot});
        if (held != in_slot.end() && held->second >= 0)
          return fmt::format("rank {}: {} takes slot {} before micro-batch {} has left it", s,
                             describe(a), a.slot, held->second);
        in_slot[{a.chunk, a.slot}] = a.micro_batch;
      }
      if (splits_backward(kind) && is_input_grad(a) && (a.send_buffer >= 0) != (vs > 0))
        return fmt::format("rank {}: {} {} a send buffer", s, describe(a),
                           vs > 0 ? "sends its input gradient without" : "sends nothing but names");
      if (a.frees_slot())
        for (auto& [key, mb] : in_slot)
          if (key.first == a.chunk && mb == a.micro_batch) mb = -1;
      if (a.forward) {
        if (vs > 0) messages[{true, vs, a.micro_batch}] -= 1;
        if (vs < V - 1) messages[{true, vs + 1, a.micro_batch}] += 1;
      } else if (is_input_grad(a)) {
        if (vs < V - 1) messages[{false, vs, a.micro_batch}] -= 1;
        if (vs > 0) messages[{false, vs - 1, a.micro_batch}] += 1;
      }
    }
    for (int c = 0; c < v; ++c)
      for (int i = 0; i < m; ++i) {
        auto it = seen.find({c, i});
        if (it == seen.end() || *std::min_element(it->second.begin(), it->second.end()) < 0)
          return fmt::format("rank {}: micro-batch {} of chunk {} lacks an F, B or W", s, i, c);
        const auto& pos = it->second;
        if (!(pos[0] < pos[1] && pos[1] <= pos[2]))
          return fmt::format("rank {}: micro-batch {} of chunk {} runs out of order", s, i, c);
      }
    const int bound = in_flight_bound(kind, p, s, m);
    if (bound > 0 && max_in_flight(ranks[s], 0) > bound)
      return fmt::format("rank {}: {} micro-batches in flight, above the bound {}", s,
                         max_in_flight(ranks[s], 0), bound);
    if (splits_backward(kind)) {
      const ZeroBubbleCosts c = unit_costs(kind, p, m);
      double bytes = send_buffer_pool(ranks[s], {}).size * c.send_bytes;
      for (int ch = 0; ch < v; ++ch) {
        const int vs = virtual_stage_of(v_shape, p, s, ch);
        bytes += activation_slots(ranks[s], ch) * c.slot_bytes[vs] +
                 max_pending_weights(ranks[s], ch) * c.w_bytes[vs];
      }
      if (c.budget[s] > 0 && bytes > c.budget[s] * (1 + 1e-9))
        return fmt::format("rank {}: slots, W and send buffers take {:.3f}, above the budget "
                           "{:.3f}", s,
                           bytes, c.budget[s]);
    }
  }
  for (const auto& [key, balance] : messages)
    if (balance != 0)
      return fmt::format("{} of micro-batch {} to virtual stage {}: {}",
                         std::get<0>(key) ? "activation" : "gradient", std::get<2>(key),
                         std::get<1>(key),
                         balance > 0 ? "sent, never received" : "received, never sent");
  if (std::string order = message_order_problem(ranks, v, v_shape); !order.empty()) return order;
  const ScheduleReplay replay = replay_schedule(ranks, v, v_shape);
  return replay.deadlock.empty() ? replay.early_reuse : replay.deadlock;
}

}  // namespace trident
