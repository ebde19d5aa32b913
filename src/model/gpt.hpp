// The GPT decoder: parameters and gradients in flat arenas described by one
// tensor table, activations of one micro-batch in a third arena.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "compute/backend.hpp"
#include "memory/arena.hpp"
#include "memory/ledger.hpp"
#include "memory/tensor_table.hpp"
#include "model/gpt_config.hpp"

namespace trident {

// Called during backward with an arena offset: every gradient at or after it
// is final for this micro-batch (data parallelism starts its buckets there).
using GradsReadyFn = std::function<void(std::size_t first_ready_offset)>;

class GptModel {
 public:
  GptModel(const GptConfig& config, int micro_batch, ComputeBackend& backend,
           MemoryLedger& ledger);

  const GptConfig& config() const { return cfg_; }
  int micro_batch() const { return B_; }
  const TensorTable& param_table() const { return table_; }
  Arena& params() { return params_; }
  Arena& grads() { return grads_; }
  const Arena& params() const { return params_; }
  const Arena& grads() const { return grads_; }
  ComputeBackend& backend() { return backend_; }

  void init_parameters(std::uint64_t seed);

  // Forward over one micro-batch of B x T tokens (host arrays). Returns the sum
  // of the per-token losses. With dloss != 0 it also leaves
  // dloss * dLoss/dlogits in place of the logits for backward().
  double forward(const std::int32_t* tokens, const std::int32_t* targets, float dloss);
  // Adds this micro-batch's gradients into grads(); calls `ready` as ranges of
  // gradients become final (pass nullptr when no one is waiting).
  void backward(const GradsReadyFn& ready);

 private:
  struct Block;  // activation pointers of one layer
  Block block(int l);
  float* act(const char* name) { return acts_.f32(act_table_.at(name)); }

  GptConfig cfg_;
  int B_;
  ComputeBackend& backend_;
  TensorTable table_;
  Arena params_, grads_;
  TensorTable act_table_;
  Arena acts_;
  Arena io_;  // tokens and targets (int32) on the device
  std::vector<float> host_losses_;
};

}  // namespace trident
