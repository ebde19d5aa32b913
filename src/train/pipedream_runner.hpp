// The asynchronous pipedream schedule (PipeDream, Narayanan et al. 2019) on
// top of a trainer's single chunk and its engine: a continuous 1F1B stream
// with weight stashing and an update after every micro-batch's backward.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "parallel/pipeline/weight_stash.hpp"
#include "train/step_runner.hpp"
#include "train/trainer.hpp"

namespace trident {

// Tests: did each backward see the weights its forward saw?
struct WeightAudit {
  int checked = 0, mismatched = 0;
  std::map<int, std::uint64_t> at_forward;  // micro-batch -> checksum, until its backward
};

class PipedreamRunner final : public StepRunner {
 public:
  PipedreamRunner(StepContext ctx, MemoryLedger& ledger);
  void step(StepStats& s) override;
  // A run stopping before train.steps (a signal), after `done` steps: take
  // the forwards sent ahead so every send completes.
  void stop_stream(int done) override;
  // The activation slot evaluation may use between steps: the one no
  // micro-batch in flight occupies.
  int eval_slot() const override { return eval_slot_; }
  WeightStash& stash() { return *stash_; }
  // Tests: checksum the weights at every forward and backward.
  void audit_weights(bool on) { audit_on_ = on; }
  const WeightAudit& weight_audit() const { return audit_; }

 private:
  double forward(int g, float dloss, bool warm_up);  // its loss sum
  double backward(int g, float lr);                  // the stage's gradient sum of squares
  void audit(int g, bool forward);
  void pass_head_grad(int g);
  void refresh_head();

  StepContext ctx_;
  ModelChunk& chunk_;
  std::unique_ptr<WeightStash> stash_;
  // With a tied embedding: the last stage's head gradients on their way to
  // stage 0 (one per micro-batch stage 0 may not have taken yet), and stage
  // 0's landing buffer.
  std::vector<Arena> head_grads_out_;
  std::vector<Request> head_sends_;
  Arena head_grad_in_;
  const TensorInfo* wte_ = nullptr;  // the tied embedding, where the ends share it
  bool stream_started_ = false;  // warmed up (the stream is never flushed)
  double update_seconds_ = 0;    // this step's updates, inside the stream
  int eval_slot_ = 0;
  bool audit_on_ = false;
  WeightAudit audit_;
};

}  // namespace trident
