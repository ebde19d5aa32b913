// Every synchronous schedule (naive, gpipe, 1f1b, interleaved, zb-h1, zb-h2,
// zb-v): the step's list of forward and backward passes over this rank's
// chunks (receiving inputs and gradients from the neighbouring virtual stages,
// sending its own; zero bubble: backwards split into B, which sends, and W),
// then the gradients reduced and the parameters updated once every W has run.
#pragma once
#include <vector>

#include "parallel/pipeline/schedule.hpp"
#include "train/scheduled_runner_costs.hpp"
#include "train/step_runner.hpp"

namespace trident {

class ScheduledRunner final : public StepRunner {
 public:
  // actions: this rank's list; send_pool: its input-gradient send buffers.
  ScheduledRunner(StepContext ctx, const std::vector<PipelineAction>& actions,
                  const SendBufferPool& send_pool, bool in_v);
  void step(StepStats& s) override;
  PostValidationCounts post_validation() const override { return counts_; }
  double measured_floor(Communicator& world, const StagePlan& plan) const override {
    return trident::measured_floor(world, plan, clocks_);
  }

 private:
  // This rank's share of the gradient norm, and whether any gradient it
  // holds is inf or NaN.
  struct LocalGrads {
    double sum_squares = 0;
    bool nonfinite = false;
  };
  double run_schedule(int step, float dloss);  // returns this rank's loss sum
  void backward_pass(const PipelineAction& a);
  void sum_tied_embedding();
  LocalGrads local_grads(int step);
  // Post-validation: the step taken now, before the global checks, unless
  // this rank's gradients already show it would be clipped or skipped.
  bool step_ahead(float lr, const LocalGrads& g);
  void update(float lr, const LocalGrads& g, bool ahead, StepStats& s);

  StepContext ctx_;
  const std::vector<PipelineAction>& actions_;
  const SendBufferPool& send_pool_;
  bool in_v_;                       // zb-v: both ends of the model on rank 0
  std::vector<Request> input_grad_sends_;  // per send buffer: the send still reading it
  PostValidationCounts counts_;
  // Per chunk: its passes' durations over the steps after the first (the
  // first's one-time costs, first touch and kernel set-up, differ by rank).
  std::vector<PassClock> clocks_;
  bool clocking_ = false;
  void clock(const PipelineAction& a, double since);
};

}  // namespace trident
