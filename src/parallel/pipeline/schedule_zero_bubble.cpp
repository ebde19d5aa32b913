// Zero-bubble lists (Qi et al., ICLR 2024) by list scheduling every rank at
// once over the costs of each pass (section 3.1's heuristic): a rank that is
// free runs the B whose gradient has arrived (the critical path), else the
// next F whose input is there and whose slot fits, else its oldest pending W,
// which thereby fills what would be a bubble. Candidates that alternate take
// the F first after a B (the heuristic's steady state: F and B in turn).
//
// Memory is what the trainer allocates: per chunk, the activation slots the
// list assigns and as many W buffers as ever wait between B and W; per rank,
// the send buffers its B write their input gradients to. A slot is taken at
// F and free again once its W has run. A send buffer is taken at B and free
// again once the previous virtual stage has started the B that receives from
// it (the send reads it until then; the trainer and the replay free it a
// little earlier, when that B posts its receive, the first thing a B does):
// each B that sends names its buffer, so the trainer waits for exactly the
// receive the list was built around and cannot deadlock. A rank may grow any
// pool only within its budget; a B that finds no room for a W buffer runs
// fused with its W (nothing kept), one that finds no free send buffer and no
// room for one waits.
// The candidates differ in how much budget the slots leave to W buffers (a
// slot fewer lets W wait: the paper's ZB-H1 delays W and keeps 1F1B's count),
// in how many forwards each virtual stage may start and in whether send
// buffers come with the slots; the shortest wins.
#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <stdexcept>

#include "parallel/pipeline/schedule.hpp"
#include "parallel/pipeline/schedule_sim.hpp"

