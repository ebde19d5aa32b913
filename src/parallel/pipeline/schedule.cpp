#include "parallel/pipeline/schedule.hpp"

#include <algorithm>

#include "parallel/pipeline/schedule_sim.hpp"

namespace trident {

std::vector<PipelineAction> build_schedule(ScheduleKind kind, int p, int s, int m, int v,
                                           const ZeroBubbleCosts* costs) {
  std::vector<PipelineAction> a;
  auto F = [&](int mb, int c) { a.push_back({true, mb, c}); };
  auto B = [&](int mb, int c) { a.push_back({false, mb, c}); };
  switch (kind) {
    case ScheduleKind::naive:
      for (int i = 0; i < m; ++i) F(i, 0), B(i, 0);
      break;
    case ScheduleKind::gpipe:
      for (int i = 0; i < m; ++i) F(i, 0);
      for (int i = 0; i < m; ++i) B(i, 0);
      break;
    case ScheduleKind::one_f_one_b: {
      const int warm = std::min(p - s - 1, m);
      for (int i = 0; i < warm; ++i) F(i, 0);
      for (int i = 0; i < m - warm; ++i) F(warm + i, 0), B(i, 0);
      for (int i = m - warm; i < m; ++i) B(i, 0);
      break;
    }
    case ScheduleKind::interleaved: {
      // k-th forward of this rank: groups of p micro-batches walk the chunks
      // in order; backwards walk them in reverse. Needs m % p == 0.
      const int total = m * v;
      auto mb_of = [&](int k) { return (k / (p * v)) * p + k % p; };
      auto fchunk = [&](int k) { return (k / p) % v; };
      auto bchunk = [&](int k) { return v - 1 - (k / p) % v; };
      const int warm = std::min((p - s - 1) * 2 + (v - 1) * p, total);
      for (int k = 0; k < warm; ++k) F(mb_of(k), fchunk(k));
      for (int k = 0; k < total - warm; ++k)
        F(mb_of(warm + k), fchunk(warm + k)), B(mb_of(k), bchunk(k));
      for (int k = total - warm; k < total; ++k) B(mb_of(k), bchunk(k));
      break;
    }
    case ScheduleKind::pipedream:
      return pipedream_actions(p, s, m, 0, true, m + p);
    case ScheduleKind::zb_h1:
    case ScheduleKind::zb_h2:
    case ScheduleKind::zb_v:
      return zero_bubble_schedule(kind, p, m, costs ? *costs : unit_costs(kind, p, m))[s];
  }
  return a;
}

std::vector<PipelineAction> pipedream_actions(int p, int s, int m, int step, bool warm_up,
                                              long long end) {
  std::vector<PipelineAction> a;
  const long long first = (long long)step * m, ahead = pipedream_in_flight(p, s) - 1;
  auto F = [&](long long g) {
    if (g < end) a.push_back({true, int(g), 0});
  };
  if (warm_up)
    for (long long k = 0; k < ahead; ++k) F(first + k);
  for (long long g = first; g < first + m; ++g) F(g + ahead), a.push_back({false, int(g), 0});
  return a;
}

int max_in_flight(const std::vector<PipelineAction>& actions, int chunk) {
  int live = 0, peak = 0;
  for (const auto& x : actions) {
    if (x.chunk != chunk) continue;
    live += x.forward ? 1 : x.frees_slot() ? -1 : 0;
    peak = std::max(peak, live);
  }
  return std::max(peak, 1);
}

int activation_slots(const std::vector<PipelineAction>& actions, int chunk) {
  int slots = max_in_flight(actions, chunk);
  for (const auto& x : actions)
    if (x.chunk == chunk && x.forward) slots = std::max(slots, x.slot + 1);
  return slots;
}

SendBufferPool send_buffer_pool(const std::vector<PipelineAction>& actions,
                                const std::vector<bool>& sends) {
  SendBufferPool pool;
  for (const auto& x : actions) pool.size = std::max(pool.size, x.send_buffer + 1);
  if (pool.size > 0) return pool;
  for (std::size_t c = 0; c < sends.size(); ++c) {
    pool.first.push_back(pool.size);
    if (sends[c]) pool.size += activation_slots(actions, int(c));
  }
  return pool;
}

int max_pending_weights(const std::vector<PipelineAction>& actions, int chunk) {
  int pending = 0, peak = 0;
  for (const auto& x : actions) {
    if (x.chunk != chunk || x.forward || x.part == BackwardPart::both) continue;
    pending += x.part == BackwardPart::input ? 1 : -1;
    peak = std::max(peak, pending);
  }
  return peak;
}

int in_flight_bound(ScheduleKind kind, int p, int s, int m) {
  switch (kind) {
    case ScheduleKind::naive: return 1;
    case ScheduleKind::gpipe: return m;
    case ScheduleKind::one_f_one_b: return std::min(p - s, m);
    case ScheduleKind::zb_h1: return std::min(p, m);
    case ScheduleKind::zb_h2: return std::min(2 * p - 1, m);
    default: return 0;
  }
}

double theoretical_bubble(ScheduleKind kind, int p, int m, int v) {
  switch (kind) {
    case ScheduleKind::zb_h1:
    case ScheduleKind::zb_h2:
    case ScheduleKind::zb_v: {
      const ZeroBubbleCosts unit = unit_costs(kind, p, m);
      const auto all = zero_bubble_schedule(kind, p, m, unit);
      return replayed_bubble(all, places_chunks_in_v(kind) ? 2 : 1, places_chunks_in_v(kind), unit);
    }
    case ScheduleKind::naive: return double(p - 1) / p;  // one stage busy at a time
    case ScheduleKind::interleaved: return double(p - 1) / (double(v) * m + p - 1);
    // No flush: the steady state has no bubble. (The step's loss reduction
    // still lets backwards ripple through once per step; measured, not modelled.)
    case ScheduleKind::pipedream: return 0.0;
    default: return double(p - 1) / (m + p - 1);
  }
}

}  // namespace trident
