#include "train/trainer.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <stdexcept>
#include <thread>

#include "core/fault_inject.hpp"
#include "core/timer.hpp"
#include "model/gpt_params.hpp"
#include "optim/clip.hpp"
#include "optim/lr_schedule.hpp"
#include "parallel/pipeline/schedule_costs.hpp"
#include "train/pipedream_runner.hpp"
#include "train/scheduled_runner.hpp"
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
             places_chunks_in_v(schedule_)),
      weights_(precision_dtype(deck.precision.dtype)),
      grads_(precision_dtype(deck.precision.reduce_dtype)) {
  if (deck.precision.dtype == Precision::fp16) {
    const auto& p = deck.precision;
    scaler_.emplace(LossScalerConfig{p.initial_scale, p.growth_interval, p.hysteresis, p.min_scale});
  }
  // The stage plan (partition -> stage costs -> schedule -> slots -> send
  // pool): make_stage_plan, the one `trident estimate` and `plan` count with.
  plan_ = make_stage_plan(deck, grid.shape(), grid.coord().pp, partition_costs());
  if (grid.shape().cp > 1) {
    ring_ = std::make_unique<RingAttention>(backend, ledger, grid.context(), deck.model.seq_len);
    rows_ = context_token_layout(ring_->chunks(), deck.train.micro_batch);
  }
  chunks_.resize(plan_.chunks.size());
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    const ChunkPlan& planned = plan_.chunks[c];
    chunks_[c].virtual_stage = planned.virtual_stage;
    chunks_[c].spec = planned.spec;
    build_chunk(chunks_[c], ledger, planned.activation_slots, planned.weight_buffers,
                c == 0 ? plan_.send_pool.size : 0);
  }
  make_runner(ledger);
  const std::size_t bt = std::size_t(deck.train.micro_batch) * deck.model.seq_len;
  const std::size_t rows = ring_ ? std::size_t(rows_.rows()) : bt;
  tokens_.resize(rows);
  targets_.resize(rows);
  if (ring_) {
    window_tokens_.resize(bt);
    window_targets_.resize(bt);
  }
}

Trainer::~Trainer() = default;

StageCosts Trainer::partition_costs() {
  // Parameter counts also under uniform: they give the printed prediction.
  if (deck_.parallel.partition == PartitionMethod::profile)
    return profile_stage_costs(deck_, grid_, backend_);
  return parameter_stage_costs(deck_.model);
}

void Trainer::build_chunk(ModelChunk& ch, MemoryLedger& ledger, int slots, int weight_buffers,
                          int send_buffers) {
  const auto& t = deck_.train;
  const TensorParallelLayout tp{grid_.shape().tp, grid_.coord().tp, deck_.parallel.sequence_parallel};
  GptModelOptions o;
  ch.engine = make_grad_engine(EngineSetup{engine_sections(deck_), grid_, backend_, ledger, ch.spec, weights_, grads_},
                               o.units);
  o.tp = tp;
  if (!tensor_group_) tensor_group_ = std::make_unique<TensorComm>(&grid_.tensor(), tp);
  o.tensor_group = tensor_group_.get();
  if (ring_) {
    o.tokens = rows_;
    o.attention = ring_.get();
  }
  o.stage = ch.spec;
  o.table_grads_in_b = tied_table_grads_in_b(schedule_cost_deck(deck_), grid_.shape());
  o.activations = make_activation_policy(t.recompute, t.partition_activations, tp.size, tp.sp(),
                                         deck_.precision.dtype);
  o.weights = weights_;
  o.grads = grads_;
  o.storage = ch.engine->storage();
  o.workspace = &workspace_;  // a rank runs one pass at a time
  ch.model = std::make_unique<GptModel>(deck_.model, t.micro_batch, backend_, ledger, o);
  ch.slots = ActivationSlots(*ch.model, backend_, ledger, slots, weight_buffers, micro_batches_);
  if (send_buffers > 0)
    input_grads_ = Arena(backend_, ledger, MemCategory::activations,
                         ch.model->boundary_elements() * std::size_t(send_buffers));
  ch.model->init_parameters(t.seed);  // 16-bit weights: their rounding
  ch.engine->attach(*ch.model, t.seed);
}

