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
struct Candidate {
  int cap_extra = 0;
  double reserve_w = 0;
  bool alternate = false;
  bool send_buffer_per_slot = false;
};

// Every rank list-scheduled at once: at each time some rank is free, it runs
// a B, an F or a pending W (see the top of the file).
class Simulation {
 public:
  Simulation(ScheduleKind kind, int p, int m, const ZeroBubbleCosts& c, const Candidate& how)
      : p_(p), m_(m), c_(c), how_(how), v_shape_(places_chunks_in_v(kind)),
        chunks_(v_shape_ ? 2 : 1), V_(p * chunks_),
        f_done_(V_, std::vector<double>(m, kNever)), b_done_(f_done_), b_start_(f_done_),
        w_done_(f_done_), ranks_(p) {
    for (int s = 0; s < p; ++s) {
      Rank& r = ranks_[s];
      r.budget = c.budget.empty() || c.budget[s] <= 0 ? kNever : c.budget[s];
      r.reserve = how.reserve_w;
      for (int ch = 0; ch < chunks_; ++ch) {
        Chunk k;
        k.vs = virtual_stage_of(v_shape_, p, s, ch);
        const int bound = in_flight_bound(kind, p, s, m);
        k.cap = std::min(bound > 0 ? bound : m, V_ - k.vs + how.cap_extra);
        if (k.vs > 0 && (r.sent.empty() || how.send_buffer_per_slot)) r.sent.push_back({-1, -1});
        r.chunks.push_back(k);
      }
    }
  }

  // The lists, or none where the candidate gets stuck (nobody can move).
  Outcome run() {
    std::size_t left = std::size_t(V_) * m_;  // slots still to free
    double t = 0;
    while (left > 0) {
      for (Rank& r : ranks_)
        if (r.free_at <= t) left -= run_next(r, t);
      double next = kNever;
      for (const Rank& r : ranks_)
        if (r.free_at > t) next = std::min(next, r.free_at);
      if (next == kNever) return {};  // nobody can move: this candidate is infeasible
      t = next;
    }
    Outcome o;
    o.makespan = 0;
    for (Rank& r : ranks_) {
      o.makespan = std::max(o.makespan, r.free_at);
      o.ranks.push_back(std::move(r.actions));
    }
    return o;
  }

 private:
  // The first slot of chunk k that is free at t (its W done), -1: none.
  int free_slot(const Chunk& k, double t) const {
    for (std::size_t i = 0; i < k.occupant.size(); ++i) {
      const int mb = k.occupant[i];
      if (mb < 0 || w_done_[k.vs][mb] <= t) return int(i);
    }
    return -1;
  }
  // The first send buffer of rank r free at t for chunk k's next B (its
  // gradient's receiving B started, or that B is this one: a B receives
  // before it waits for its send buffer), -1: none.
  int free_send_buffer(const Rank& r, const Chunk& k, double t) const {
    for (std::size_t i = 0; i < r.sent.size(); ++i) {
      const auto [vs, mb] = r.sent[i];
      if (vs < 0 || b_start_[vs - 1][mb] <= t || (vs - 1 == k.vs && mb == k.nb)) return int(i);
    }
    return -1;
  }
  bool fits(const Rank& r, double more, double room) const {
    return pool_bytes(r, c_) + more <= room * (1 + 1e-12);
  }

  // B: the lowest micro-batch whose gradient is here, the later virtual stage first.
  Chunk* next_backward(Rank& r, double t) {
    Chunk* b = nullptr;
    const bool send_buffer_room = fits(r, c_.send_bytes, r.budget);
    for (Chunk& k : r.chunks) {
      if (k.nb >= k.nf || (k.vs < V_ - 1 && b_done_[k.vs + 1][k.nb] > t)) continue;
      if (k.vs > 0 && free_send_buffer(r, k, t) < 0 && !send_buffer_room) continue;
      if (!b || k.nb < b->nb || (k.nb == b->nb && k.vs > b->vs)) b = &k;
    }
    return b;
  }
  // F: the lowest micro-batch whose input is here and whose slot fits.
  Chunk* next_forward(Rank& r, double t) {
    Chunk* f = nullptr;
    for (Chunk& k : r.chunks) {
      if (k.nf >= m_ || k.live >= k.cap || (k.vs > 0 && f_done_[k.vs - 1][k.nf] > t)) continue;
      const double more =
          c_.slot_bytes[k.vs] + (how_.send_buffer_per_slot && k.vs > 0 ? c_.send_bytes : 0);
      if (free_slot(k, t) < 0 && !fits(r, more, r.budget - r.reserve)) continue;
      if (!f || k.nf < f->nf || (k.nf == f->nf && k.vs > f->vs)) f = &k;
    }
    return f;
  }

