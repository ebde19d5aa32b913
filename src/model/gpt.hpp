// The GPT decoder on one tensor rank: parameters and gradients in flat arenas
// described by one tensor table (this rank's shards), activations of one
// micro-batch in a third arena. With one tensor rank it is the serial model.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compute/backend.hpp"
#include "memory/arena.hpp"
#include "memory/ledger.hpp"
#include "memory/tensor_table.hpp"
#include "model/gpt_config.hpp"
#include "model/model_storage.hpp"
#include "parallel/tensor/tensor_comm.hpp"
#include "parallel/tensor/tensor_layout.hpp"

namespace trident {

// Called during backward with an arena offset: every gradient at or after it
// is final for this step (data parallelism starts its buckets there).
using GradsReadyFn = std::function<void(std::size_t first_ready_offset)>;

class GptModel {
 public:
  // `storage` (not owned) replaces the default full arenas, e.g. with ZeRO's;
  // it must have been built for build_gpt_param_table(config, tp, unit_align).
  GptModel(const GptConfig& config, int micro_batch, ComputeBackend& backend,
           MemoryLedger& ledger, const TensorParallelLayout& tp = {},
           Communicator* tensor_comm = nullptr, std::size_t unit_align = 1,
           ModelStorage* storage = nullptr);

  const GptConfig& config() const { return cfg_; }
  const TensorParallelLayout& tensor_layout() const { return tp_; }
  int micro_batch() const { return B_; }
  const TensorTable& param_table() const { return table_; }
  // The default full arenas (throws std::logic_error under another storage).
  Arena& params() { return full().params(); }
  Arena& grads() { return full().grads(); }
  const Arena& params() const { return const_cast<GptModel*>(this)->full().params(); }
  const Arena& grads() const { return const_cast<GptModel*>(this)->full().grads(); }
  ModelStorage& storage() { return *storage_; }
  // Unit indices (see ModelStorage).
  int embedding_unit() const { return 0; }
  int block_unit(int l) const { return 1 + l; }
  int head_unit() const { return 1 + cfg_.layers; }
  ComputeBackend& backend() { return backend_; }

  void init_parameters(std::uint64_t seed);
  // The activation arena's layout for one micro-batch (the estimator sizes it too).
  static TensorTable activation_table(const GptConfig& c, int micro_batch,
                                      const TensorParallelLayout& tp);

  // Forward over one micro-batch of B x T tokens (host arrays, all tokens on
  // every tensor rank). Returns the sum of the per-token losses. With dloss != 0
  // it also leaves dloss * dLoss/dlogits in place of the logits for backward().
  double forward(const std::int32_t* tokens, const std::int32_t* targets, float dloss);
  // Adds this micro-batch's gradients into grads(). `finalize` marks the last
  // micro-batch of a step: gradients that are partial over the tensor group
  // (norms under sequence parallelism) are summed then, and `ready` (may be
  // empty) is told as ranges of gradients become final.
  void backward(const GradsReadyFn& ready, bool finalize = true);

 private:
  struct Block {  // activation pointers of one layer
    float *ln1, *ln1_mean, *ln1_rstd, *ln1_full, *qkv, *atty, *att, *res2, *ln2, *ln2_mean,
        *ln2_rstd, *ln2_full, *fch, *fch_gelu, *res3;
  };
  Block block(int l);
  float* act(const std::string& name) { return acts_.f32(act_table_.at(name)); }
  float* P(const std::string& n) { return storage_->param(table_.at(n)); }
  float* G(const std::string& n) { return storage_->grad(table_.at(n)); }
  FullStorage& full();
  // Row-parallel output (partial sums over the group, all tokens) -> this
  // rank's tokens, summed: all-reduce, or reduce-scatter with SP.
  const float* reduce_row_parallel(float* full);
  // Column-parallel input gradient (partial sums) -> this rank's tokens.
  const float* reduce_input_grad(float* full);
  // This rank's tokens -> all tokens (identity without SP).
  const float* gather(const float* local, float* full);
  void sum_partial_grads(const std::vector<std::string>& names);

  GptConfig cfg_;
  int B_;
  ComputeBackend& backend_;
  TensorParallelLayout tp_;
  TensorComm tcomm_;
  TensorTable table_;
  std::unique_ptr<FullStorage> own_storage_;
  ModelStorage* storage_;
  TensorTable act_table_;
  Arena acts_;
  Arena io_;  // tokens and targets (int32) on the device
  std::vector<float> host_losses_;
  int BT_, BTl_, first_token_;  // all tokens, this rank's tokens, its first
};

}  // namespace trident
