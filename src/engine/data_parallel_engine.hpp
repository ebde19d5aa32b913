// Plain data parallelism: every data rank holds the whole chunk (parameters,
// gradients). allreduce mode sums gradient buckets over the data group while
// backward runs and every rank runs AdamW on identical gradients; gather mode
// (the single-master baseline) reduces the gradients to data rank 0, which
// alone holds optimizer state and updates, then broadcasts the parameters.
#pragma once
#include "engine/grad_engine.hpp"
#include "optim/step_snapshot.hpp"
#include "parallel/data/data_comm.hpp"

namespace trident {

class DataParallelEngine final : public GradEngine {
 public:
  DataParallelEngine(Grid& grid, ComputeBackend& backend, MemoryLedger& ledger, AdamWConfig adam,
                     bool gather_mode, std::size_t bucket_bytes, bool post_validation = false);

  ModelStorage* storage() override { return nullptr; }
  void attach(GptModel& model, std::uint64_t seed) override;
  void begin_step() override;
  GradsReadyFn grads_ready_hook() override;
  void finish_backward() override;
  GradSpan tied_grads() override;
  double grad_sum_squares() override;
  bool grads_nonfinite() override;
  void step(float lr, float grad_scale) override;
  void save_step() override;
  void undo_step() override;
  bool save_step_part(std::size_t bytes) override;
  void drop_partial_save() override { undo_.drop_part(); }
  std::size_t undo_bytes() const override { return undo_.bytes(); }
  void freeze(const TensorInfo& t) override { frozen_ = &t; }
  void refresh_weights() override;
  bool updates_here() const override { return optimizer_ != nullptr; }
  std::int64_t steps_taken() const override;
  void set_steps_taken(std::int64_t t) override;
  Arena* masters() override { return optimizer_ ? optimizer_->masters() : nullptr; }
  TensorSlice state_slice(StateKind kind, const TensorInfo& t, const GridCoord& c) override;
  bool replicated_over_data(StateKind kind) const override;
  void poison_gradient() override;

 private:
  Grid& grid_;
  ComputeBackend& backend_;
  MemoryLedger& ledger_;
  AdamWConfig adam_;
  bool gather_mode_;
  std::size_t bucket_bytes_;
  bool post_validation_;
  GptModel* model_ = nullptr;
  std::unique_ptr<DataParallelComm> comm_;
  std::unique_ptr<AdamW> optimizer_;  // absent off the root in gather mode
  const TensorInfo* frozen_ = nullptr;
  StepSnapshot undo_;  // post-validation: what step() writes, as it was
};

}  // namespace trident
