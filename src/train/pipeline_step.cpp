// One training step: run this stage's schedule of forward and backward passes
// (receiving inputs and gradients from the neighbouring virtual stages,
// sending its own; zero bubble: backwards split into B, which sends, and W),
// then reduce gradients and update once every W has run.
#include <fmt/format.h>

#include <chrono>
#include <thread>

#include "core/fault_inject.hpp"
#include "core/timer.hpp"
#include "optim/schedule.hpp"
#include "train/pipedream_runner.hpp"
#include "train/trainer.hpp"

namespace trident {

double Trainer::run_schedule(int step, float dloss) {
  const double t0 = now_seconds();
  const int mb_size = deck_.train.micro_batch;
  for (std::size_t k = 0; k < chunks_.size(); ++k) {
    chunks_[k].weight_passes_left = 0;
    for (const auto& a : actions_) chunks_[k].weight_passes_left += a.frees_slot() && a.chunk == int(k);
  }
  double loss_sum = 0;
  for (const PipelineAction& a : actions_) {
    ModelChunk& c = chunks_[a.chunk];
    GptModel& m = *c.model;
    const std::size_t n = m.boundary_elements();
    const int mb = a.micro_batch;
    if (a.forward) {
      const int slot = c.slots.acquire(mb, a.slot, pcomm_);
      const MicroBatchActs acts = c.slots.acts(slot);
      load(train_data_, window_of(std::uint64_t(step), deck_.train.batch, mb * mb_size));
      if (!pcomm_.first_virtual(a.chunk)) {
        ScopedTimer timer(times_.comm);
        TraceScope ts(trace_, fmt::format("recv F{}", mb), "recv");
        pcomm_.recv_forward(m.input_buffer(acts), n, mb, a.chunk);
      }
      {
        ScopedTimer timer(times_.forward);
        TraceScope ts(trace_, fmt::format("F{}", mb), "forward");
        loss_sum += m.forward(acts, tokens_.data(), targets_.data(), dloss);
      }
      if (!pcomm_.last_virtual(a.chunk))
        c.slots.add_send(slot, pcomm_.send_forward(m.output(acts), n, mb, a.chunk));
      continue;
    }
    const int slot = c.slots.slot_of(mb);
    // The chunk's last weight pass of the step lets the engine reduce
    // gradients as they become final.
    const bool last = a.frees_slot() && --c.weight_passes_left == 0;
    const GradsReadyFn ready = last ? c.engine->grads_ready_hook() : nullptr;
    if (a.part == BackwardPart::weights) {  // W: nobody waits for it
      ScopedTimer timer(times_.backward);
      TraceScope ts(trace_, fmt::format("W{}", mb), "weights");
      m.backward_weights(c.slots.acts_of(mb), ready, last);
      c.slots.release(mb);
      continue;
    }
    if (!pcomm_.last_virtual(a.chunk)) {
      ScopedTimer timer(times_.comm);
      TraceScope ts(trace_, fmt::format("recv B{}", mb), "recv");
      pcomm_.recv_backward(m.output_grad_buffer(), n, mb, a.chunk);
    }
    // The send buffer B writes its input gradient to, waited for after the
    // receive above: free once the previous virtual stage has posted the
    // receive of what was last sent from it (the lists name the buffer so
    // that this wait is the one they were replayed with).
    const int send_buffer = pcomm_.first_virtual(a.chunk) ? -1 : send_pool_.of(a, slot);
    float* input_grad = send_buffer >= 0 ? input_grad_buffer(send_buffer) : nullptr;
    if (send_buffer >= 0) {
      ScopedTimer timer(times_.comm);
      pcomm_.wait(input_grad_sends_[std::size_t(send_buffer)]);
    }
    {
      ScopedTimer timer(times_.backward);
      TraceScope ts(trace_, fmt::format("B{}", mb), "backward");
      if (a.part == BackwardPart::input) {
        // B keeps W's inputs over the slot's dead activations, the stage's
        // output among them: its send must be done.
        c.slots.wait_sends(slot, pcomm_);
        c.slots.acquire_weight_buffer(mb);
        m.backward_input(c.slots.acts_of(mb), input_grad);
      } else {
        m.backward(c.slots.acts_of(mb), ready, last, input_grad);
      }
    }
    if (send_buffer >= 0)
      input_grad_sends_[std::size_t(send_buffer)] =
          pcomm_.send_backward(input_grad, n, mb, a.chunk);
    if (a.frees_slot()) c.slots.release(mb);
  }
  for (ModelChunk& c : chunks_) c.slots.wait_all_sends(pcomm_);
  for (Request& r : input_grad_sends_) pcomm_.wait(r);
  times_.pipeline += now_seconds() - t0;
  return loss_sum;
}

StepStats Trainer::step(int step) {
  // TRIDENT_FAULT_INJECT=step:stall@N on a rank: it stops answering, as a stuck node would.
  if (fault_armed("step", "stall", step)) std::this_thread::sleep_for(std::chrono::hours(1));
  if (pipedream_) return pipedream_->step(step);
  const double t0 = now_seconds();
  const auto& t = deck_.train;
  // Each token's loss enters the global mean with weight 1/(batch * seq_len);
  // summing over the data group then gives the mean over the global batch.
  // fp16 multiplies it by the loss scale (gradients are unscaled in update()).
  const float dloss = float(scaler_ ? scaler_->scale() : 1.0) /
                      float(std::int64_t(t.batch) * deck_.model.seq_len);
  StepStats s;
  s.step = step;
  s.lr = lr_at(step, t.steps, t.warmup, t.lr, t.min_lr);
  for (ModelChunk& c : chunks_) c.engine->begin_step();
  double loss_sum = run_schedule(step, dloss);
  {
    ScopedTimer timer(times_.comm);
    TraceScope ts(trace_, "all-reduce", "allreduce");
    for (ModelChunk& c : chunks_) c.engine->finish_backward();
    sum_tied_embedding();
    // Only the last stage computed the loss: sum over the pipeline, then data.
    if (grid_.pipeline().size() > 1)
      grid_.pipeline().all_reduce(&loss_sum, 1, DType::f64, ReduceOp::sum);
    grid_.data().all_reduce(&loss_sum, 1, DType::f64, ReduceOp::sum);
  }
  s.loss = loss_sum / (double(t.batch) * deck_.model.seq_len);
  update(float(s.lr), s);
  {
    ScopedTimer timer(times_.optimizer);
    // The step ends when an asynchronous device has finished it. (Backward is
    // not synchronised: the host must stay free to drive bucket reductions.)
    backend_.synchronize();
  }
  s.seconds = now_seconds() - t0;
  return s;
}

void Trainer::stop_stream(int done) {
  if (pipedream_) pipedream_->stop_stream(done);
}

}  // namespace trident
