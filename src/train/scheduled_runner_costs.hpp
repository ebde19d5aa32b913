// What the passes of a scheduled step really cost, and the bubble the plan's
// lists cannot go below at those costs: every rank's lists replayed with each
// virtual stage's measured mean F, B and W (schedule_sim's replay: receives
// wait, messages take no time). A run prints it beside the bubble it measured,
// so the gap between them is what the messages and the machine add.
#pragma once
#include <vector>

#include "comm/communicator.hpp"
#include "parallel/pipeline/schedule_sim.hpp"
#include "parallel/pipeline/stage_plan.hpp"

namespace trident {

// One chunk's pass durations (seconds), summed.
struct PassClock {
  double f = 0, b = 0, w = 0, both = 0;  // forward; input gradient; weights; the two fused
  int nf = 0, nb = 0, nw = 0, nboth = 0;
  void add(const PipelineAction& a, double seconds);
};

// How measured_floor replays the lists: one step, or steps back to back
// (steady_bubble), each rank's step ending with its step tail (this rank's
// mean seconds from its last pass to its step's end: reductions,
// optimizer), with the synchronous step's barrier or (post-validation)
// without it.
struct FloorOptions {
  bool across_steps = false;
  bool barrier = true;
  double step_tail = 0;
  TiedJoin tied = TiedJoin::none;  // where the tied embedding's ends join (StepJoins)
};

// The idle share of every rank's lists (plan.all_actions) under the mean
// durations `clocks` measured on this rank's chunks, averaged per virtual
// stage over the ranks of `world` that run it (collective over `world`).
// A chunk that never split its backward replays its fused passes as B.
// -1 where some virtual stage measured nothing. Across steps: the steady
// per-step idle share of steps_replayed_across (schedule_sim), each rank's
// tail averaged over the ranks at its pipeline position.
double measured_floor(Communicator& world, const StagePlan& plan,
                      const std::vector<PassClock>& clocks, const FloorOptions& options = {});

}  // namespace trident