namespace trident {
namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

struct Chunk {
  int vs = 0;
  int cap = 0;                     // forwards in flight at most (schedule's bound)
  int nf = 0, nb = 0;              // F and B done, in micro-batch order
  int live = 0, pending = 0;       // micro-batches F to W; W buffers held
  int buffers = 0;                 // W buffers allocated
  std::vector<int> occupant{-1};   // per slot: its last micro-batch (one reserved up front)
};

struct Rank {
  std::vector<Chunk> chunks;
  // Per send buffer: (virtual stage, micro-batch) of its last gradient; one
  // reserved up front where a chunk sends.
  std::vector<std::pair<int, int>> sent;
  std::deque<std::pair<int, int>> waiting_w;  // (chunk, micro-batch) in B order
  double free_at = 0, budget = 0, reserve = 0;
  bool after_b = false;  // the last pass was a B
  std::vector<PipelineAction> actions;
};

struct Outcome {
  std::vector<std::vector<PipelineAction>> ranks;
  double makespan = kNever;
};

double pool_bytes(const Rank& r, const ZeroBubbleCosts& c) {
  double bytes = double(r.sent.size()) * c.send_bytes;
  for (const Chunk& k : r.chunks)
    bytes += double(k.occupant.size()) * c.slot_bytes[k.vs] + k.buffers * c.w_bytes[k.vs];
  return bytes;
}

// One candidate: `cap_extra` more forwards per virtual stage than 1F1B's
// V - vs, slots kept `reserve` bytes below the budget, send buffers grown as
// B needs them or one with each slot of a chunk that sends (as many as
// micro-batches that may be sending, which spares B their waits).
Outcome simulate(ScheduleKind kind, int p, int m, const ZeroBubbleCosts& c, int cap_extra,
                 double reserve_w, bool alternate, bool send_buffer_per_slot) {
  const bool v_shape = places_chunks_in_v(kind);
  const int chunks = v_shape ? 2 : 1, V = p * chunks;
  std::vector<std::vector<double>> f_done(V, std::vector<double>(m, kNever)), b_done = f_done,
                                   b_start = f_done, w_done = f_done;
  // The first slot of chunk k that is free at t (its W done), -1: none.
  auto free_slot = [&](const Chunk& k, double t) {
    for (std::size_t i = 0; i < k.occupant.size(); ++i) {
      const int mb = k.occupant[i];
      if (mb < 0 || w_done[k.vs][mb] <= t) return int(i);
    }
    return -1;
  };
  // The first send buffer of rank r free at t for chunk k's next B (its
  // gradient's receiving B started, or that B is this one: a B receives
  // before it waits for its send buffer), -1: none.
  auto free_send_buffer = [&](const Rank& r, const Chunk& k, double t) {
    for (std::size_t i = 0; i < r.sent.size(); ++i) {
      const auto [vs, mb] = r.sent[i];
      if (vs < 0 || b_start[vs - 1][mb] <= t || (vs - 1 == k.vs && mb == k.nb)) return int(i);
    }
    return -1;
  };
  std::vector<Rank> ranks(p);
  for (int s = 0; s < p; ++s) {
    Rank& r = ranks[s];
    r.budget = c.budget.empty() || c.budget[s] <= 0 ? kNever : c.budget[s];
    r.reserve = reserve_w;
    for (int ch = 0; ch < chunks; ++ch) {
      Chunk k;
      k.vs = virtual_stage_of(v_shape, p, s, ch);
      const int bound = in_flight_bound(kind, p, s, m);
      k.cap = std::min(bound > 0 ? bound : m, V - k.vs + cap_extra);
      if (k.vs > 0 && (r.sent.empty() || send_buffer_per_slot)) r.sent.push_back({-1, -1});
      r.chunks.push_back(k);
    }
  }
  std::size_t left = std::size_t(V) * m;  // slots still to free
  double t = 0;
  auto fits = [&](const Rank& r, double more, double room) {
    return pool_bytes(r, c) + more <= room * (1 + 1e-12);
  };
  while (left > 0) {
    for (int s = 0; s < p; ++s) {
      Rank& r = ranks[s];
      if (r.free_at > t) continue;
      // B: the lowest micro-batch whose gradient is here, the later virtual stage first.
      Chunk *b = nullptr, *f = nullptr;
      const bool send_buffer_room = fits(r, c.send_bytes, r.budget);
      for (Chunk& k : r.chunks) {
        if (k.nb >= k.nf || (k.vs < V - 1 && b_done[k.vs + 1][k.nb] > t)) continue;
        if (k.vs > 0 && free_send_buffer(r, k, t) < 0 && !send_buffer_room) continue;
        if (!b || k.nb < b->nb || (k.nb == b->nb && k.vs > b->vs)) b = &k;
      }
      // F: the lowest micro-batch whose input is here and whose slot fits.
      for (Chunk& k : r.chunks) {
        if (k.nf >= m || k.live >= k.cap || (k.vs > 0 && f_done[k.vs - 1][k.nf] > t)) continue;
        const double more =
            c.slot_bytes[k.vs] + (send_buffer_per_slot && k.vs > 0 ? c.send_bytes : 0);
        if (free_slot(k, t) < 0 && !fits(r, more, r.budget - r.reserve)) continue;
        if (!f || k.nf < f->nf || (k.nf == f->nf && k.vs > f->vs)) f = &k;
      }
      if (b && f && alternate && r.after_b) b = nullptr;
      PipelineAction a;
      double dur = 0;
      if (b) {
        Chunk& k = *b;
        const int ch = int(&k - r.chunks.data());
        int buffer = -1;
        if (k.vs > 0) {
          buffer = free_send_buffer(r, k, t);
          if (buffer < 0) {
            buffer = int(r.sent.size());
            r.sent.push_back({-1, -1});
          }
          r.sent[std::size_t(buffer)] = {k.vs, k.nb};
        }
        const bool split = k.pending < k.buffers || fits(r, c.w_bytes[k.vs], r.budget);
        a = {false, k.nb, ch, split ? BackwardPart::input : BackwardPart::both, -1, buffer};
        dur = c.b[k.vs] + (split ? 0 : c.w[k.vs]);
        b_start[k.vs][k.nb] = t;
        b_done[k.vs][k.nb] = t + dur;
        if (split) {
          k.buffers = std::max(k.buffers, ++k.pending);
          r.waiting_w.push_back({ch, k.nb});
        } else {
          w_done[k.vs][k.nb] = t + dur;
          --k.live, --left;
        }
        ++k.nb;
      } else if (f) {
        Chunk& k = *f;
        int slot = free_slot(k, t);
        if (slot < 0) {
          slot = int(k.occupant.size());
          k.occupant.push_back(-1);
          if (send_buffer_per_slot && k.vs > 0) r.sent.push_back({-1, -1});
        }
        k.occupant[std::size_t(slot)] = k.nf;
        a = {true, k.nf, int(&k - r.chunks.data()), BackwardPart::both, slot};
        dur = c.f[k.vs];
        f_done[k.vs][k.nf] = t + dur;
        ++k.live;
        ++k.nf;
      } else if (!r.waiting_w.empty()) {
        auto [ch, mb] = r.waiting_w.front();
        r.waiting_w.pop_front();
        Chunk& k = r.chunks[ch];
        a = {false, mb, ch, BackwardPart::weights};
        dur = c.w[k.vs];
        w_done[k.vs][mb] = t + dur;
        --k.pending, --k.live, --left;
      } else {
        continue;
      }
      if (!a.forward || a.part != BackwardPart::weights) r.after_b = !a.forward;
      r.actions.push_back(a);
      r.free_at = t + dur;
    }
    double next = kNever;
    for (const Rank& r : ranks)
      if (r.free_at > t) next = std::min(next, r.free_at);
    if (next == kNever) return {};  // nobody can move: this candidate is infeasible
    t = next;
  }
  Outcome o;
  o.makespan = 0;
  for (Rank& r : ranks) {
    o.makespan = std::max(o.makespan, r.free_at);
    o.ranks.push_back(std::move(r.actions));
  }
  return o;
}

}  // namespace

