#include "train/trainer.hpp"

#include "core/timer.hpp"

#include <cmath>
#include "optim/clip.hpp"
#include "optim/schedule.hpp"

namespace trident {

Trainer::Trainer(const Deck& deck, Grid& grid, ComputeBackend& backend, MemoryLedger& ledger,
                 const TokenDataset& train_data, const TokenDataset* val_data)
    : deck_(deck),
      grid_(grid),
      backend_(backend),
      train_data_(train_data),
      val_data_(val_data),
      gather_mode_(deck.parallel.dp_mode == "gather") {
  const auto& t = deck.train;
  const TensorParallelLayout tp{grid.shape().tp, grid.coord().tp, deck.parallel.sequence_parallel};
  const AdamWConfig adam{float(t.beta1), float(t.beta2), float(t.eps), float(t.weight_decay)};
  std::size_t unit_align = 1;
  if (deck.zero.stage > 0) {
    // Every unit splits into dp equal, vector-aligned slices.
    unit_align = std::size_t(grid.shape().dp) * TensorTable::kAlign;
    zero_table_ = build_gpt_param_table(deck.model, tp, unit_align);
    zero_plan_ = std::make_unique<ZeroPlan>(zero_table_, grid.shape().dp, grid.coord().dp,
                                            std::size_t(deck.zero.persistence_threshold));
    zero_storage_ = std::make_unique<ZeroStorage>(deck.zero.stage, zero_table_, *zero_plan_,
                                                  backend, ledger, grid.data());
  }
  model_ = std::make_unique<GptModel>(deck.model, t.micro_batch, backend, ledger, tp,
                                      &grid.tensor(), unit_align, zero_storage_.get());
  model_->init_parameters(t.seed);
  if (zero_storage_) {
    zero_opt_ = std::make_unique<ZeroOptimizer>(*zero_storage_, model_->param_table(), backend,
                                                ledger, adam);
  } else {
    dp_comm_ = std::make_unique<DataParallelComm>(
        grid.data(), model_->grads(),
        plan_grad_buckets(model_->param_table(),
                          std::size_t(deck.parallel.bucket_mb * 1024 * 1024)));
    if (!gather_mode_ || dp_comm_->is_root())
      optimizer_ = std::make_unique<AdamW>(model_->param_table(), backend, ledger, adam);
  }
  const std::size_t bt = std::size_t(t.micro_batch) * deck.model.seq_len;
  tokens_.resize(bt);
  targets_.resize(bt);
}

std::uint64_t Trainer::window_of(std::uint64_t batch_index, int sequences, int k) const {
  // Global batch b holds windows [b*S, (b+1)*S); data rank r takes a contiguous
  // S/dp of them, so any dp sees the same global batch.
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

StepStats Trainer::step(int step) {
  const double t0 = now_seconds();
  const auto& t = deck_.train;
  const int dp = grid_.shape().dp, mb = t.micro_batch;
  const int accum = t.batch / (dp * mb);
  // Each token's loss enters the global mean with weight 1/(batch * seq_len);
  // summing over the data group then gives the mean over the global batch.
  const float dloss = 1.0f / float(std::int64_t(t.batch) * deck_.model.seq_len);
  StepStats s;
  s.step = step;
  s.lr = lr_at(step, t.steps, t.warmup, t.lr, t.min_lr);
  if (zero_storage_) zero_storage_->begin_step();
  else model_->grads().zero();
  double loss_sum = 0;
  for (int k = 0; k < accum; ++k) {
    load(train_data_, window_of(std::uint64_t(step), t.batch, k * mb));
    {
      ScopedTimer timer(times_.forward);
      loss_sum += model_->forward(tokens_.data(), targets_.data(), dloss);
    }
    // Gradients of earlier micro-batches only accumulate (no communication);
    // the last one reduces each bucket as soon as backward completes it.
    const bool last = k == accum - 1;
    ScopedTimer timer(times_.backward);
    if (last && dp_comm_ && !gather_mode_)
      model_->backward([this](std::size_t off) { dp_comm_->grads_ready_from(off); }, last);
    else
      model_->backward(nullptr, last);
  }
  {
    ScopedTimer timer(times_.comm);
    if (zero_storage_) zero_storage_->finish_backward();
    else if (gather_mode_) dp_comm_->reduce_grads_to_root();
    else dp_comm_->finish();
    grid_.data().all_reduce(&loss_sum, 1, DType::f64, ReduceOp::sum);
  }
  s.loss = loss_sum / (double(t.batch) * deck_.model.seq_len);
  if (zero_opt_) update_zero(float(s.lr), s);
  else update(float(s.lr), s);
  {
    ScopedTimer timer(times_.optimizer);
    // The step ends when an asynchronous device has finished it. (Backward is
    // not synchronised: the host must stay free to drive bucket reductions.)
    backend_.synchronize();
  }
  s.seconds = now_seconds() - t0;
  return s;
}

void Trainer::update(float lr, StepStats& s) {
  const auto& t = deck_.train;
  if (optimizer_) {
    ScopedTimer timer(times_.optimizer);
    // Replicas hold the same reduced gradients, so the norm needs no data-group
    // reduction; the tensor group splits the model, so its shards are summed.
    s.grad_norm = global_grad_norm(backend_, model_->grads(), model_->param_table(),
                                   grid_.coord().tp == 0, {&grid_.tensor()});
    clip_gradients(backend_, model_->grads(), s.grad_norm, t.grad_clip);
    optimizer_->step(model_->params(), model_->grads(), lr);
  }
  if (gather_mode_) {
    ScopedTimer timer(times_.comm);
    dp_comm_->broadcast_params(model_->params());
    grid_.data().broadcast(&s.grad_norm, 1, DType::f64, 0);
  }
}

void Trainer::update_zero(float lr, StepStats& s) {
  ScopedTimer timer(times_.optimizer);
  // Owned slices partition the model over the data group, and tensor shards
  // over the tensor group: the global norm sums over both.
  double ss = zero_opt_->grad_sum_squares(grid_.coord().tp == 0);
  grid_.data().all_reduce(&ss, 1, DType::f64, ReduceOp::sum);
  if (grid_.tensor().size() > 1) grid_.tensor().all_reduce(&ss, 1, DType::f64, ReduceOp::sum);
  s.grad_norm = std::sqrt(ss);
  const double clip = deck_.train.grad_clip;
  if (clip > 0 && clip / (s.grad_norm + 1e-6) < 1.0)
    zero_opt_->scale_grads(float(clip / (s.grad_norm + 1e-6)));
  zero_opt_->step(lr);
}

double Trainer::evaluate() {
  if (!val_data_) return 0.0;
  ScopedTimer timer(times_.eval);
  const auto& t = deck_.train;
  const int per_rank = t.eval_sequences / grid_.shape().dp;
  double sum = 0;
  for (int k = 0; k < per_rank; k += t.micro_batch) {
    load(*val_data_, window_of(0, t.eval_sequences, k));
    sum += model_->forward(tokens_.data(), targets_.data(), 0.0f);
  }
  grid_.data().all_reduce(&sum, 1, DType::f64, ReduceOp::sum);
  return sum / (double(t.eval_sequences) * deck_.model.seq_len);
}

}  // namespace trident
