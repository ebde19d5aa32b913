// Every synchronous schedule (naive, gpipe, 1f1b, interleaved, zb-h1, zb-h2,
// zb-v): the step's list of forward and backward passes over this rank's
// chunks (receiving inputs and gradients from the neighbouring virtual stages,
// sending its own; zero bubble: backwards split into B, which sends, and W),
// then the gradients reduced and the parameters updated once every W has run.
// With parallel.post_validation the step ends without waiting for the other
// stages: the update is taken ahead and the global checks settle it inside
// the next step (scheduled_runner_settle.cpp).
#pragma once
#include <array>
#include <memory>
#include <vector>

#include "engine/grad_engine.hpp"
#include "optim/clip.hpp"

#include "parallel/pipeline/schedule.hpp"
#include "train/scheduled_runner_costs.hpp"
#include "train/step_runner.hpp"

namespace trident {

class ScheduledRunner final : public StepRunner {
 public:
  // actions: this rank's list; send_pool: its input-gradient send buffers.
  ScheduledRunner(StepContext ctx, const std::vector<PipelineAction>& actions,
                  const SendBufferPool& send_pool, bool in_v, MemoryLedger& ledger);
  // A step still pending: its reductions, which every rank posted, complete
  // before their buffers go (its stats are dropped).
  ~ScheduledRunner() override;
  void step(StepStats& s) override;
  PostValidationCounts post_validation() const override { return counts_; }
  bool defers_stats() const override { return ctx_.deck.parallel.post_validation; }
  void settle() override;
  std::vector<StepStats> take_settled() override;
  double measured_floor(Communicator& world, const StagePlan& plan, bool steady) const override {
    return trident::measured_floor(world, plan, clocks_, floor_options(steady));
  }
  StepWall step_wall() const override { return wall_; }

 private:
  // This rank's share of the gradient norm, and whether any gradient it
  // holds is inf or NaN.
  struct LocalGrads {
    double sum_squares = 0;
    bool nonfinite = false;
  };
  // Post-validation: a step taken (or held), its global checks in flight.
  struct PendingStep {
    bool active = false;
    StepStats stats;  // step and lr: the learning rate the step was taken with
    bool ahead = false;
    double loss_sum = 0;               // summed over the pipeline in flight
    // Summed over the world in flight: the norm's two terms, and ranks held.
    std::array<double, 3> checks{};
    Request loss, norm;
  };
  // A forward of the first virtual stage computed before the settle, with
  // weights the settle may change: run again if it does (nothing was sent).
  struct Speculative {
    int chunk, micro_batch, slot;
  };
  double run_schedule(int step);  // returns this rank's loss sum
  void forward_pass(int step, const PipelineAction& a, double& loss_sum,
                    std::vector<Speculative>& speculative);
  void backward_pass(const PipelineAction& a);
  float loss_weight() const;  // dloss: 1/(batch * seq_len), times the loss scale
  void sum_tied_embedding();
  void finish_gradients();  // gradients reduced, the tied ends summed
  LocalGrads local_grads(int step);
  void begin_step();
  void step_synchronous(StepStats& s);
  void step_deferred(StepStats& s);
  // Post-validation: the step taken now, before the global checks, unless
  // this rank's gradients already show it would be clipped or skipped.
  bool step_ahead(float lr, const LocalGrads& g);
  // The step the global checks call for; true when it is the one taken ahead
  // (no step is undone, held or skipped anywhere).
  bool update(float lr, const GradNorm& norm, bool ahead, StepStats& s);
  void post_checks(const StepStats& s, const LocalGrads& g, double loss_sum, bool ahead);
  bool settle_pending();  // true when the weights are not those taken ahead
  void settle_in_schedule(int step, std::vector<Speculative>& speculative);
  void redo_forwards(int step, const std::vector<Speculative>& speculative);
  FloorOptions floor_options(bool steady) const;
  // Post-validation's undo copy, a piece at a time, taken while a receive
  // waits once the state it copies is final (no step pending): the copy
  // step_ahead() would otherwise make on the step's critical path. Returns
  // whether any is left.
  bool save_while_idle();
  std::size_t saved_chunks_ = 0;

  StepContext ctx_;
  const std::vector<PipelineAction>& actions_;
  const SendBufferPool& send_pool_;
  bool in_v_;                       // zb-v: both ends of the model on rank 0
  // The tied embedding summed by messages (tied_table_grads_in_b): on the
  // last stage its share leaves after the action at tied_post_at_, its last B.
  std::unique_ptr<TiedGradExchange> tied_exchange_;
  std::size_t tied_post_at_ = std::size_t(-1);
  std::vector<Request> input_grad_sends_;  // per send buffer: the send still reading it
  PostValidationCounts counts_;
  PendingStep pending_;
  std::vector<StepStats> settled_;
  StepWall wall_;  // from the first step's end on
  double step_tail_ = 0;  // this rank's own work after the schedules, summed (steps after the first)
  int tail_steps_ = 0;
  // Adds the time since `since` to wall_.own_work, and where it is at the
  // step's end (not a settle) to step_tail_.
  void own_work(double since, bool step_end = true);
  // Per chunk: its passes' durations over the steps after the first (the
  // first's one-time costs, first touch and kernel set-up, differ by rank).
  std::vector<PassClock> clocks_;
  bool clocking_ = false;
  void clock(const PipelineAction& a, double since);
};

}  // namespace trident
