#include "parallel/pipeline/schedule.hpp"

#include <algorithm>
#include <stdexcept>

#include "parallel/pipeline/schedule_sim.hpp"

namespace trident {

ScheduleKind parse_schedule(const std::string& n) {
  if (n == "naive") return ScheduleKind::naive;
  if (n == "gpipe") return ScheduleKind::gpipe;
  if (n == "1f1b") return ScheduleKind::one_f_one_b;
  if (n == "interleaved") return ScheduleKind::interleaved;
  if (n == "pipedream") return ScheduleKind::pipedream;
  if (n == "zb-h1") return ScheduleKind::zb_h1;
  if (n == "zb-h2") return ScheduleKind::zb_h2;
  throw std::invalid_argument(n);
}

const char* schedule_name(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::naive: return "naive";
    case ScheduleKind::gpipe: return "gpipe";
    case ScheduleKind::one_f_one_b: return "1f1b";
    case ScheduleKind::interleaved: return "interleaved";
    case ScheduleKind::pipedream: return "pipedream";
    case ScheduleKind::zb_h1: return "zb-h1";
    case ScheduleKind::zb_h2: return "zb-h2";
  }
  return "?";
}

namespace {

// Zero bubble by list scheduling every stage at once in ticks of the paper's
// unit cost (T_F = T_B = T_W, Qi et al. 2024, section 3.1): a stage runs the
// B whose gradient has arrived (the critical path), else the next F if its
// input is there and fewer than limit[stage] micro-batches hold activations,
// else its oldest pending W, which thereby fills what would be a bubble.
struct Timeline {
  std::vector<std::vector<PipelineAction>> stages;
  int ticks = 0;
};

Timeline list_schedule(int p, int m, const std::vector<int>& limit) {
  Timeline t;
  t.stages.resize(p);
  // Tick at which micro-batch i's F / B finished on each stage (-1: not yet).
  std::vector<std::vector<int>> f_done(p, std::vector<int>(m, -1)), b_done = f_done;
  std::vector<int> nf(p, 0), nb(p, 0), nw(p, 0);
  auto arrived = [](int done, int tick) { return done >= 0 && done <= tick; };
  for (int left = p * m; left > 0; ++t.ticks) {
    if (t.ticks > 6 * (m + p)) throw std::logic_error("zero-bubble schedule: no progress");
    std::vector<PipelineAction> now(p);
    std::vector<bool> busy(p, true);
    for (int k = 0; k < p; ++k) {
      if (nb[k] < nf[k] && (k == p - 1 || arrived(b_done[k + 1][nb[k]], t.ticks)))
        now[k] = {false, nb[k], 0, BackwardPart::input};
      else if (nf[k] < m && nf[k] - nw[k] < limit[k] &&
               (k == 0 || arrived(f_done[k - 1][nf[k]], t.ticks)))
        now[k] = {true, nf[k], 0};
      else if (nw[k] < nb[k])
        now[k] = {false, nw[k], 0, BackwardPart::weights};
      else
        busy[k] = false;
    }
    for (int k = 0; k < p; ++k) {
      if (!busy[k]) continue;
      const PipelineAction& a = now[k];
      if (a.forward) f_done[k][nf[k]++] = t.ticks + 1;
      else if (a.part == BackwardPart::input) b_done[k][nb[k]++] = t.ticks + 1;
      else ++nw[k], --left;
      t.stages[k].push_back(a);
    }
  }
  return t;
}

// The list scheduler is greedy: letting later stages start fewer micro-batches
// (limit p - s + k, as 1F1B's p - s) sometimes shortens the step. Keep the
// shortest over k; every candidate respects `limit`.
std::vector<PipelineAction> zero_bubble_actions(int p, int s, int m, int limit) {
  Timeline best;
  for (int k = 0; k <= limit; ++k) {
    std::vector<int> limits(p);
    for (int j = 0; j < p; ++j) limits[j] = std::min(limit, p - j + k);
    Timeline t = list_schedule(p, m, limits);
    if (best.stages.empty() || t.ticks < best.ticks) best = std::move(t);
  }
  return best.stages[s];
}

}  // namespace

std::vector<PipelineAction> build_schedule(ScheduleKind kind, int p, int s, int m, int v) {
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
      return zero_bubble_actions(p, s, m, in_flight_bound(kind, p, s, m));
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
    case ScheduleKind::zb_h2: {  // every stage works 3m units of the makespan
      std::vector<std::vector<PipelineAction>> all;
      for (int s = 0; s < p; ++s) all.push_back(build_schedule(kind, p, s, m, v));
      return 1.0 - 3.0 * m / double(replay_schedule(all, v).makespan);
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
