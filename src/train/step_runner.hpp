// How a training step runs this rank's chunks: the scheduled runner (every
// synchronous schedule: the passes of the step's list, then one reduction and
// update) or the PipeDream runner (a continuous stream, an update after every
// backward). Trainer::step calls one; each reaches the trainer's state only
// through the StepContext it is built with.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "compute/backend.hpp"
#include "grid/grid.hpp"
#include "io/deck.hpp"
#include "optim/loss_scaler.hpp"
#include "parallel/pipeline/pipeline_comm.hpp"
#include "parallel/pipeline/stage_plan.hpp"
#include "train/trace.hpp"

namespace trident {

struct ModelChunk;

// Seconds spent per phase on this rank (cumulative).
struct PhaseTimes {  // backward: B and W, together or split
  double data = 0, forward = 0, backward = 0, comm = 0, optimizer = 0, eval = 0;
  double pipeline = 0;  // wall time of the schedules (compute + waiting)
  // Context parallelism: ring attention's blocks, and its waits for
  // transfers that attention did not hide (parallel/context, RingTimes).
  double ring_compute = 0, ring_exposed = 0;
};

struct StepStats {
  int step = 0;
  double loss = 0;       // mean over the global batch
  double lr = 0;
  double grad_norm = 0;  // before clipping
  double seconds = 0;
  double loss_scale = 1;  // fp16: the scale this step's loss was multiplied by
  bool skipped = false;   // fp16: the gradients overflowed; nothing was updated
  bool rolled_back = false;  // post-validation: the step taken ahead was undone and redone
};

// Post-validation over a run: steps taken ahead of the global checks, and of
// those undone because the global norm clipped or the overflow check skipped.
// `held`: steps not taken ahead because the rank's own gradients already
// showed the step would be clipped or skipped.
struct PostValidationCounts {
  int ahead = 0, clipped = 0, skipped = 0, held = 0;
  int rolled_back() const { return clipped + skipped; }
};

// One rank's time in the steps after the run's first (the runner's step()
// and settle() calls, so not the loop's logging between them), and its own
// work outside the passes in it (gradient reductions, the optimizer): the
// rest is passes or waiting.
struct StepWall {
  double seconds = 0, own_work = 0;
};

// What a runner reaches of the trainer.
struct StepContext {
  const Deck& deck;
  Grid& grid;
  ComputeBackend& backend;
  PipelineComm& pcomm;
  std::vector<ModelChunk>& chunks;
  int micro_batches;  // per rank per step
  // Reads micro-batch i of global batch `batch` into tokens and targets.
  std::function<void(std::uint64_t batch, int i)> load_micro_batch;
  const std::vector<std::int32_t>& tokens;
  const std::vector<std::int32_t>& targets;
  // Input-gradient send buffer k of the rank's pool (boundary_elements() floats).
  std::function<float*(int k)> input_grad_buffer;
  PhaseTimes& times;
  TraceRecorder* trace;
  LossScaler* scaler;                           // fp16 only
  const std::function<void()>& before_update;  // see Trainer::set_before_update
};

class StepRunner {
 public:
  virtual ~StepRunner() = default;
  // One step: s.step and s.lr are set; the runner fills in the rest but seconds.
  virtual void step(StepStats& s) = 0;
  // A run stopping before train.steps (a signal), after `done` steps.
  virtual void stop_stream(int done) { (void)done; }
  // The activation slot evaluation may use between steps.
  virtual int eval_slot() const { return 0; }
  virtual PostValidationCounts post_validation() const { return {}; }
  // Post-validation: step() returns with the step's global checks still in
  // flight; the next step settles it (or settle(), which blocks), and its
  // stats come from take_settled(), in step order (`seconds`: the runner's
  // own step()).
  virtual bool defers_stats() const { return false; }
  virtual StepWall step_wall() const { return {}; }
  virtual void settle() {}
  virtual std::vector<StepStats> take_settled() { return {}; }
  // The bubble `plan`'s lists leave under the passes' measured costs
  // (collective over `world`); -1 where the runner does not measure them.
  // steady: steps back to back with each rank's measured step tail, as the
  // run takes them (StepJoins); else one step's lists.
  virtual double measured_floor(Communicator& world, const StagePlan& plan, bool steady) const {
    (void)world, (void)plan, (void)steady;
    return -1;
  }
};

}  // namespace trident
