#include "train/scheduled_runner.hpp"

#include <fmt/format.h>

#include <cmath>

#include "core/fault_inject.hpp"
#include "core/timer.hpp"
#include "optim/clip.hpp"
#include "parallel/pipeline/schedule_costs.hpp"
#include "train/trainer.hpp"

namespace trident {

ScheduledRunner::ScheduledRunner(StepContext ctx, const std::vector<PipelineAction>& actions,
                                 const SendBufferPool& send_pool, bool in_v,
                                 MemoryLedger& ledger)
    : ctx_(std::move(ctx)),
      actions_(actions),
      send_pool_(send_pool),
      in_v_(in_v),
      input_grad_sends_(std::size_t(send_pool.size)),
      clocks_(ctx_.chunks.size()) {
  if (ctx_.deck.parallel.post_validation) ctx_.pcomm.set_idle_work([this] { return save_while_idle(); });
  Communicator* ends = ctx_.grid.embedding();
  if (!ends || !tied_table_grads_in_b(schedule_cost_deck(ctx_.deck), ctx_.grid.shape())) return;
  const bool first = ctx_.grid.coord().pp == 0;
  GradEngine& end = *(first ? ctx_.chunks.front() : ctx_.chunks.back()).engine;
  tied_exchange_ =
      std::make_unique<TiedGradExchange>(*ends, ctx_.backend, ledger, end.tied_grads().count);
  if (first) return;
  for (std::size_t i = 0; i < actions_.size(); ++i)
    if (!actions_[i].forward && actions_[i].part != BackwardPart::weights) tied_post_at_ = i;
}

void ScheduledRunner::clock(const PipelineAction& a, double since) {
  if (clocking_) clocks_[std::size_t(a.chunk)].add(a, now_seconds() - since);
}

double ScheduledRunner::run_schedule(int step) {
  const double t0 = now_seconds();
  PipelineComm& pcomm = ctx_.pcomm;
  for (std::size_t k = 0; k < ctx_.chunks.size(); ++k) {
    ctx_.chunks[k].weight_passes_left = 0;
    for (const auto& a : actions_)
      ctx_.chunks[k].weight_passes_left += a.frees_slot() && a.chunk == int(k);
  }
  double loss_sum = 0;
  std::vector<Speculative> speculative;
  for (std::size_t i = 0; i < actions_.size(); ++i) {
    const PipelineAction& a = actions_[i];
    if (a.forward) {
      forward_pass(step, a, loss_sum, speculative);
      continue;
    }
    settle_in_schedule(step, speculative);  // gradients are summed into from here on
    backward_pass(a);
    if (i == tied_post_at_) tied_exchange_->post(*ctx_.chunks.back().engine);
  }
  for (ModelChunk& c : ctx_.chunks) c.slots.wait_all_sends(pcomm);
  for (Request& r : input_grad_sends_) pcomm.wait(r);
  ctx_.times.pipeline += now_seconds() - t0;
  return loss_sum;
}

// Post-validation (a step pending): the first virtual stage computes its
// forward ahead of the settle and settles before sending it; any other
// settles once its input is here (sent by a settled stage) and before
// computing (the head needs the settled loss scale).
void ScheduledRunner::forward_pass(int step, const PipelineAction& a, double& loss_sum,
                                   std::vector<Speculative>& speculative) {
  PipelineComm& pcomm = ctx_.pcomm;
  ModelChunk& c = ctx_.chunks[a.chunk];
  GptModel& m = *c.model;
  const std::size_t n = m.boundary_elements();
  const int mb = a.micro_batch;
  const int slot = c.slots.acquire(mb, a.slot, pcomm);
  const MicroBatchActs acts = c.slots.acts(slot);
  if (!pcomm.first_virtual(a.chunk)) {
    ScopedTimer timer(ctx_.times.comm);
    TraceScope ts(ctx_.trace, fmt::format("recv F{}", mb), "recv");
    pcomm.recv_forward(m.input_buffer(acts), n, mb, a.chunk);
  }
  const bool ahead_of_settle = pcomm.first_virtual(a.chunk) && !pcomm.last_virtual(a.chunk);
  if (!ahead_of_settle) settle_in_schedule(step, speculative);
  ctx_.load_micro_batch(std::uint64_t(step), mb);
  {
    ScopedTimer timer(ctx_.times.forward);
    TraceScope ts(ctx_.trace, fmt::format("F{}", mb), "forward");
    const double t_pass = now_seconds();
    loss_sum += m.forward(acts, ctx_.tokens.data(), ctx_.targets.data(), loss_weight());
    clock(a, t_pass);
  }
  if (pending_.active) speculative.push_back({a.chunk, mb, slot});
  if (pcomm.last_virtual(a.chunk)) return;
  settle_in_schedule(step, speculative);
  c.slots.add_send(slot, pcomm.send_forward(m.output(acts), n, mb, a.chunk));
}

float ScheduledRunner::loss_weight() const {
  // Each token's loss enters the global mean with weight 1/(batch * seq_len);
  // summing over the data group then gives the mean over the global batch.
  // fp16 multiplies it by the loss scale (gradients are unscaled in update()).
  const auto& t = ctx_.deck.train;
  return float(ctx_.scaler ? ctx_.scaler->scale() : 1.0) /
         float(std::int64_t(t.batch) * ctx_.deck.model.seq_len);
}

void ScheduledRunner::backward_pass(const PipelineAction& a) {
  PipelineComm& pcomm = ctx_.pcomm;
  ModelChunk& c = ctx_.chunks[a.chunk];
  GptModel& m = *c.model;
  const std::size_t n = m.boundary_elements();
  const int mb = a.micro_batch;
  const int slot = c.slots.slot_of(mb);
  // The chunk's last weight pass of the step lets the engine reduce
  // gradients as they become final.
  const bool last = a.frees_slot() && --c.weight_passes_left == 0;
  const GradsReadyFn ready = last ? c.engine->grads_ready_hook() : nullptr;
  if (a.part == BackwardPart::weights) {  // W: nobody waits for it
    ScopedTimer timer(ctx_.times.backward);
    TraceScope ts(ctx_.trace, fmt::format("W{}", mb), "weights");
    const double t_pass = now_seconds();
    m.backward_weights(c.slots.acts_of(mb), ready, last);
    clock(a, t_pass);
    c.slots.release(mb);
    return;
  }
  if (!pcomm.last_virtual(a.chunk)) {
    ScopedTimer timer(ctx_.times.comm);
    TraceScope ts(ctx_.trace, fmt::format("recv B{}", mb), "recv");
    pcomm.recv_backward(m.output_grad_buffer(), n, mb, a.chunk);
  }
  // The send buffer B writes its input gradient to, waited for after the
  // receive above: free once the previous virtual stage has posted the
  // receive of what was last sent from it (the lists name the buffer so
  // that this wait is the one they were replayed with).
  const int send_buffer = pcomm.first_virtual(a.chunk) ? -1 : send_pool_.of(a, slot);
  float* input_grad = send_buffer >= 0 ? ctx_.input_grad_buffer(send_buffer) : nullptr;
  if (send_buffer >= 0) {
    ScopedTimer timer(ctx_.times.comm);
    pcomm.wait(input_grad_sends_[std::size_t(send_buffer)]);
  }
  {
    ScopedTimer timer(ctx_.times.backward);
    TraceScope ts(ctx_.trace, fmt::format("B{}", mb), "backward");
    if (a.part == BackwardPart::input) {
      // B keeps W's inputs over the slot's dead activations, the stage's
      // output among them: its send must be done.
      c.slots.wait_sends(slot, pcomm);
      c.slots.acquire_weight_buffer(mb);
      const double t_pass = now_seconds();
      m.backward_input(c.slots.acts_of(mb), input_grad);
      clock(a, t_pass);
    } else {
      const double t_pass = now_seconds();
      m.backward(c.slots.acts_of(mb), ready, last, input_grad);
      clock(a, t_pass);
    }
  }
  if (send_buffer >= 0)
    input_grad_sends_[std::size_t(send_buffer)] = pcomm.send_backward(input_grad, n, mb, a.chunk);
  if (a.frees_slot()) c.slots.release(mb);
}

void ScheduledRunner::begin_step() {
  for (ModelChunk& c : ctx_.chunks) c.engine->begin_step();
}

void ScheduledRunner::step(StepStats& s) {
  const double t0 = now_seconds();
  if (ctx_.deck.parallel.post_validation) step_deferred(s);
  else step_synchronous(s);
  const double seconds = now_seconds() - t0;
  if (pending_.active) pending_.stats.seconds = seconds;  // its stats leave at the settle
  if (clocking_) wall_.seconds += seconds;
  clocking_ = true;  // from the second step of the run on
}

void ScheduledRunner::step_synchronous(StepStats& s) {
  const auto& t = ctx_.deck.train;
  begin_step();
  double loss_sum = run_schedule(s.step);
  finish_gradients();
  const double t_grads = now_seconds();
  const LocalGrads grads = local_grads(s.step);
  own_work(t_grads);
  {
    ScopedTimer timer(ctx_.times.comm);
    TraceScope ts(ctx_.trace, "all-reduce", "allreduce");
    // Only the last stage computed the loss: sum over the pipeline, then data
    // x context (each context rank's tokens counted once).
    if (ctx_.grid.pipeline().size() > 1)
      ctx_.grid.pipeline().all_reduce(&loss_sum, 1, DType::f64, ReduceOp::sum);
    ctx_.grid.data_context().all_reduce(&loss_sum, 1, DType::f64, ReduceOp::sum);
  }
  s.loss = loss_sum / (double(t.batch) * ctx_.deck.model.seq_len);
  GradNorm norm;
  {
    // Each element is counted on one rank of the job: one sum over the world.
    ScopedTimer timer(ctx_.times.optimizer);
    norm = reduce_grad_norm(grads.sum_squares, grads.nonfinite, {&ctx_.grid.world()},
                            ctx_.scaler ? ctx_.scaler->scale() : 1.0);
  }
  const double t_update = now_seconds();
  update(float(s.lr), norm, false, s);
  {
    ScopedTimer timer(ctx_.times.optimizer);
    // The step ends when an asynchronous device has finished it. (Backward is
    // not synchronised: the host must stay free to drive bucket reductions.)
    ctx_.backend.synchronize();
  }
  own_work(t_update);
  tail_steps_ += clocking_;
}

// The step's gradients reduced (this rank's own work) and the tied
// embedding's two ends summed (a wait for the other end: not counted).
void ScheduledRunner::finish_gradients() {
  const double t_tail = now_seconds();
  ScopedTimer timer(ctx_.times.comm);
  TraceScope ts(ctx_.trace, "all-reduce", "allreduce");
  for (ModelChunk& c : ctx_.chunks) c.engine->finish_backward();
  own_work(t_tail);
  sum_tied_embedding();
}

void ScheduledRunner::own_work(double since, bool step_end) {
  if (!clocking_) return;
  const double dt = now_seconds() - since;
  wall_.own_work += dt;
  if (step_end) step_tail_ += dt;
}

void ScheduledRunner::sum_tied_embedding() {
  // The first and last stages hold copies of the token embedding: their
  // gradients (each stage's own contribution) are summed so both stay equal.
  // In a V both are chunks of rank 0: summed there, no message.
  if (!ctx_.deck.model.tied_embeddings) return;  // the untied head's table is its own
  if (in_v_) {
    if (ctx_.grid.coord().pp == 0)
      sum_tied_grads_locally(*ctx_.chunks.front().engine, *ctx_.chunks.back().engine,
                             ctx_.backend);
    return;
  }
  // The last stage's share may be on its way already (tied_exchange_).
  GradEngine& end = *(ctx_.grid.coord().pp == 0 ? ctx_.chunks.front() : ctx_.chunks.back()).engine;
  if (tied_exchange_) return tied_exchange_->sum(end);
  if (Communicator* ends = ctx_.grid.embedding()) end.sum_tied_grads(*ends);
}

ScheduledRunner::LocalGrads ScheduledRunner::local_grads(int step) {
  ScopedTimer timer(ctx_.times.optimizer);
  // TRIDENT_FAULT_INJECT=grad:inf@STEP on a rank: one of its gradients becomes inf.
  if (fault_armed("grad", "inf", step)) ctx_.chunks.front().engine->poison_gradient();
  LocalGrads g;
  for (ModelChunk& ch : ctx_.chunks) {
    g.sum_squares += ch.engine->grad_sum_squares();
    g.nonfinite = g.nonfinite || (ctx_.scaler && ch.engine->grads_nonfinite());
  }
  return g;
}

}  // namespace trident
