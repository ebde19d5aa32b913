#include "train/trainer.hpp"

#include <cmath>

#include "core/fault_inject.hpp"
#include "core/timer.hpp"
#include "model/gpt_params.hpp"
#include "optim/clip.hpp"
#include "optim/schedule.hpp"
#include "parallel/pipeline/schedule_costs.hpp"
#include "parallel/pipeline/schedule_sim.hpp"
#include "train/pipedream_runner.hpp"
#include "train/profile.hpp"

namespace trident {

Trainer::Trainer(const Deck& deck, Grid& grid, ComputeBackend& backend, MemoryLedger& ledger,
                 const TokenDataset& train_data, const TokenDataset* val_data,
                 TraceRecorder* trace)
    : deck_(deck),
      grid_(grid),
      backend_(backend),
      train_data_(train_data),
      val_data_(val_data),
      trace_(trace),
      schedule_(deck.parallel.schedule),
      micro_batches_(deck.train.batch / (grid.shape().dp * deck.train.micro_batch)),
      pcomm_(grid.pipeline(), grid.pipeline_grads(), backend, deck.parallel.virtual_stages,
             v_placement(schedule_)),
      weights_(precision_dtype(deck.precision.dtype)),
      grads_(precision_dtype(deck.precision.reduce_dtype)) {
  if (deck.precision.dtype == Precision::fp16) {
    const auto& p = deck.precision;
    scaler_.emplace(LossScalerConfig{p.initial_scale, p.growth_interval, p.hysteresis, p.min_scale});
  }
  const int v = deck.parallel.virtual_stages, p = grid.shape().pp, s = grid.coord().pp;
  choose_partition(ledger);
  const bool split = splits_backward(schedule_) && p > 1;
  const ZeroBubbleCosts costs = split ? zero_bubble_costs(schedule_cost_deck(deck), grid.shape(), partition_) : ZeroBubbleCosts{};
  if (split) {
    const auto lists = zero_bubble_schedule(schedule_, p, micro_batches_, costs);
    actions_ = lists[std::size_t(s)];
    list_bubble_ = replayed_bubble(lists, int(costs.f.size()) / p, v_placement(schedule_), costs);
  } else {
    actions_ = build_schedule(schedule_, p, s, micro_batches_, v);
  }
  std::vector<bool> sends;
  for (int c = 0; c < v; ++c) sends.push_back(!pcomm_.first_virtual(c));
  send_pool_ = send_buffer_pool(actions_, sends);
  input_grad_sends_.resize(std::size_t(send_pool_.size));
  chunks_.resize(v);
  for (int c = 0; c < v; ++c) {
    ModelChunk& ch = chunks_[c];
    ch.virtual_stage = virtual_stage_of(v_placement(schedule_), p, s, c);
    const int vs = ch.virtual_stage, V = p * v;
    ch.spec = StageSpec{partition_[vs], partition_[vs + 1] - partition_[vs], vs == 0, vs == V - 1};
    build_chunk(ch, ledger, activation_slots(actions_, c), max_pending_weights(actions_, c),
                c == 0 ? send_pool_.size : 0);
  }
  if (schedule_ == ScheduleKind::pipedream) pipedream_ = std::make_unique<PipedreamRunner>(*this, ledger);
  const std::size_t bt = std::size_t(deck.train.micro_batch) * deck.model.seq_len;
  tokens_.resize(bt);
  targets_.resize(bt);
}

Trainer::~Trainer() = default;

void Trainer::choose_partition(MemoryLedger& ledger) {
  const auto& m = deck_.model;
  const int V = grid_.shape().pp * deck_.parallel.virtual_stages;
  const PartitionMethod how = deck_.parallel.partition;
  StageCosts costs;
  if (how == PartitionMethod::profile) {
    costs = profile_stage_costs(deck_, grid_, backend_);
  } else {  // parameter counts (uniform uses them only for the printed prediction)
    const TensorTable whole = build_gpt_param_table(m);
    costs.block.assign(m.layers, 0.0);
    for (const TensorInfo& t : whole.tensors()) {
      if (t.layer >= 0) costs.block[t.layer] += double(t.numel);
      else if (t.name == "lnf.w" || t.name == "lnf.b") costs.last += double(t.numel);
      else costs.first += double(t.numel);
    }
  }
  partition_ = how == PartitionMethod::uniform ? partition_uniform(m.layers, V)
                                               : partition_min_max(costs, V);
  predicted_costs_ = stage_costs(costs, partition_);
  (void)ledger;
}

void Trainer::build_chunk(ModelChunk& ch, MemoryLedger& ledger, int slots, int weight_buffers,
                          int send_buffers) {
  const auto& t = deck_.train;
  const TensorParallelLayout tp{grid_.shape().tp, grid_.coord().tp, deck_.parallel.sequence_parallel};
  GptModelOptions o;
  ch.engine = make_grad_engine(EngineSetup{engine_sections(deck_), grid_, backend_, ledger, ch.spec, weights_, grads_},
                               o.units);
  o.tp = tp;
  o.tensor_comm = &grid_.tensor();
  o.stage = ch.spec;
  o.activation_slots = slots;
  o.weight_buffers = weight_buffers;
  o.send_buffers = send_buffers;
  o.activations = make_activation_policy(t.recompute, t.partition_activations, tp.size, tp.sp(),
                                         deck_.precision.dtype);
  o.weights = weights_;
  o.grads = grads_;
  o.storage = ch.engine->storage();
  if (&ch != &chunks_.front()) o.shares_buffers_with = chunks_.front().model.get();
  ch.model = std::make_unique<GptModel>(deck_.model, t.micro_batch, backend_, ledger, o);
  ch.model->init_parameters(t.seed);  // 16-bit weights: their rounding
  ch.engine->attach(*ch.model, t.seed);
  ch.sends.resize(slots);
  ch.busy.assign(slots, false);
  ch.slot_of.assign(std::max(micro_batches_, 1), -1);
  ch.buffer_busy.assign(weight_buffers, false);
  ch.buffer_of.assign(std::max(micro_batches_, 1), -1);
}

void Trainer::refresh_weights_from_masters() {
  for (ModelChunk& ch : chunks_) ch.engine->refresh_weights();
}

std::uint64_t Trainer::window_of(std::uint64_t batch_index, int sequences, int k) const {
  // Global batch b holds windows [b*S, (b+1)*S); data rank r takes a contiguous
  // S/dp of them, so any layout sees the same global batch.
  const int per_rank = sequences / grid_.shape().dp;
  return batch_index * sequences + std::uint64_t(grid_.coord().dp) * per_rank + k;
}

void Trainer::load(const TokenDataset& data, std::uint64_t first_window) {
  ScopedTimer t(times_.data);
  const int T = deck_.model.seq_len;
  for (int i = 0; i < deck_.train.micro_batch; ++i)
    data.read_window(first_window + i, tokens_.data() + std::size_t(i) * T,
                     targets_.data() + std::size_t(i) * T);
}

void Trainer::sum_tied_embedding() {
  // The first and last stages hold copies of the token embedding: their
  // gradients (each stage's own contribution) are summed so both stay equal.
  // In a V both are chunks of rank 0: summed there, no message.
  if (v_placement(schedule_)) {
    if (grid_.coord().pp == 0)
      sum_tied_grads_locally(*chunks_.front().engine, *chunks_.back().engine, backend_);
    return;
  }
  Communicator* ends = grid_.embedding();
  if (!ends) return;
  (grid_.coord().pp == 0 ? chunks_.front() : chunks_.back()).engine->sum_tied_grads(*ends);
}

void Trainer::update(float lr, StepStats& s) {
  ScopedTimer timer(times_.optimizer);
  TraceScope ts(trace_, "optimizer", "optimizer");
  // TRIDENT_FAULT_INJECT=grad:inf@STEP on a rank: one of its gradients becomes inf.
  if (fault_armed("grad", "inf", s.step)) chunks_.front().engine->poison_gradient();
  double ss = 0;
  bool nonfinite = false;
  for (ModelChunk& ch : chunks_) {
    ss += ch.engine->grad_sum_squares();
    nonfinite = nonfinite || (scaler_ && ch.engine->grads_nonfinite());
  }
  // Each element is counted on one rank of the job: one sum over the world.
  // fp16: the gradients carry the loss scale; a step that overflowed anywhere
  // is skipped everywhere.
  const double loss_scale = scaler_ ? scaler_->scale() : 1.0;
  const GradNorm norm = reduce_grad_norm(ss, nonfinite, {&grid_.world()}, loss_scale);
  s.loss_scale = loss_scale;
  s.grad_norm = norm.norm;
  s.skipped = scaler_ && !norm.finite;
  const float coef = clip_coefficient(norm.norm, deck_.train.grad_clip, loss_scale);
  if (!s.skipped) {
    if (before_update_) before_update_();
    for (ModelChunk& ch : chunks_) ch.engine->step(lr, coef);
  }
  if (scaler_) scaler_->update(s.skipped);
}

std::int64_t Trainer::optimizer_steps() const {
  for (const ModelChunk& ch : chunks_)
    if (ch.engine->updates_here()) return ch.engine->steps_taken();
  return 0;
}

void Trainer::set_optimizer_steps(std::int64_t t) {
  for (ModelChunk& ch : chunks_) ch.engine->set_steps_taken(t);
}

double Trainer::evaluate() {
  if (!val_data_) return 0.0;
  ScopedTimer timer(times_.eval);
  const auto& t = deck_.train;
  const int per_rank = t.eval_sequences / grid_.shape().dp;
  double sum = 0;
  // Forward only, one micro-batch at a time through every virtual stage. Its
  // sends are waited for once all of its chunks have run: in a V the turn at
  // stage p - 1 is a message this rank receives itself, in its next chunk.
  std::vector<Request> sends;
  for (int k = 0; k < per_rank; k += t.micro_batch) {
    load(*val_data_, window_of(0, t.eval_sequences, k));
    for (std::size_t c = 0; c < chunks_.size(); ++c) {
      GptModel& m = *chunks_[c].model;
      const std::size_t n = m.boundary_elements();
      const int slot = pipedream_ ? pipedream_->eval_slot() : 0, mb = -1 - k;  // see PipelineComm::tag
      if (!pcomm_.first_virtual(int(c))) pcomm_.recv_forward(m.input_buffer(slot), n, mb, int(c));
      sum += m.forward(slot, tokens_.data(), targets_.data(), 0.0f);
      if (!pcomm_.last_virtual(int(c)))
        sends.push_back(pcomm_.send_forward(m.output(slot), n, mb, int(c)));
    }
    for (Request& r : sends) pcomm_.wait(r);
    sends.clear();
  }
  if (grid_.pipeline().size() > 1) grid_.pipeline().all_reduce(&sum, 1, DType::f64, ReduceOp::sum);
  grid_.data().all_reduce(&sum, 1, DType::f64, ReduceOp::sum);
  return sum / (double(t.eval_sequences) * deck_.model.seq_len);
}

}  // namespace trident
