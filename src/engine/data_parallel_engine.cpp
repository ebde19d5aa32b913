#include "engine/data_parallel_engine.hpp"

#include <cmath>

namespace trident {

DataParallelEngine::DataParallelEngine(Grid& grid, ComputeBackend& backend, MemoryLedger& ledger,
                                       AdamWConfig adam, bool gather_mode, std::size_t bucket_bytes,
                                       bool post_validation)
    : grid_(grid),
      backend_(backend),
      ledger_(ledger),
      adam_(adam),
      gather_mode_(gather_mode),
      bucket_bytes_(bucket_bytes),
      post_validation_(post_validation) {}

void DataParallelEngine::attach(GptModel& model, std::uint64_t seed) {
  model_ = &model;
  comm_ = std::make_unique<DataParallelComm>(
      grid_.data_context(), model.grads(),
      plan_grad_buckets(model.param_table(), bucket_bytes_, dtype_size(adam_.grads)));
  if (!gather_mode_ || comm_->is_root()) {
    optimizer_ = std::make_unique<AdamW>(model.param_table(), backend_, ledger_, adam_);
    if (adam_.weights != DType::f32)
      model.for_initial_parameters(seed, [&](std::size_t first, const float* v, std::size_t n) {
        optimizer_->init_masters(first, v, n);
      });
  }
  // What step() writes: the weights (on every data rank: gather mode
  // broadcasts them), and where this rank updates, the moments and masters.
  // The gradients are only read.
  if (post_validation_)
    undo_ = StepSnapshot(backend_, ledger_,
                         {&model.params(), optimizer_ ? &optimizer_->first_moment() : nullptr,
                          optimizer_ ? &optimizer_->second_moment() : nullptr,
                          optimizer_ ? optimizer_->masters() : nullptr});
}

void DataParallelEngine::save_step() { undo_.save(steps_taken()); }

bool DataParallelEngine::save_step_part(std::size_t bytes) {
  return undo_.save_part(steps_taken(), bytes);
}

void DataParallelEngine::undo_step() { set_steps_taken(undo_.restore()); }

void DataParallelEngine::begin_step() { model_->grads().zero(); }

GradsReadyFn DataParallelEngine::grads_ready_hook() {
  if (gather_mode_) return nullptr;
  return [this](std::size_t first) { comm_->grads_ready_from(first); };
}

void DataParallelEngine::finish_backward() {
  if (gather_mode_) comm_->reduce_grads_to_root();
  else comm_->finish();
}

GradSpan DataParallelEngine::tied_grads() {
  if (!optimizer_) return {};  // gather mode: only the root holds the summed gradients
  Arena& g = model_->grads();
  const TensorInfo& wte = model_->param_table().at("wte");
  return {static_cast<char*>(g.data()) + wte.offset * dtype_size(g.dtype()), wte.numel, g.dtype()};
}

double DataParallelEngine::grad_sum_squares() {
  // The replicas (data x context) hold the same sums.
  if (!optimizer_ || grid_.coord().replica(grid_.shape()) != 0) return 0.0;
  std::vector<std::pair<std::size_t, std::size_t>> counted;
  for (const TensorInfo& t : model_->param_table().tensors())
    if (counts_copy(t, grid_.coord(), true)) counted.emplace_back(t.offset, t.numel);
  return optimizer_->grad_sum_squares(model_->grads(), counted);
}

bool DataParallelEngine::grads_nonfinite() {
  if (!optimizer_) return false;
  return !std::isfinite(optimizer_->grad_sum_squares(model_->grads(), 0, model_->grads().numel()));
}

void DataParallelEngine::step(float lr, float grad_scale) {
  if (optimizer_) optimizer_->step(model_->params(), model_->grads(), lr, grad_scale, frozen_);
  if (gather_mode_) comm_->broadcast_params(model_->params());
}

void DataParallelEngine::refresh_weights() {
  if (adam_.weights == DType::f32) return;
  if (optimizer_) optimizer_->refresh_weights(model_->params());
  if (gather_mode_) comm_->broadcast_params(model_->params());
}

std::int64_t DataParallelEngine::steps_taken() const {
  return optimizer_ ? optimizer_->steps_taken() : 0;
}

void DataParallelEngine::set_steps_taken(std::int64_t t) {
  if (optimizer_) optimizer_->set_steps_taken(t);
}

TensorSlice DataParallelEngine::state_slice(StateKind kind, const TensorInfo& t,
                                            const GridCoord& c) {
  Arena* arena = kind == StateKind::params ? &model_->params()
                 : !optimizer_              ? nullptr
                 : kind == StateKind::exp_avg    ? &optimizer_->first_moment()
                 : kind == StateKind::exp_avg_sq ? &optimizer_->second_moment()
                                                 : optimizer_->masters();
  if (!arena) return {};
  return whole_shard(t, static_cast<char*>(arena->data()) + t.offset * dtype_size(arena->dtype()),
                     counts_copy(t, c, true));
}

bool DataParallelEngine::replicated_over_data(StateKind kind) const {
  return kind == StateKind::params || !gather_mode_;
}

void DataParallelEngine::poison_gradient() {
  // inf in the gradients' own type (f32, bf16 or f16)
  const float inf = INFINITY;
  const std::uint16_t inf16 = adam_.grads == DType::bf16 ? 0x7f80 : 0x7c00;
  backend_.copy_from_host(model_->grads().data(),
                          adam_.grads == DType::f32 ? (const void*)&inf : &inf16,
                          dtype_size(adam_.grads));
}

bool counts_copy(const TensorInfo& t, const GridCoord& c, bool replicated_over_data) {
  return t.primary && (t.split_dim >= 0 || c.tp == 0) &&
         (!replicated_over_data || (c.dp == 0 && c.cp == 0));
}

}  // namespace trident