ZeroBubbleCosts unit_costs(ScheduleKind kind, int p, int) {
  const int chunks = places_chunks_in_v(kind) ? 2 : 1, V = p * chunks;
  ZeroBubbleCosts c;
  c.send_bytes = kUnitSendBuffer;
  c.f.assign(V, 1.0), c.b.assign(V, 1.0), c.w.assign(V, 1.0);
  c.slot_bytes.assign(V, 1.0 / chunks), c.w_bytes.assign(V, kUnitWeightBuffer / chunks);
  const std::vector<double> one_f_one_b(p, 1.0);
  for (int s = 0; s < p; ++s) c.budget.push_back(zero_bubble_budget(kind, s, one_f_one_b));
  return c;
}

double zero_bubble_budget(ScheduleKind kind, int s, const std::vector<double>& slot) {
  const int p = int(slot.size());
  if (kind != ScheduleKind::zb_h1 && kind != ScheduleKind::zb_v) return 0;
  double peak = 0;
  for (int r = 0; r < p; ++r) peak = std::max(peak, (p - r) * slot[r]);
  return kZeroBubbleSlack * peak;
}

std::vector<std::vector<PipelineAction>> zero_bubble_schedule(ScheduleKind kind, int p, int m,
                                                              const ZeroBubbleCosts& c) {
  double w_max = 0;
  for (double w : c.w_bytes) w_max = std::max(w_max, w);
  // The greedy choices also under equal durations (the paper's T_F = T_B =
  // T_W), whose lists can beat the ones built on the FLOPs' small differences
  // when run with them: every candidate is timed with `c`.
  ZeroBubbleCosts equal = c;
  for (auto* d : {&equal.f, &equal.b, &equal.w}) d->assign(d->size(), 1.0);
  const bool v_shape = places_chunks_in_v(kind);
  const bool same = equal.f == c.f && equal.b == c.b && equal.w == c.w;
  const ZeroBubbleCosts* timings[] = {&c, &equal};
  Outcome best;
  for (const ZeroBubbleCosts* timing : timings)
    for (int extra = 0; extra <= p && !(timing == &equal && same); ++extra)
      for (int reserve = 0; reserve <= 3; ++reserve)
        for (bool alternate : {false, true})
          for (bool per_slot : {false, true}) {
            if (per_slot && c.send_bytes == 0) continue;  // no waits for buffers either way
            Outcome o = simulate(kind, p, m, *timing, extra, reserve * w_max, alternate, per_slot);
            if (o.ranks.empty()) continue;
            o.makespan = replay_schedule(o.ranks, v_shape ? 2 : 1, v_shape, &c).time;
            if (o.makespan < best.makespan * (1 - 1e-9)) best = std::move(o);
          }
  if (best.ranks.empty()) throw std::logic_error("zero-bubble schedule: no candidate fits its budget");
  return best.ranks;
}

}  // namespace trident