  // Runs r's next pass at t, if any; returns the slots it freed (0 or 1).
  int run_next(Rank& r, double t) {
    Chunk* b = next_backward(r, t);
    Chunk* f = next_forward(r, t);
    if (b && f && how_.alternate && r.after_b) b = nullptr;
    PipelineAction a;
    double dur = 0;
    int freed = 0;
    if (b) {
      freed = run_backward(r, *b, t, a, dur);
    } else if (f) {
      run_forward(r, *f, t, a, dur);
    } else if (!r.waiting_w.empty()) {
      run_weights(r, t, a, dur);
      freed = 1;
    } else {
      return 0;
    }
    if (!a.forward || a.part != BackwardPart::weights) r.after_b = !a.forward;
    r.actions.push_back(a);
    r.free_at = t + dur;
    return freed;
  }

  // B into a free send buffer (or a new one), split from its W where a W
  // buffer is free or fits, else fused with it.
  int run_backward(Rank& r, Chunk& k, double t, PipelineAction& a, double& dur) {
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
    const bool split = k.pending < k.buffers || fits(r, c_.w_bytes[k.vs], r.budget);
    a = {false, k.nb, ch, split ? BackwardPart::input : BackwardPart::both, -1, buffer};
    dur = c_.b[k.vs] + (split ? 0 : c_.w[k.vs]);
    b_start_[k.vs][k.nb] = t;
    b_done_[k.vs][k.nb] = t + dur;
    int freed = 0;
    if (split) {
      k.buffers = std::max(k.buffers, ++k.pending);
      r.waiting_w.push_back({ch, k.nb});
    } else {
      w_done_[k.vs][k.nb] = t + dur;
      --k.live, freed = 1;
    }
    ++k.nb;
    return freed;
  }

  // F into a free slot (or a new one, with its send buffer where they pair).
  void run_forward(Rank& r, Chunk& k, double t, PipelineAction& a, double& dur) {
    int slot = free_slot(k, t);
    if (slot < 0) {
      slot = int(k.occupant.size());
      k.occupant.push_back(-1);
      if (how_.send_buffer_per_slot && k.vs > 0) r.sent.push_back({-1, -1});
    }
    k.occupant[std::size_t(slot)] = k.nf;
    a = {true, k.nf, int(&k - r.chunks.data()), BackwardPart::both, slot};
    dur = c_.f[k.vs];
    f_done_[k.vs][k.nf] = t + dur;
    ++k.live;
    ++k.nf;
  }

  // The oldest pending W: its buffer and its slot free again.
  void run_weights(Rank& r, double t, PipelineAction& a, double& dur) {
    auto [ch, mb] = r.waiting_w.front();
    r.waiting_w.pop_front();
    Chunk& k = r.chunks[ch];
    a = {false, mb, ch, BackwardPart::weights};
    dur = c_.w[k.vs];
    w_done_[k.vs][mb] = t + dur;
    --k.pending, --k.live;
  }

  int p_, m_;
  const ZeroBubbleCosts& c_;
  Candidate how_;
  bool v_shape_;
  int chunks_, V_;
  // Per (virtual stage, micro-batch): when its F, B and W ended and its B started.
  std::vector<std::vector<double>> f_done_, b_done_, b_start_, w_done_;
  std::vector<Rank> ranks_;
};

}  // namespace

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
            Outcome o = Simulation(kind, p, m, *timing,
                                   Candidate{extra, reserve * w_max, alternate, per_slot})
                            .run();
            if (o.ranks.empty()) continue;
            // Timed with `c`, a list built under equal durations may reach a
            // send buffer before its last gradient is received: dropped.
            const ScheduleReplay timed = replay_schedule(o.ranks, v_shape ? 2 : 1, v_shape, &c);
            if (!timed.early_reuse.empty()) continue;
            o.makespan = timed.time;
            if (o.makespan < best.makespan * (1 - 1e-9)) best = std::move(o);
          }
  if (best.ranks.empty()) throw std::logic_error("zero-bubble schedule: no candidate fits its budget");
  return best.ranks;
}

}  // namespace trident
