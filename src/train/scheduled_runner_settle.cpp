// Optimizer post-validation (Qi et al., ICLR 2024, section 4), exact: each
// rank takes its step as soon as its own gradients are final and posts the
// step's global reductions (the loss, the gradient norm and overflow check)
// without waiting; the next step's schedule settles them (forward_pass says
// where), undoing and redoing a step the checks say should have been
// clipped or skipped. Results equal the synchronous step bit for bit: the
// same sums in the same order, the same coefficient, the step taken with the
// learning rate it was taken with.
#include <fmt/format.h>

#include <cmath>
#include <utility>

#include "core/timer.hpp"
#include "train/scheduled_runner.hpp"
#include "train/trainer.hpp"

namespace trident {

void ScheduledRunner::step_deferred(StepStats& s) {
  // With a step pending, the settle inside the schedule zeroes the gradients
  // (its redo still needs them).
  if (!pending_.active) begin_step();
  const double loss_sum = run_schedule(s.step);
  finish_gradients();
  const double t_grads = now_seconds();
  const LocalGrads grads = local_grads(s.step);
  const bool ahead = step_ahead(float(s.lr), grads);
  post_checks(s, grads, loss_sum, ahead);
  {
    ScopedTimer timer(ctx_.times.optimizer);
    ctx_.backend.synchronize();
  }
  own_work(t_grads);
  tail_steps_ += clocking_;
}

void ScheduledRunner::post_checks(const StepStats& s, const LocalGrads& g, double loss_sum,
                                  bool ahead) {
  ScopedTimer timer(ctx_.times.comm);
  PendingStep& p = pending_;
  p.active = true;
  p.stats = s;
  p.ahead = ahead;
  // Only the last stage computed the loss: summed over the pipeline now, over
  // data x context at the settle (the synchronous step's order).
  p.loss_sum = loss_sum;
  if (ctx_.grid.pipeline().size() > 1)
    p.loss = ctx_.grid.pipeline().iall_reduce(&p.loss_sum, 1, DType::f64, ReduceOp::sum);
  // The held flag rides beside the norm's terms: summed element by element,
  // it leaves their sums as they were.
  const std::array<double, 2> terms = grad_norm_terms(g.sum_squares, g.nonfinite);
  p.checks = {terms[0], terms[1], ahead ? 0.0 : 1.0};
  if (ctx_.grid.world().size() > 1)
    p.norm = ctx_.grid.world().iall_reduce(p.checks.data(), 3, DType::f64, ReduceOp::sum);
}

bool ScheduledRunner::settle_pending() {
  PendingStep& p = pending_;
  StepStats s = p.stats;
  {
    ScopedTimer timer(ctx_.times.comm);
    TraceScope ts(ctx_.trace, "settle", "allreduce");
    ctx_.grid.pipeline().wait(p.loss);
    ctx_.grid.world().wait(p.norm);
    // Same-stage ranks only, at the same place in identical lists.
    ctx_.grid.data_context().all_reduce(&p.loss_sum, 1, DType::f64, ReduceOp::sum);
  }
  const double t0 = now_seconds();
  s.loss = p.loss_sum / (double(ctx_.deck.train.batch) * ctx_.deck.model.seq_len);
  const double loss_scale = ctx_.scaler ? ctx_.scaler->scale() : 1.0;
  const GradNorm norm = grad_norm_of({p.checks[0], p.checks[1]}, loss_scale);
  const bool clean = update(float(s.lr), norm, p.ahead, s);
  {
    ScopedTimer timer(ctx_.times.optimizer);
    ctx_.backend.synchronize();
  }
  own_work(t0, false);
  settled_.push_back(s);
  p.active = false;
  // Every rank's weights are the ones taken ahead only when no step anywhere
  // was undone, skipped or held (a global answer: tensor peers redo together).
  return !clean || p.checks[2] > 0;
}

void ScheduledRunner::settle_in_schedule(int step, std::vector<Speculative>& speculative) {
  if (!pending_.active) return;
  const bool redo = settle_pending();
  begin_step();
  if (redo) redo_forwards(step, speculative);
  speculative.clear();
}

void ScheduledRunner::redo_forwards(int step, const std::vector<Speculative>& speculative) {
  for (const Speculative& x : speculative) {
    ModelChunk& c = ctx_.chunks[std::size_t(x.chunk)];
    ctx_.load_micro_batch(std::uint64_t(step), x.micro_batch);
    ScopedTimer timer(ctx_.times.forward);
    TraceScope ts(ctx_.trace, fmt::format("F{} again", x.micro_batch), "forward");
    c.model->forward(c.slots.acts(x.slot), ctx_.tokens.data(), ctx_.targets.data(), loss_weight());
  }
}

ScheduledRunner::~ScheduledRunner() {
  if (ctx_.deck.parallel.post_validation) ctx_.pcomm.set_idle_work(nullptr);
  if (!pending_.active) return;
  ctx_.grid.pipeline().wait(pending_.loss);
  ctx_.grid.world().wait(pending_.norm);
}

void ScheduledRunner::settle() {
  if (!pending_.active) return;
  const double t0 = now_seconds();
  settle_pending();
  if (clocking_) wall_.seconds += now_seconds() - t0;
}

std::vector<StepStats> ScheduledRunner::take_settled() {
  std::vector<StepStats> out;
  out.swap(settled_);
  return out;
}

// The step the synchronous path takes when the global norm does not clip:
// the gradients times 1/loss_scale. A norm is a sum of every rank's squares,
// so this rank's own share already shows a clip (or an overflow) that the
// global check would find; then the step waits for it. (Gather mode: the
// data ranks must agree, and only the root holds sums: always ahead.)
bool ScheduledRunner::step_ahead(float lr, const LocalGrads& g) {
  ScopedTimer timer(ctx_.times.optimizer);
  TraceScope ts(ctx_.trace, "optimizer ahead", "optimizer");
  const std::size_t saved = std::exchange(saved_chunks_, 0);  // copies taken while idle
  const double loss_scale = ctx_.scaler ? ctx_.scaler->scale() : 1.0;
  const float unclipped = clip_coefficient(0.0, 0.0, loss_scale);
  const bool gather = ctx_.deck.parallel.dp_mode == DpMode::gather;
  const double own_norm = std::sqrt(g.sum_squares) / loss_scale;
  if (!gather && (g.nonfinite || !std::isfinite(own_norm) ||
                  clip_coefficient(own_norm, ctx_.deck.train.grad_clip, loss_scale) != unclipped)) {
    ++counts_.held;
    if (saved < ctx_.chunks.size()) ctx_.chunks[saved].engine->drop_partial_save();
    return false;
  }
  if (ctx_.before_update) ctx_.before_update();
  for (std::size_t c = 0; c < ctx_.chunks.size(); ++c) {
    if (c >= saved) ctx_.chunks[c].engine->save_step();
    ctx_.chunks[c].engine->step(lr, unclipped);
  }
  ++counts_.ahead;
  return true;
}

bool ScheduledRunner::save_while_idle() {
  // A piece overruns a message that comes while it copies by at most its time.
  constexpr std::size_t kPieceBytes = std::size_t{4} << 20;
  if (pending_.active || saved_chunks_ >= ctx_.chunks.size()) return false;
  const double t0 = now_seconds();
  TraceScope ts(ctx_.trace, "undo copy", "optimizer");
  if (ctx_.chunks[saved_chunks_].engine->save_step_part(kPieceBytes)) ++saved_chunks_;
  own_work(t0, false);
  return saved_chunks_ < ctx_.chunks.size();
}

bool ScheduledRunner::update(float lr, const GradNorm& norm, bool ahead, StepStats& s) {
  ScopedTimer timer(ctx_.times.optimizer);
  TraceScope ts(ctx_.trace, "optimizer", "optimizer");
  LossScaler* scaler = ctx_.scaler;
  // fp16: the gradients carry the loss scale; a step that overflowed anywhere
  // is skipped everywhere.
  const double loss_scale = scaler ? scaler->scale() : 1.0;
  s.loss_scale = loss_scale;
  s.grad_norm = norm.norm;
  s.skipped = scaler && !norm.finite;
  const float coef = clip_coefficient(norm.norm, ctx_.deck.train.grad_clip, loss_scale);
  // Post-validation: the step taken ahead stands where it is the one the
  // checks call for (same gradients, learning rate and coefficient: the same
  // bits); else it is undone from the copy and the right one taken.
  const bool clean = !s.skipped && coef == clip_coefficient(0.0, 0.0, loss_scale);
  if (ahead && !clean) {
    for (ModelChunk& ch : ctx_.chunks) ch.engine->undo_step();
    ++(s.skipped ? counts_.skipped : counts_.clipped);
    s.rolled_back = true;
  }
  if (!s.skipped && !(ahead && clean)) {
    if (ctx_.before_update && !ahead) ctx_.before_update();
    for (ModelChunk& ch : ctx_.chunks) ch.engine->step(lr, coef);
  }
  if (scaler) scaler->update(s.skipped);
  return clean;
}

FloorOptions ScheduledRunner::floor_options(bool steady) const {
  FloorOptions o;
  o.across_steps = steady || ctx_.deck.parallel.post_validation;
  o.barrier = !ctx_.deck.parallel.post_validation;
  o.step_tail = tail_steps_ > 0 ? step_tail_ / tail_steps_ : 0.0;
  o.tied = !ctx_.deck.model.tied_embeddings || in_v_ ? TiedJoin::none
           : tied_exchange_                            ? TiedJoin::last_input_grad
                                                       : TiedJoin::last_pass;
  return o;
}

}  // namespace trident
