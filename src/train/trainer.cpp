#include "train/trainer.hpp"

#include <cmath>

#include "core/fault_inject.hpp"
#include "core/timer.hpp"
#include "model/gpt_params.hpp"
#include "optim/clip.hpp"
#include "optim/schedule.hpp"
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
      gather_mode_(deck.parallel.dp_mode == "gather"),
      schedule_(parse_schedule(deck.parallel.schedule)),
      micro_batches_(deck.train.batch / (grid.shape().dp * deck.train.micro_batch)),
      pcomm_(grid.pipeline(), deck.parallel.virtual_stages),
      weights_(precision_dtype(deck.precision.dtype)),
      grads_(precision_dtype(deck.precision.reduce_dtype)) {
  if (deck.precision.dtype == "fp16") {
    const auto& p = deck.precision;
    scaler_.emplace(LossScalerConfig{p.initial_scale, p.growth_interval, p.hysteresis, p.min_scale});
  }
  const int v = deck.parallel.virtual_stages, p = grid.shape().pp, s = grid.coord().pp;
  choose_partition(ledger);
  actions_ = build_schedule(schedule_, p, s, micro_batches_, v);
  chunks_.resize(v);
  for (int c = 0; c < v; ++c) {
    ModelChunk& ch = chunks_[c];
    ch.virtual_stage = c * p + s;
    const int vs = ch.virtual_stage, V = p * v;
    ch.spec = StageSpec{partition_[vs], partition_[vs + 1] - partition_[vs], vs == 0, vs == V - 1};
    build_chunk(ch, ledger, max_in_flight(actions_, c));
  }
  if (schedule_ == ScheduleKind::pipedream) {  // one chunk, full storage (the deck checks)
    ModelChunk& ch = chunks_.front();
    GptModel& m = *ch.model;
    ch.stash = std::make_unique<WeightStash>(backend_, ledger, m.params().numel(),
                                             pipedream_in_flight(p, s) - 1, m.params().dtype());
    if (grid.embedding()) {  // the last stage runs at most p micro-batches ahead of stage 0
      const std::size_t n = m.param_table().at("wte").numel;
      for (int k = 0; k < (s == 0 ? 0 : p); ++k)
        ch.head_grads_out.emplace_back(backend_, ledger, MemCategory::buffers, n);
      ch.head_sends.resize(ch.head_grads_out.size());
      if (s == 0) ch.head_grad_in = Arena(backend_, ledger, MemCategory::buffers, n);
    }
  }
  const std::size_t bt = std::size_t(deck.train.micro_batch) * deck.model.seq_len;
  tokens_.resize(bt);
  targets_.resize(bt);
}

