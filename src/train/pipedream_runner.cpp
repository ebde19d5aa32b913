// One step of the asynchronous pipedream schedule (PipeDream, Narayanan et al.
// 2019): a continuous 1F1B stream over global micro-batches g = step*m + i.
// No flush: the forwards a stage runs ahead, with their activations and
// stashed weights, carry over into the next step. Every backward runs on the
// weights its forward used (the stash) and is followed at once by this
// stage's own update: the micro-batch's gradients are summed over the data
// group, clipped by this stage's norm, and AdamW steps with the step's LR.
// The tied embedding stays tied without the two end stages ever waiting for
// each other mid-step: stage 0 owns it and updates it with the whole gradient,
// its own plus the head's share, which the last stage sends after each
// backward (it has always arrived: the last stage's backward of g precedes
// stage 0's). The last stage's copy is frozen in its optimizer and refreshed
// from stage 0's at each step's end, so the head runs on the embedding as of
// the last step boundary.
#include "train/pipedream_runner.hpp"

#include <fmt/format.h>

#include <cmath>

#include "core/timer.hpp"
#include "optim/clip.hpp"
#include "optim/lr_schedule.hpp"

namespace trident {

PipedreamRunner::PipedreamRunner(StepContext ctx, MemoryLedger& ledger)
    : ctx_(std::move(ctx)), chunk_(ctx_.chunks.front()) {  // one chunk, full storage (the deck checks)
  const int p = ctx_.grid.shape().pp, s = ctx_.grid.coord().pp;
  GptModel& m = *chunk_.model;
  stash_ = std::make_unique<WeightStash>(ctx_.backend, ledger, m.params().numel(),
                                         pipedream_in_flight(p, s) - 1, m.params().dtype());
  if (ctx_.grid.embedding()) {  // the last stage runs at most p micro-batches ahead of stage 0
    wte_ = &m.param_table().at("wte");
    const std::size_t n = wte_->numel;
    for (int k = 0; k < (s == 0 ? 0 : p); ++k)
      head_grads_out_.emplace_back(ctx_.backend, ledger, MemCategory::buffers, n);
    head_sends_.resize(head_grads_out_.size());
    if (s == 0) head_grad_in_ = Arena(ctx_.backend, ledger, MemCategory::buffers, n);
    // The last stage's copy follows stage 0's (refresh_head): its optimizer leaves it alone.
    else chunk_.engine->freeze(*wte_);
  }
}

void PipedreamRunner::audit(int g, bool forward) {
  if (!audit_on_) return;
  const std::uint64_t sum = arena_checksum(ctx_.backend, chunk_.model->params());
  if (forward) {
    audit_.at_forward[g] = sum;
    return;
  }
  ++audit_.checked;
  audit_.mismatched += audit_.at_forward.at(g) != sum;
  audit_.at_forward.erase(g);
}

void PipedreamRunner::pass_head_grad(int g) {
  if (!ctx_.grid.embedding()) return;
  GptModel& m = *chunk_.model;
  const TensorInfo& wte = *wte_;
  ScopedTimer timer(ctx_.times.comm);
  if (ctx_.pcomm.first_virtual(0)) {  // after the data group's sum, as the synchronous tie does
    ctx_.pcomm.recv_head_grad(head_grad_in_.f32(), wte.numel, g);
    ctx_.backend.add(m.grads().f32(wte), m.grads().f32(wte), head_grad_in_.f32(), wte.numel);
    return;
  }
  const std::size_t k = std::size_t(g) % head_grads_out_.size();
  ctx_.pcomm.wait(head_sends_[k]);  // taken by stage 0 p micro-batches ago
  ctx_.backend.copy(head_grads_out_[k].data(), m.grads().f32(wte), wte.numel * sizeof(float));
  head_sends_[k] = ctx_.pcomm.send_head_grad(head_grads_out_[k].f32(), wte.numel, g);
}

void PipedreamRunner::refresh_head() {
  Communicator* ends = ctx_.grid.embedding();
  if (!ends) return;
  const TensorInfo& wte = *wte_;
  Arena& p = chunk_.model->params();  // in the weights' type (16-bit: stage 0's rounded masters)
  ends->broadcast(static_cast<char*>(p.data()) + wte.offset * dtype_size(p.dtype()), wte.numel,
                  p.dtype(), 0);  // stage 0 is rank 0
}

double PipedreamRunner::forward(int g, float dloss, bool warm_up) {
  GptModel& m = *chunk_.model;
  PipelineComm& pc = ctx_.pcomm;
  const std::size_t n = m.boundary_elements();
  // The p - s micro-batches in flight are consecutive: g mod p - s is free.
  const int slot = g % chunk_.slots.size();
  chunk_.slots.wait_sends(slot, pc);  // a send may still read it
  const MicroBatchActs acts = chunk_.slots.acts(slot);
  const int step = g / ctx_.micro_batches, i = g % ctx_.micro_batches;
  ctx_.load_micro_batch(std::uint64_t(step), i);
  if (!pc.first_virtual(0)) {
    ScopedTimer timer(ctx_.times.comm);
    TraceScope ts(ctx_.trace, fmt::format("recv F{}", g), "recv");
    pc.recv_forward(m.input_buffer(acts), n, g, 0);
  }
  // A warm-up forward's weights change before its backward while its slot is
  // not yet refilled by restore(): copy them now.
  if (warm_up) stash_->keep(g, m.params());
  audit(g, true);
  double loss = 0;
  {
    ScopedTimer timer(ctx_.times.forward);
    TraceScope ts(ctx_.trace, fmt::format("F{}", g), "forward");
    loss = m.forward(acts, ctx_.tokens.data(), ctx_.targets.data(), dloss);
  }
  if (!pc.last_virtual(0)) chunk_.slots.add_send(slot, pc.send_forward(m.output(acts), n, g, 0));
  return loss;
}

double PipedreamRunner::backward(int g, float lr) {
  GptModel& m = *chunk_.model;
  PipelineComm& pc = ctx_.pcomm;
  const std::size_t n = m.boundary_elements();
  const int slot = g % chunk_.slots.size();
  // One send buffer per slot (the pool's size).
  float* input_grad = pc.first_virtual(0) ? nullptr : ctx_.input_grad_buffer(slot);
  if (!pc.last_virtual(0)) {
    ScopedTimer timer(ctx_.times.comm);
    TraceScope ts(ctx_.trace, fmt::format("recv B{}", g), "recv");
    pc.recv_backward(m.output_grad_buffer(), n, g, 0);
  }
  stash_->swap_in(g, m.params());
  audit(g, false);
  chunk_.engine->begin_step();
  {
    ScopedTimer timer(ctx_.times.backward);
    TraceScope ts(ctx_.trace, fmt::format("B{}", g), "backward");
    m.backward(chunk_.slots.acts(slot), chunk_.engine->grads_ready_hook(), true, input_grad);
  }
  if (!pc.first_virtual(0)) chunk_.slots.add_send(slot, pc.send_backward(input_grad, n, g, 0));
  stash_->restore(g, m.params());
  // The update is not pipeline work: its time is kept out of the bubble.
  const double t0 = now_seconds();
  struct Excluded {
    double& total;
    double t0;
    ~Excluded() { total += now_seconds() - t0; }
  } excluded{update_seconds_, t0};
  {
    ScopedTimer timer(ctx_.times.comm);
    TraceScope ts(ctx_.trace, "all-reduce", "allreduce");
    chunk_.engine->finish_backward();
  }
  pass_head_grad(g);
  ScopedTimer timer(ctx_.times.optimizer);
  TraceScope ts(ctx_.trace, "optimizer", "optimizer");
  // This stage's norm, over the stage's tensor and data ranks: the last
  // stage's copy of the embedding is stage 0's and counts there.
  const double ss = chunk_.engine->grad_sum_squares();
  Grid& grid = ctx_.grid;
  const GradNorm norm = reduce_grad_norm(ss, false, {&grid.tensor(), &grid.data()});
  if (ctx_.before_update) ctx_.before_update();
  chunk_.engine->step(lr, clip_coefficient(norm.norm, ctx_.deck.train.grad_clip));
  return norm.norm * norm.norm;
}

void PipedreamRunner::step(StepStats& s) {
  const double t0 = now_seconds();
  const auto& t = ctx_.deck.train;
  const int step = s.step;
  ModelChunk& c = chunk_;
  // Each micro-batch is one update: its tokens' losses are averaged over the
  // dp * micro_batch sequences the data group sums.
  const float dloss =
      1.0f / float(std::int64_t(ctx_.grid.shape().dp) * t.micro_batch * ctx_.deck.model.seq_len);
  const auto actions =
      pipedream_actions(ctx_.grid.shape().pp, ctx_.grid.coord().pp, ctx_.micro_batches, step,
                        !stream_started_, (long long)t.steps * ctx_.micro_batches);
  const int ahead = pipedream_in_flight(ctx_.grid.shape().pp, ctx_.grid.coord().pp) - 1;
  const bool warming = !stream_started_;
  stream_started_ = true;
  double sums[2] = {0, 0};  // loss, the step's last gradient sum of squares
  int forwards = 0;
  for (const PipelineAction& a : actions) {
    if (a.forward)
      sums[0] += forward(a.micro_batch, dloss, warming && forwards++ < ahead);
    else
      sums[1] = backward(a.micro_batch, float(s.lr));
  }
  ctx_.times.pipeline += now_seconds() - t0 - update_seconds_;
  update_seconds_ = 0;
  {
    ScopedTimer timer(ctx_.times.comm);
    // Only the last stage computed the loss; the norm is over every stage.
    if (ctx_.grid.pipeline().size() > 1)
      ctx_.grid.pipeline().all_reduce(sums, 2, DType::f64, ReduceOp::sum);
    ctx_.grid.data().all_reduce(&sums[0], 1, DType::f64, ReduceOp::sum);
  }
  refresh_head();
  s.loss = sums[0] / (double(t.batch) * ctx_.deck.model.seq_len);
  s.grad_norm = std::sqrt(sums[1]);
  // Between steps the forwards run ahead occupy all slots but the last
  // backward's: evaluation uses that one. Its sends were received this step
  // (the reduction above is passed once every stage is done with it), and at
  // the run's last step so were all others: waiting for them cannot block.
  const int in_flight = c.slots.size();
  eval_slot_ = int(((long long)(step + 1) * ctx_.micro_batches - 1) % in_flight);
  for (int k = 0; k < in_flight; ++k)
    if (k == eval_slot_ || step + 1 >= t.steps) c.slots.wait_sends(k, ctx_.pcomm);
  if (step + 1 >= t.steps)
    for (Request& r : head_sends_) ctx_.pcomm.wait(r);
  ctx_.backend.synchronize();
}

void PipedreamRunner::stop_stream(int done) {
  if (!stream_started_) return;
  ModelChunk& c = chunk_;
  GptModel& m = *c.model;
  // Stage s - 1 ran one forward further ahead than stage s has taken: g =
  // done*m + p - s - 1, bound for the slot the step left free.
  const int p = ctx_.grid.shape().pp, s = ctx_.grid.coord().pp;
  const long long g = (long long)done * ctx_.micro_batches + (p - s - 1);
  if (s > 0 && g < (long long)ctx_.deck.train.steps * ctx_.micro_batches)
    ctx_.pcomm.recv_forward(m.input_buffer(c.slots.acts(eval_slot_)), m.boundary_elements(),
                            int(g), 0);
  c.slots.wait_all_sends(ctx_.pcomm);
  for (Request& r : head_sends_) ctx_.pcomm.wait(r);
  stream_started_ = false;  // a later step warms up again
}

}  // namespace trident
