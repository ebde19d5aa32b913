// ZeRO (Rajbhandari et al. 2020) stages 1-3 for one chunk: the chunk's table
// padded so every unit splits into dp equal slices, the plan of which slice
// this data rank owns, the storage the model runs on (parallel/zero), and
// AdamW over the owned slices.
#pragma once
#include "engine/grad_engine.hpp"
#include "parallel/zero/zero_optimizer.hpp"
#include "parallel/zero/zero_plan.hpp"
#include "parallel/zero/zero_storage.hpp"

namespace trident {

class ZeroEngine final : public GradEngine {
 public:
  ZeroEngine(const EngineSetup& s, const UnitLayout& units, AdamWConfig adam);

  ModelStorage* storage() override { return storage_.get(); }
  void attach(GptModel& model, std::uint64_t seed) override;
  void begin_step() override {
    optimizer_->begin_step();
    storage_->begin_step();
  }
  GradsReadyFn grads_ready_hook() override { return nullptr; }  // the storage reduces per unit
  void finish_backward() override { storage_->finish_backward(); }
  GradSpan tied_grads() override;
  double grad_sum_squares() override;
  bool grads_nonfinite() override;
  void step(float lr, float grad_scale) override;
  void freeze(const TensorInfo& t) override;
  void refresh_weights() override { optimizer_->refresh_weights(); }
  bool updates_here() const override { return true; }
  std::int64_t steps_taken() const override { return optimizer_->steps_taken(); }
  void set_steps_taken(std::int64_t t) override { optimizer_->set_steps_taken(t); }
  Arena* masters() override { return optimizer_->masters(); }
  TensorSlice state_slice(StateKind kind, const TensorInfo& t, const GridCoord& c) override;
  bool replicated_over_data(StateKind kind) const override;
  void open_state(StateKind kind) override;
  void close_state(StateKind kind, bool changed) override;
  bool open_state_reserved(StateKind kind) override;
  bool read_state(const void* at, std::size_t bytes, void* out) override;
  bool state_offloaded(StateKind kind) const override {
    return kind == StateKind::params ? storage_->params_offloaded()
                                     : offload_.optimizer != OffloadTarget::none;
  }
  std::string warning() const override {
    const std::string w = optimizer_->home().warning();
    return w.empty() ? storage_->warning() : w;
  }
  void poison_gradient() override;
  std::size_t host_bytes() const override {
    return optimizer_->home().host_state_bytes() + storage_->host_bytes();
  }

  const ZeroPlan& plan() const { return plan_; }
  ZeroStorage& zero_storage() { return *storage_; }

 private:
  static int home_kind(StateKind kind);  // OptimizerHome::Kind of a state kind

  ComputeBackend& backend_;
  MemoryLedger& ledger_;
  Communicator& world_;  // agrees on a swap file's failure
  OffloadSection offload_;
  AdamWConfig adam_;
  bool tp_root_;  // counts the tensors not split over the tensor group
  TensorTable table_;  // padded units; the model builds the same table
  ZeroPlan plan_;
  std::unique_ptr<ZeroStorage> storage_;
  std::unique_ptr<ZeroOptimizer> optimizer_;
  const TensorTable* model_table_ = nullptr;
  float* windows_[3] = {};  // open_state's windows of offloaded state, by home kind
  char* params_window_ = nullptr;  // an offloaded parameter shard while a checkpoint runs
  // An asynchronous checkpoint's stand-in for that window: address space the
  // size of the shard, never touched (PROT_NONE); read_state() maps it back
  // to shard elements.
  struct Reservation {
    char* at = nullptr;
    std::size_t bytes = 0;
    Reservation() = default;
    Reservation(const Reservation&) = delete;
    Reservation& operator=(const Reservation&) = delete;
    ~Reservation();
  } params_reserved_;
};

}  // namespace trident
