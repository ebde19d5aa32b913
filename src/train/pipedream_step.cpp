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
#include <fmt/format.h>

#include <cmath>

#include "core/timer.hpp"
#include "optim/schedule.hpp"
#include "train/trainer.hpp"

namespace trident {

void Trainer::audit(int g, bool forward) {
  if (!audit_on_) return;
  const std::uint64_t sum = arena_checksum(backend_, chunks_.front().model->params());
  if (forward) {
    audit_.at_forward[g] = sum;
    return;
  }
  ++audit_.checked;
  audit_.mismatched += audit_.at_forward.at(g) != sum;
  audit_.at_forward.erase(g);
}

void Trainer::pass_head_grad(ModelChunk& c, int g) {
  if (!grid_.embedding()) return;
  GptModel& m = *c.model;
  const TensorInfo& wte = m.param_table().at("wte");
  ScopedTimer timer(times_.comm);
  if (pcomm_.first_virtual(0)) {  // after the data group's sum, as the synchronous tie does
    pcomm_.recv_head_grad(c.head_grad_in.f32(), wte.numel, g);
    backend_.add(m.grads().f32(wte), m.grads().f32(wte), c.head_grad_in.f32(), wte.numel);
    return;
  }
  const std::size_t k = std::size_t(g) % c.head_grads_out.size();
  pcomm_.wait(c.head_sends[k]);  // taken by stage 0 p micro-batches ago
  backend_.copy(c.head_grads_out[k].data(), m.grads().f32(wte), wte.numel * sizeof(float));
  c.head_sends[k] = pcomm_.send_head_grad(c.head_grads_out[k].f32(), wte.numel, g);
}

void Trainer::refresh_head(ModelChunk& c) {
  Communicator* ends = grid_.embedding();
  if (!ends) return;
  const TensorInfo& wte = c.model->param_table().at("wte");
  Arena& p = c.model->params();  // in the weights' type (16-bit: stage 0's rounded masters)
  ends->broadcast(static_cast<char*>(p.data()) + wte.offset * dtype_size(p.dtype()), wte.numel,
                  p.dtype(), 0);  // stage 0 is rank 0
}

double Trainer::pipedream_forward(ModelChunk& c, int g, float dloss, bool warm_up) {
  GptModel& m = *c.model;
  const std::size_t n = m.boundary_elements();
  // The p - s micro-batches in flight are consecutive: g mod p - s is free.
  const int slot = g % int(c.busy.size());
  for (Request& r : c.sends[std::size_t(slot)]) pcomm_.wait(r);  // a send may still read it
  c.sends[std::size_t(slot)].clear();
  const int step = g / micro_batches_, i = g % micro_batches_;
  load(train_data_, window_of(std::uint64_t(step), deck_.train.batch, i * deck_.train.micro_batch));
  if (!pcomm_.first_virtual(0)) {
    ScopedTimer timer(times_.comm);
    TraceScope ts(trace_, fmt::format("recv F{}", g), "recv");
    pcomm_.recv_forward(m.input_buffer(slot), n, g, 0);
  }
  // A warm-up forward's weights change before its backward while its slot is
  // not yet refilled by restore(): copy them now.
  if (warm_up) c.stash->keep(g, m.params());
  audit(g, true);
  double loss = 0;
  {
    ScopedTimer timer(times_.forward);
    TraceScope ts(trace_, fmt::format("F{}", g), "forward");
    loss = m.forward(slot, tokens_.data(), targets_.data(), dloss);
  }
  if (!pcomm_.last_virtual(0))
    c.sends[std::size_t(slot)].push_back(pcomm_.send_forward(m.output(slot), n, g, 0));
  return loss;
}

double Trainer::pipedream_backward(ModelChunk& c, int g, float lr) {
  GptModel& m = *c.model;
  const std::size_t n = m.boundary_elements();
  const int slot = g % int(c.busy.size());
  if (!pcomm_.last_virtual(0)) {
    ScopedTimer timer(times_.comm);
    TraceScope ts(trace_, fmt::format("recv B{}", g), "recv");
    pcomm_.recv_backward(m.output_grad_buffer(), n, g, 0);
  }
  c.stash->swap_in(g, m.params());
  audit(g, false);
  m.grads().zero();
  {
    ScopedTimer timer(times_.backward);
    TraceScope ts(trace_, fmt::format("B{}", g), "backward");
    m.backward(slot, [&c](std::size_t off) { c.dp_comm->grads_ready_from(off); }, true);
  }
  if (!pcomm_.first_virtual(0))
    c.sends[std::size_t(slot)].push_back(pcomm_.send_backward(m.input_grad(slot), n, g, 0));
  c.stash->restore(g, m.params());
  // The update is not pipeline work: its time is kept out of the bubble.
  const double t0 = now_seconds();
  struct Excluded {
    double& total;
    double t0;
    ~Excluded() { total += now_seconds() - t0; }
  } excluded{update_seconds_, t0};
  {
    ScopedTimer timer(times_.comm);
    TraceScope ts(trace_, "all-reduce", "allreduce");
    c.dp_comm->finish();
  }
  pass_head_grad(c, g);
  ScopedTimer timer(times_.optimizer);
  TraceScope ts(trace_, "optimizer", "optimizer");
  // This stage's norm: the last stage's copy of the embedding is stage 0's
  // (not primary); tensors replicated over the tensor group count once.
  const bool tp_root = grid_.coord().tp == 0;
  double ss = 0;
  for (const TensorInfo& t : m.param_table().tensors())
    if (t.primary && (t.split_dim >= 0 || tp_root))
      ss += c.optimizer->grad_sum_squares(m.grads(), t.offset, t.numel);
  if (grid_.tensor().size() > 1) grid_.tensor().all_reduce(&ss, 1, DType::f64, ReduceOp::sum);
  const double clip = deck_.train.grad_clip, norm = std::sqrt(ss);
  const bool clipping = clip > 0 && clip / (norm + 1e-6) < 1.0;
  const bool head_copy = grid_.embedding() && !pcomm_.first_virtual(0);
  c.optimizer->step(m.params(), m.grads(), lr, clipping ? float(clip / (norm + 1e-6)) : 1.0f,
                    head_copy ? &m.param_table().at("wte") : nullptr);
  return ss;
}

StepStats Trainer::pipedream_step(int step) {
  const double t0 = now_seconds();
  const auto& t = deck_.train;
  ModelChunk& c = chunks_.front();
  StepStats s;
  s.step = step;
  s.lr = lr_at(step, t.steps, t.warmup, t.lr, t.min_lr);
  // Each micro-batch is one update: its tokens' losses are averaged over the
  // dp * micro_batch sequences the data group sums.
  const float dloss =
      1.0f / float(std::int64_t(grid_.shape().dp) * t.micro_batch * deck_.model.seq_len);
  const auto actions = pipedream_actions(grid_.shape().pp, grid_.coord().pp, micro_batches_, step,
                                         !stream_started_, (long long)t.steps * micro_batches_);
  const int ahead = pipedream_in_flight(grid_.shape().pp, grid_.coord().pp) - 1;
  const bool warming = !stream_started_;
  stream_started_ = true;
  double sums[2] = {0, 0};  // loss, the step's last gradient sum of squares
  int forwards = 0;
  for (const PipelineAction& a : actions) {
    if (a.forward)
      sums[0] += pipedream_forward(c, a.micro_batch, dloss, warming && forwards++ < ahead);
    else
      sums[1] = pipedream_backward(c, a.micro_batch, float(s.lr));
  }
  times_.pipeline += now_seconds() - t0 - update_seconds_;
  update_seconds_ = 0;
  {
    ScopedTimer timer(times_.comm);
    // Only the last stage computed the loss; the norm is over every stage.
    if (grid_.pipeline().size() > 1)
      grid_.pipeline().all_reduce(sums, 2, DType::f64, ReduceOp::sum);
    grid_.data().all_reduce(&sums[0], 1, DType::f64, ReduceOp::sum);
  }
  refresh_head(c);
  s.loss = sums[0] / (double(t.batch) * deck_.model.seq_len);
  s.grad_norm = std::sqrt(sums[1]);
  // Between steps the forwards run ahead occupy all slots but the last
  // backward's: evaluation uses that one. Its sends were received this step
  // (the reduction above is passed once every stage is done with it), and at
  // the run's last step so were all others: waiting for them cannot block.
  const int in_flight = int(c.busy.size());
  eval_slot_ = int(((long long)(step + 1) * micro_batches_ - 1) % in_flight);
  for (int k = 0; k < in_flight; ++k) {
    if (k != eval_slot_ && step + 1 < t.steps) continue;
    for (Request& r : c.sends[std::size_t(k)]) pcomm_.wait(r);
    c.sends[std::size_t(k)].clear();
  }
  if (step + 1 >= t.steps)
    for (Request& r : c.head_sends) pcomm_.wait(r);
  backend_.synchronize();
  s.seconds = now_seconds() - t0;
  return s;
}

void Trainer::stop_stream(int done) {
  if (schedule_ != ScheduleKind::pipedream || !stream_started_) return;
  ModelChunk& c = chunks_.front();
  GptModel& m = *c.model;
  // Stage s - 1 ran one forward further ahead than stage s has taken: g =
  // done*m + p - s - 1, bound for the slot the step left free.
  const int p = grid_.shape().pp, s = grid_.coord().pp;
  const long long g = (long long)done * micro_batches_ + (p - s - 1);
  if (s > 0 && g < (long long)deck_.train.steps * micro_batches_)
    pcomm_.recv_forward(m.input_buffer(eval_slot_), m.boundary_elements(), int(g), 0);
  for (auto& slot_sends : c.sends) {
    for (Request& r : slot_sends) pcomm_.wait(r);
    slot_sends.clear();
  }
  for (Request& r : c.head_sends) pcomm_.wait(r);
  stream_started_ = false;  // a later step warms up again
}

}  // namespace trident
