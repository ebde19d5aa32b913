// One training step: run this stage's schedule of forward and backward passes
// (receiving inputs and gradients from the neighbouring virtual stages,
// sending its own; zero bubble: backwards split into B, which sends, and W),
// then reduce gradients and update once every W has run.
#include <fmt/format.h>

#include <chrono>
#include <thread>

#include "core/fault_inject.hpp"
#include "core/timer.hpp"
#include "optim/lr_schedule.hpp"
#include "train/pipedream_runner.hpp"
#include "train/trainer.hpp"

namespace trident {

int Trainer::acquire_slot(ModelChunk& c, int mb, int assigned) {
  // The slot the list assigned, else a free slot whose send is done, else the
  // first free one: its forward's send may still read it, so wait for it (the
  // neighbour's receive is scheduled; once this rank has run the slot's B,
  // it has been received).
  int pick = assigned;
  if (pick >= 0 && c.busy[std::size_t(pick)])
    throw std::logic_error("pipeline: the list assigns a slot still in use");
  for (std::size_t s = 0; pick < 0 && s < c.busy.size(); ++s) {
    if (c.busy[s]) continue;
    bool sent = true;
    for (Request& r : c.sends[s]) sent = pcomm_.test(r) && sent;
    if (sent) pick = int(s);
  }
  for (std::size_t s = 0; pick < 0 && s < c.busy.size(); ++s)
    if (!c.busy[s]) pick = int(s);
  if (pick < 0) throw std::logic_error("pipeline: more micro-batches in flight than activation slots");
  for (Request& r : c.sends[pick]) pcomm_.wait(r);
  c.sends[pick].clear();
  c.busy[pick] = true;
  c.slot_of[mb] = pick;
  return pick;
}

void Trainer::release_slot(ModelChunk& c, int mb) {
  c.busy[c.slot_of[mb]] = false;
  c.slot_of[mb] = -1;
  if (c.buffer_of[mb] >= 0) c.buffer_busy[c.buffer_of[mb]] = false;
  c.buffer_of[mb] = -1;
}

int Trainer::acquire_weight_buffer(ModelChunk& c, int mb) {
  for (std::size_t b = 0; b < c.buffer_busy.size(); ++b) {
    if (c.buffer_busy[b]) continue;
    c.buffer_busy[b] = true;
    c.buffer_of[mb] = int(b);
    return int(b);
  }
  throw std::logic_error("pipeline: more pending weight passes than W buffers");
}

double Trainer::run_schedule(int step, float dloss) {
  const double t0 = now_seconds();
  const int mb_size = deck_.train.micro_batch;
  for (std::size_t k = 0; k < chunks_.size(); ++k) {
    chunks_[k].weight_passes_left = 0;
    for (const auto& a : plan_.actions) chunks_[k].weight_passes_left += a.frees_slot() && a.chunk == int(k);
  }
  double loss_sum = 0;
  for (const PipelineAction& a : plan_.actions) {
    ModelChunk& c = chunks_[a.chunk];
    GptModel& m = *c.model;
    const std::size_t n = m.boundary_elements();
    const int mb = a.micro_batch;
    if (a.forward) {
      const int slot = acquire_slot(c, mb, a.slot);
      load(train_data_, window_of(std::uint64_t(step), deck_.train.batch, mb * mb_size));
      if (!pcomm_.first_virtual(a.chunk)) {
        ScopedTimer timer(times_.comm);
        TraceScope ts(trace_, fmt::format("recv F{}", mb), "recv");
        pcomm_.recv_forward(m.input_buffer(slot), n, mb, a.chunk);
      }
      {
        ScopedTimer timer(times_.forward);
        TraceScope ts(trace_, fmt::format("F{}", mb), "forward");
        loss_sum += m.forward(slot, tokens_.data(), targets_.data(), dloss);
      }
      if (!pcomm_.last_virtual(a.chunk))
        c.sends[slot].push_back(pcomm_.send_forward(m.output(slot), n, mb, a.chunk));
      continue;
    }
    const int slot = c.slot_of[mb];
    // The chunk's last weight pass of the step lets the engine reduce
    // gradients as they become final.
    const bool last = a.frees_slot() && --c.weight_passes_left == 0;
    const GradsReadyFn ready = last ? c.engine->grads_ready_hook() : nullptr;
    if (a.part == BackwardPart::weights) {  // W: nobody waits for it
      ScopedTimer timer(times_.backward);
      TraceScope ts(trace_, fmt::format("W{}", mb), "weights");
      m.backward_weights(slot, c.buffer_of[mb], ready, last);
      release_slot(c, mb);
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
    const int send_buffer = pcomm_.first_virtual(a.chunk) ? -1 : plan_.send_pool.of(a, slot);
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
        for (Request& r : c.sends[slot]) pcomm_.wait(r);
        c.sends[slot].clear();
        m.backward_input(slot, acquire_weight_buffer(c, mb), send_buffer);
      } else {
        m.backward(slot, ready, last, send_buffer);
      }
    }
    if (send_buffer >= 0)
      input_grad_sends_[std::size_t(send_buffer)] =
          pcomm_.send_backward(m.input_grad(send_buffer), n, mb, a.chunk);
    if (a.frees_slot()) release_slot(c, mb);
  }
  for (ModelChunk& c : chunks_)
    for (auto& slot_sends : c.sends) {
      for (Request& r : slot_sends) pcomm_.wait(r);
      slot_sends.clear();
    }
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