float* Trainer::input_grad_buffer(int k) {
  const std::size_t n = chunks_.front().model->boundary_elements();
  if (k < 0 || (std::size_t(k) + 1) * n > input_grads_.numel())
    throw std::logic_error(fmt::format("send buffer {} is not in this rank's pool of {}", k,
                                       input_grads_.numel() / n));
  return input_grads_.f32() + std::size_t(k) * n;
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

void Trainer::load_micro_batch(const TokenDataset& data, std::uint64_t first_window) {
  ScopedTimer t(times_.data);
  const int T = deck_.model.seq_len, B = deck_.train.micro_batch;
  std::int32_t* tokens = ring_ ? window_tokens_.data() : tokens_.data();
  std::int32_t* targets = ring_ ? window_targets_.data() : targets_.data();
  for (int i = 0; i < B; ++i)
    data.read_window(first_window + i, tokens + std::size_t(i) * T, targets + std::size_t(i) * T);
  if (!ring_) return;
  take_layout_rows(rows_, tokens, tokens_.data());  // this context rank's chunks
  take_layout_rows(rows_, targets, targets_.data());
}

StepContext Trainer::step_context() {
  auto load_train = [this](std::uint64_t batch, int i) {
    load_micro_batch(train_data_, window_of(batch, deck_.train.batch, i * deck_.train.micro_batch));
  };
  return StepContext{deck_, grid_, backend_, pcomm_, chunks_, micro_batches_, load_train,
                     tokens_, targets_, [this](int k) { return input_grad_buffer(k); },
                     times_, trace_, loss_scaler(), before_update_};
}

void Trainer::make_runner(MemoryLedger& ledger) {
  if (schedule_ == ScheduleKind::pipedream) {
    auto pipedream = std::make_unique<PipedreamRunner>(step_context(), ledger);
    pipedream_ = pipedream.get();
    runner_ = std::move(pipedream);
    return;
  }
  runner_ = std::make_unique<ScheduledRunner>(step_context(), plan_.actions, plan_.send_pool,
                                              places_chunks_in_v(schedule_), ledger);
}

StepStats Trainer::step(int step) {
  // TRIDENT_FAULT_INJECT=step:stall@N on a rank: it stops answering, as a stuck node would.
  if (fault_armed("step", "stall", step)) std::this_thread::sleep_for(std::chrono::hours(1));
  const double t0 = now_seconds();
  const auto& t = deck_.train;
  StepStats s;
  s.step = step;
  s.lr = lr_at(step, t.steps, t.warmup, t.lr, t.min_lr);
  runner_->step(s);
  if (ring_) times_.ring_compute = ring_->times().compute, times_.ring_exposed = ring_->times().exposed;
  s.seconds = now_seconds() - t0;
  return s;
}

void Trainer::settle() { runner_->settle(); }

std::vector<StepStats> Trainer::take_settled() { return runner_->take_settled(); }

void Trainer::stop_stream(int done) { runner_->stop_stream(done); }

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
  settle();  // post-validation: the weights the last step leaves
  ScopedTimer timer(times_.eval);
  const auto& t = deck_.train;
  const int per_rank = t.eval_sequences / grid_.shape().dp;
  double sum = 0;
  // Forward only, one micro-batch at a time through every virtual stage. Its
  // sends are waited for once all of its chunks have run: in a V the turn at
  // stage p - 1 is a message this rank receives itself, in its next chunk.
  std::vector<Request> sends;
  for (int k = 0; k < per_rank; k += t.micro_batch) {
    load_micro_batch(*val_data_, window_of(0, t.eval_sequences, k));
    for (std::size_t c = 0; c < chunks_.size(); ++c) {
      GptModel& m = *chunks_[c].model;
      const std::size_t n = m.boundary_elements();
      const int slot = runner_->eval_slot(), mb = -1 - k;  // see PipelineComm::tag
      const MicroBatchActs acts = chunks_[c].slots.acts(slot);
      if (!pcomm_.first_virtual(int(c))) pcomm_.recv_forward(m.input_buffer(acts), n, mb, int(c));
      sum += m.forward(acts, tokens_.data(), targets_.data(), 0.0f);
      if (!pcomm_.last_virtual(int(c)))
        sends.push_back(pcomm_.send_forward(m.output(acts), n, mb, int(c)));
    }
    for (Request& r : sends) pcomm_.wait(r);
    sends.clear();
  }
  if (grid_.pipeline().size() > 1) grid_.pipeline().all_reduce(&sum, 1, DType::f64, ReduceOp::sum);
  grid_.data_context().all_reduce(&sum, 1, DType::f64, ReduceOp::sum);
  return sum / (double(t.eval_sequences) * deck_.model.seq_len);
}

}  // namespace trident