void Trainer::choose_partition(MemoryLedger& ledger) {
  const auto& m = deck_.model;
  const int V = grid_.shape().pp * deck_.parallel.virtual_stages;
  const std::string& how = deck_.parallel.partition;
  StageCosts costs;
  if (how == "profile") {
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
  partition_ = how == "uniform" ? partition_uniform(m.layers, V) : partition_min_max(costs, V);
  predicted_costs_ = stage_costs(costs, partition_);
  (void)ledger;
}

void Trainer::build_chunk(ModelChunk& ch, MemoryLedger& ledger, int slots) {
  const auto& t = deck_.train;
  const TensorParallelLayout tp{grid_.shape().tp, grid_.coord().tp, deck_.parallel.sequence_parallel};
  const AdamWConfig adam{float(t.beta1), float(t.beta2), float(t.eps), float(t.weight_decay),
                         weights_, grads_};
  GptModelOptions o;
  o.tp = tp;
  o.tensor_comm = &grid_.tensor();
  o.stage = ch.spec;
  o.activation_slots = slots;
  o.activations = make_activation_policy(t.recompute, t.partition_activations, tp.size, tp.sp(),
                                         deck_.precision.dtype);
  o.weights = weights_;
  o.grads = grads_;
  if (deck_.zero.stage > 0) {
    // Every unit splits into dp equal, vector-aligned slices.
    o.unit_align = std::size_t(grid_.shape().dp) * TensorTable::kAlign;
    ch.zero_table = build_gpt_param_table(deck_.model, tp, o.unit_align, ch.spec);
    ch.zero_plan = std::make_unique<ZeroPlan>(ch.zero_table, grid_.shape().dp, grid_.coord().dp,
                                              std::size_t(deck_.zero.persistence_threshold));
    ch.zero_storage = std::make_unique<ZeroStorage>(deck_.zero.stage, ch.zero_table, *ch.zero_plan,
                                                    backend_, ledger, grid_.data(), weights_, grads_);
    o.storage = ch.zero_storage.get();
  }
  ch.model = std::make_unique<GptModel>(deck_.model, t.micro_batch, backend_, ledger, o);
  ch.model->init_parameters(t.seed);  // 16-bit weights: their rounding
  if (ch.zero_storage) {
    ch.zero_opt = std::make_unique<ZeroOptimizer>(*ch.zero_storage, ch.model->param_table(),
                                                  backend_, ledger, adam);
    if (weights_ != DType::f32) ch.zero_opt->init_masters(ch.model->initial_parameters(t.seed));
  } else {
    ch.dp_comm = std::make_unique<DataParallelComm>(
        grid_.data(), ch.model->grads(),
        plan_grad_buckets(ch.model->param_table(),
                          std::size_t(deck_.parallel.bucket_mb * 1024 * 1024), dtype_size(grads_)));
    if (!gather_mode_ || ch.dp_comm->is_root())
      ch.optimizer = std::make_unique<AdamW>(ch.model->param_table(), backend_, ledger, adam);
    if (ch.optimizer && weights_ != DType::f32)
      ch.optimizer->init_masters(ch.model->initial_parameters(t.seed));
  }
  ch.sends.resize(slots);
  ch.busy.assign(slots, false);
  ch.slot_of.assign(std::max(micro_batches_, 1), -1);
}

void Trainer::refresh_weights_from_masters() {
  if (weights_ == DType::f32) return;
  for (ModelChunk& ch : chunks_) {
    if (ch.zero_opt) ch.zero_opt->refresh_weights();
    else if (ch.optimizer) ch.optimizer->refresh_weights(ch.model->params());
    if (gather_mode_) ch.dp_comm->broadcast_params(ch.model->params());
  }
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
  Communicator* group = grid_.embedding();
  if (!group) return;
  ModelChunk& ch = grid_.coord().pp == 0 ? chunks_.front() : chunks_.back();
  const TensorInfo& wte = ch.model->param_table().at("wte");
  if (ch.zero_storage) {
    const ZeroPlan& plan = *ch.zero_plan;
    const ZeroUnit& u = plan.units()[wte.unit];
    group->all_reduce(ch.zero_storage->owned_grads(wte.unit), plan.slice(u), DType::f32,
                      ReduceOp::sum);
  } else if (ch.optimizer) {
    Arena& g = ch.model->grads();
    group->all_reduce(static_cast<char*>(g.data()) + wte.offset * dtype_size(g.dtype()), wte.numel,
                      g.dtype(), ReduceOp::sum);
  }
}

void Trainer::update(float lr, StepStats& s) {
  ScopedTimer timer(times_.optimizer);
  TraceScope ts(trace_, "optimizer", "optimizer");
  const bool tp_root = grid_.coord().tp == 0;
  const bool zero = deck_.zero.stage > 0;
  double ss = 0;
  bool updates_here = false;
  for (ModelChunk& ch : chunks_) {
    if (ch.zero_opt) ss += ch.zero_opt->grad_sum_squares(tp_root), updates_here = true;
    else if (ch.optimizer) {
      updates_here = true;
      const auto& table = ch.model->param_table();
      for (const TensorInfo& t : table.tensors())
        if (t.primary && (t.split_dim >= 0 || tp_root))
          ss += ch.optimizer->grad_sum_squares(ch.model->grads(), t.offset, t.numel);
    }
  }
  // Shards of the model: owned ZeRO slices over the data group, tensor shards
  // over the tensor group, stages over the pipeline group.
  if (updates_here) {
    if (zero) grid_.data().all_reduce(&ss, 1, DType::f64, ReduceOp::sum);
    if (grid_.tensor().size() > 1) grid_.tensor().all_reduce(&ss, 1, DType::f64, ReduceOp::sum);
    if (grid_.pipeline().size() > 1)
      grid_.pipeline().all_reduce(&ss, 1, DType::f64, ReduceOp::sum);
  }
  // fp16: gradients scaled by the loss scale; a step that overflowed anywhere
  // is skipped everywhere.
  const double loss_scale = scaler_ ? scaler_->scale() : 1.0;
  s.loss_scale = loss_scale;
  s.skipped = scaler_ && agree_overflow();
  if (updates_here) {
    s.grad_norm = std::sqrt(ss) / loss_scale;
    const double clip = deck_.train.grad_clip;
    const bool clipping = clip > 0 && clip / (s.grad_norm + 1e-6) < 1.0;
    // One pass over the gradients both unscales and clips.
    const float coef = float((clipping ? clip / (s.grad_norm + 1e-6) : 1.0) / loss_scale);
    const bool rescale = clipping || loss_scale != 1.0;
    for (ModelChunk& ch : chunks_) {
      if (s.skipped) break;
      if (ch.zero_opt) {
        if (rescale) ch.zero_opt->scale_grads(coef);
        ch.zero_opt->step(lr);
      } else if (ch.optimizer) {
        ch.optimizer->step(ch.model->params(), ch.model->grads(), lr, rescale ? coef : 1.0f);
      }
    }
  }
  if (gather_mode_) {
    ScopedTimer ct(times_.comm);
    for (ModelChunk& ch : chunks_) ch.dp_comm->broadcast_params(ch.model->params());
    grid_.data().broadcast(&s.grad_norm, 1, DType::f64, 0);
  }
  if (scaler_) scaler_->update(s.skipped);
}

bool Trainer::agree_overflow() {
  // inf or NaN in any gradient this rank holds (replicated copies too, which
  // the norm leaves out) makes its sum of squares, in f64, non-finite.
  double local = 0;
  for (ModelChunk& ch : chunks_) {
    if (ch.zero_storage)
      local += backend_.sum_squares(ch.zero_storage->owned_grads_all(), ch.zero_plan->shard_size());
    else if (ch.optimizer)
      local += ch.optimizer->grad_sum_squares(ch.model->grads(), 0, ch.model->grads().numel());
  }
  double bad = std::isfinite(local) ? 0.0 : 1.0;
  grid_.world().all_reduce(&bad, 1, DType::f64, ReduceOp::max);
  return bad > 0;
}

void Trainer::inject_gradient_fault(int step) {
  // TRIDENT_FAULT_INJECT=grad:inf@STEP on a rank: one of its gradients becomes inf.
  if (!fault_armed("grad", "inf", step)) return;
  ModelChunk& ch = chunks_.front();
  const float inf = INFINITY;
  if (ch.zero_storage) return backend_.copy_from_host(ch.zero_storage->owned_grads_all(), &inf, 4);
  // inf in the gradients' own type (f32, bf16 or f16)
  const std::uint16_t inf16 = grads_ == DType::bf16 ? 0x7f80 : 0x7c00;
  backend_.copy_from_host(ch.model->grads().data(), grads_ == DType::f32 ? (const void*)&inf : &inf16,
                          dtype_size(grads_));
}

std::int64_t Trainer::optimizer_steps() const {
  for (const ModelChunk& ch : chunks_) {
    if (ch.zero_opt) return ch.zero_opt->steps_taken();
    if (ch.optimizer) return ch.optimizer->steps_taken();
  }
  return 0;
}

void Trainer::set_optimizer_steps(std::int64_t t) {
  for (ModelChunk& ch : chunks_) {
    if (ch.zero_opt) ch.zero_opt->set_steps_taken(t);
    if (ch.optimizer) ch.optimizer->set_steps_taken(t);
  }
}

double Trainer::evaluate() {
  if (!val_data_) return 0.0;
  ScopedTimer timer(times_.eval);
  const auto& t = deck_.train;
  const int per_rank = t.eval_sequences / grid_.shape().dp;
  double sum = 0;
  // Forward only, one micro-batch at a time through every virtual stage.
  for (int k = 0; k < per_rank; k += t.micro_batch) {
    load(*val_data_, window_of(0, t.eval_sequences, k));
    for (std::size_t c = 0; c < chunks_.size(); ++c) {
      GptModel& m = *chunks_[c].model;
      const std::size_t n = m.boundary_elements();
      const int slot = eval_slot_, mb = -1 - k;  // see PipelineComm::tag
      if (!pcomm_.first_virtual(int(c))) pcomm_.recv_forward(m.input_buffer(slot), n, mb, int(c));
      sum += m.forward(slot, tokens_.data(), targets_.data(), 0.0f);
      if (!pcomm_.last_virtual(int(c))) {
        Request r = pcomm_.send_forward(m.output(slot), n, mb, int(c));
        pcomm_.wait(r);
      }
    }
  }
  if (grid_.pipeline().size() > 1) grid_.pipeline().all_reduce(&sum, 1, DType::f64, ReduceOp::sum);
  grid_.data().all_reduce(&sum, 1, DType::f64, ReduceOp::sum);
  return sum / (double(t.eval_sequences) * deck_.model.seq_len);
}

}  // namespace trident
