// One training step and evaluation over this rank's part of the model: its
// model chunks (one per virtual pipeline stage it runs; one without
// interleaving), each with its storage, optimizer and data-parallel reduction.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "compute/backend.hpp"
#include "engine/grad_engine.hpp"
#include "grid/grid.hpp"
#include "io/deck.hpp"
#include "io/token_shard.hpp"
#include "model/gpt.hpp"
#include "optim/loss_scaler.hpp"
#include "parallel/pipeline/partition.hpp"
#include "parallel/pipeline/pipeline_comm.hpp"
#include "parallel/pipeline/schedule.hpp"
#include "parallel/context/ring_attention.hpp"
#include "parallel/pipeline/stage_plan.hpp"
#include "parallel/tensor/tensor_comm.hpp"
#include "train/activation_slots.hpp"
#include "train/step_runner.hpp"
#include "train/trace.hpp"

namespace trident {

// One model chunk: a virtual pipeline stage's blocks on this rank.
struct ModelChunk {
  int virtual_stage = 0;
  StageSpec spec;
  std::unique_ptr<GradEngine> engine;  // before the model, which may run on its storage
  std::unique_ptr<GptModel> model;
  ActivationSlots slots;       // its micro-batches' activations and W buffers
  int weight_passes_left = 0;  // in this step's schedule (B+W or W)
};

class PipedreamRunner;

class Trainer {
 public:
  Trainer(const Deck& deck, Grid& grid, ComputeBackend& backend, MemoryLedger& ledger,
          const TokenDataset& train_data, const TokenDataset* val_data,
          TraceRecorder* trace = nullptr);

  StepStats step(int step);
  // parallel.post_validation: step() returns before the step's global checks
  // (its stats hold step, lr and seconds only); the next step settles it, or
  // settle() (blocking) does, and take_settled() hands over the settled
  // steps' stats in order. Else step() returns the whole stats.
  bool defers_stats() const { return runner_->defers_stats(); }
  void settle();
  std::vector<StepStats> take_settled();
  // This rank's time from the first step's end to the last settled step's,
  // and its own work outside the passes in it.
  StepWall step_wall() const { return runner_->step_wall(); }
  double evaluate();  // mean validation loss over train.eval_sequences (collective)
  // A run stopping before train.steps (a signal), after `done` steps: pipedream
  // takes the forwards sent ahead so every send completes. Others: nothing.
  void stop_stream(int done);

  ~Trainer();

  // The first (usually only) chunk's model and engine.
  GptModel& model() { return *chunks_.front().model; }
  GradEngine& engine() { return *chunks_.front().engine; }
  std::vector<ModelChunk>& chunks() { return chunks_; }
  // What this rank runs and allocates, as `trident estimate` counts it.
  const StagePlan& plan() const { return plan_; }
  const Partition& partition() const { return plan_.partition; }
  const std::vector<double>& predicted_stage_costs() const { return plan_.stage_costs; }
  ScheduleKind schedule() const { return schedule_; }
  // Zero bubble: the idle share of this step's lists replayed with the costs
  // they were built from (FLOPs), where the theory uses unit costs; else -1.
  double list_bubble() const { return plan_.list_bubble; }
  ComputeBackend& backend() { return backend_; }
  int micro_batches() const { return micro_batches_; }
  // Optimizer steps taken (the same on every rank that updates; 0 where none
  // does, as off the root in gather mode), and setting it on resume.
  std::int64_t optimizer_steps() const;
  void set_optimizer_steps(std::int64_t t);
  const PhaseTimes& times() const { return times_; }
  PipedreamRunner* pipedream() { return pipedream_; }  // schedule "pipedream" only
  // parallel.post_validation: this rank's steps taken ahead, undone, held.
  PostValidationCounts post_validation() const { return runner_->post_validation(); }
  // The bubble this step's lists leave under the passes' measured costs, over
  // the steps after the first (collective over the world); -1: not measured.
  // steady: over steps back to back (StepRunner::measured_floor).
  double measured_floor(bool steady = false) const {
    return runner_->measured_floor(grid_.world(), plan_, steady);
  }
  DType weight_dtype() const { return weights_; }
  LossScaler* loss_scaler() { return scaler_ ? &*scaler_ : nullptr; }  // fp16 only
  // With 16-bit weights: the weights become the rounding of the f32 masters
  // (after a checkpoint gave the masters).
  void refresh_weights_from_masters();
  std::int64_t tokens_per_step() const {
    return std::int64_t(deck_.train.batch) * deck_.model.seq_len;
  }
  // Called just before each optimizer step changes the parameters and the
  // optimizer's state: an asynchronous checkpoint still reading them there
  // finishes reading (or copies the rest) first.
  void set_before_update(std::function<void()> f) { before_update_ = std::move(f); }
  // Window index of sequence `k` of this rank's share of global batch `batch_index`.
  std::uint64_t window_of(std::uint64_t batch_index, int sequences, int k) const;

 private:
  // send_buffers: the rank's pool of input-gradient send buffers, allocated
  // with its first chunk.
  void build_chunk(ModelChunk& c, MemoryLedger& ledger, int slots, int weight_buffers,
                   int send_buffers);
  StageCosts partition_costs();  // what the deck's partitioner balances
  void load_micro_batch(const TokenDataset& data, std::uint64_t first_window);
  float* input_grad_buffer(int k);  // send buffer k of the pool
  StepContext step_context();       // what the step runner reaches of this trainer
  void make_runner(MemoryLedger& ledger);

  const Deck& deck_;
  Grid& grid_;
  ComputeBackend& backend_;
  const TokenDataset& train_data_;
  const TokenDataset* val_data_;
  TraceRecorder* trace_;
  ScheduleKind schedule_;
  int micro_batches_;
  StagePlan plan_;  // partition, actions, slots, W buffers, send pool
  Arena input_grads_;                      // the send buffers, boundary_elements() floats each
  PipelineComm pcomm_;
  ModelWorkspace workspace_;  // the chunks' shared working buffer and scratch
  std::unique_ptr<TensorComm> tensor_group_;  // the chunks' TP/SP boundary operations
  std::vector<ModelChunk> chunks_;
  // Context parallelism (cp > 1): attention as a ring over the context
  // group, the rank's rows of each sequence, and the whole windows they are
  // taken from.
  std::unique_ptr<RingAttention> ring_;
  TokenLayout rows_;
  std::vector<std::int32_t> window_tokens_, window_targets_;
  std::vector<std::int32_t> tokens_, targets_;  // the model's rows of the micro-batch
  PhaseTimes times_;
  DType weights_ = DType::f32;
  DType grads_ = DType::f32;  // precision.reduce_dtype: how gradients are stored and reduced
  std::optional<LossScaler> scaler_;
  std::unique_ptr<StepRunner> runner_;  // scheduled, or PipeDream's
  PipedreamRunner* pipedream_ = nullptr;  // runner_, where it is PipeDream's
  std::function<void()> before_update_;
};

}  // namespace trident
