// The GPT decoder, or the part of it one pipeline stage runs, on one tensor
// rank: parameters and gradients through a storage (flat arenas described by
// one tensor table of this rank's shards); each pass over a micro-batch into
// activation storage its caller hands it (micro_batch.hpp), with a working
// buffer and scratch of its own or shared (model_workspace.hpp). With one
// tensor rank and one stage it is the serial model.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "compute/bf16_operands.hpp"
#include "memory/arena.hpp"
#include "memory/ledger.hpp"
#include "memory/tensor_table.hpp"
#include "model/block_acts.hpp"
#include "model/block_math.hpp"
#include "model/gpt_config.hpp"
#include "model/gpt_handles.hpp"
#include "model/gpt_options.hpp"  // and the types of what the model is given
#include "model/gpt_weight_inputs.hpp"
#include "model/micro_batch.hpp"

namespace trident {

// Called during backward with an arena offset: every gradient at or after it
// is final for this step (data parallelism starts its buckets there).
using GradsReadyFn = std::function<void(std::size_t first_ready_offset)>;

class GptModel {
 public:
  GptModel(const GptConfig& config, int micro_batch, ComputeBackend& backend,
           MemoryLedger& ledger, const GptModelOptions& options = {});

  const GptConfig& config() const { return cfg_; }
  const TensorParallelLayout& tensor_layout() const { return tp_; }
  const StageSpec& stage() const { return stage_; }
  int micro_batch() const { return B_; }
  const TokenLayout& tokens() const { return tokens_; }
  const TensorTable& param_table() const { return table_; }
  // The default full arenas (throws std::logic_error under another storage).
  Arena& params() { return full().params(); }
  Arena& grads() { return full().grads(); }
  const Arena& params() const { return const_cast<GptModel*>(this)->full().params(); }
  const Arena& grads() const { return const_cast<GptModel*>(this)->full().grads(); }
  ModelStorage& storage() { return *storage_; }

  void init_parameters(std::uint64_t seed);
  // The f32 values init_parameters stores (16-bit storage keeps their
  // rounding; the optimizer's masters take them as they are), table layout,
  // handed to f(first element, values, count) a bounded piece at a time.
  using ValuesFn = std::function<void(std::size_t, const float*, std::size_t)>;
  void for_initial_parameters(std::uint64_t seed, const ValuesFn& f) const;
  // The layouts of the saved activations of one micro-batch (f32, and those
  // stored in 16 bits), of the one-block working buffer and of the shared
  // scratch (the estimator sizes them too).
  static TensorTable saved_activation_table(const GptConfig& c, const TokenLayout& tokens,
                                            const TensorParallelLayout& tp, const StageSpec& st,
                                            const ActivationPolicy& policy = {});
  static TensorTable saved_16bit_table(const GptConfig& c, const TokenLayout& tokens,
                                       const TensorParallelLayout& tp, const StageSpec& st,
                                       const ActivationPolicy& policy);
  static TensorTable work_table(const GptConfig& c, const TokenLayout& tokens,
                                const TensorParallelLayout& tp, const ActivationPolicy& policy);
  static TensorTable scratch_table(const GptConfig& c, const TokenLayout& tokens,
                                   const TensorParallelLayout& tp,
                                   const ActivationPolicy& policy);
  // What B keeps for W per micro-batch: the output gradient of every linear
  // of the stage and the embeddings' (B adds the norms' weight gradients
  // itself), B to W; and
  // where (gpt_weight_inputs.cpp): weight_inputs holds only what the saved
  // activations' dead room cannot.
  static TensorTable weight_input_table(const GptConfig& c, const TokenLayout& tokens,
                                        const TensorParallelLayout& tp, const StageSpec& st);
  static WeightInputLayout weight_input_layout(const GptConfig& c, const TokenLayout& tokens,
                                               const TensorParallelLayout& tp,
                                               const StageSpec& st, const ActivationPolicy& policy);
  const ActivationPolicy& activation_policy() const { return policy_; }
  // What MicroBatchActs points to, for this model.
  MicroBatchSizes micro_batch_sizes() const;

  // Forward over one micro-batch's rows (tokens(): host arrays of
  // tokens().rows() ids, the same on every tensor rank) into `acts`. A stage without the embeddings reads its
  // input from input_buffer(acts). Returns the sum of the per-token losses on
  // the stage with the head (0 elsewhere); with dloss != 0 the head also
  // leaves dloss * dLoss/dlogits for backward().
  double forward(const MicroBatchActs& acts, const std::int32_t* tokens,
                 const std::int32_t* targets, float dloss);
  // Adds the micro-batch's gradients into the storage. A stage without the
  // head reads dLoss/d(output) from output_grad_buffer(); one without the
  // embeddings writes dLoss/d(input) to input_grad (boundary_elements()
  // floats). `finalize` marks this stage's last micro-batch of the step:
  // gradients partial over the tensor group are summed then, and `ready` (may
  // be empty) is told as ranges of gradients become final.
  void backward(const MicroBatchActs& acts, const GradsReadyFn& ready, bool finalize = true,
                float* input_grad = nullptr);
  // The same, split in two (Qi et al. 2024, section 2): B writes input_grad
  // and no weight gradient, keeping what W needs in acts.weight_inputs and
  // over saved activations only B reads (after B, `acts` no longer holds what
  // forward saved); W, any time later and before `acts` is reused, adds the
  // weight gradients; `ready` and `finalize` as for backward().
  void backward_input(const MicroBatchActs& acts, float* input_grad = nullptr);
  void backward_weights(const MicroBatchActs& acts, const GradsReadyFn& ready, bool finalize);

  // Pipeline boundaries: this rank's tokens x d_model floats each.
  std::size_t boundary_elements() const { return std::size_t(local_tokens_) * cfg_.d_model; }
  float* input_buffer(const MicroBatchActs& acts) { return act(acts, ends_.encoded); }
  const float* output(const MicroBatchActs& acts);  // after forward
  float* output_grad_buffer() { return scratch(scratch_handles_.d_res); }

 private:
  using Block = BlockActs;
  // A block's activations: in `acts` where saved, else in the working buffer.
  Block block(const MicroBatchActs& acts, int l);
  float* home(const MicroBatchActs& acts, const ActHome& at);
  // Null for BlockHandles::none.
  std::uint16_t* bits_home(const MicroBatchActs& acts, std::size_t offset);
  float* act(const MicroBatchActs& acts, const TensorInfo* saved) {
    return acts.saved + saved->offset;
  }
  // 16-bit activations: values as storing them in policy_.store leaves them
  // (forward and backward then see exactly what a 16-bit tensor would hold).
  void round(float* x, std::size_t n) {
    if (policy_.store != DType::f32) backend_.round_to(x, policy_.store, n);
  }
  // The block's forward from input x; a recompute stops at what backward reads.
  void block_forward(const Block& a, const float* x, int l, bool recompute);
  const float* block_input(const MicroBatchActs& acts, int l);  // gathered when partitioned
  // After forward: 16-bit copies, partitions.
  void save_block(const MicroBatchActs& acts, int l);
  // Unpack, recompute.
  void restore_block(const MicroBatchActs& acts, int l, const Block& a, const float* x);
  void unpack_block(const MicroBatchActs& acts, int l);  // 16-bit copies into the working buffer
  void regather_norms(const Block& a);  // SP: the norms' outputs over the tensor group again
  float* scratch(const TensorInfo* t) { return workspace_->scratch.f32(*t); }
  // Null for a tensor the model's shape has not (a bias, LayerNorm's .b).
  float* param(const TensorInfo* t) { return t ? storage_->param(*t) : nullptr; }
  float* grad(const TensorInfo* t) { return t ? storage_->grad(*t) : nullptr; }
  // Handles resolved once at construction (gpt_handles.cpp).
  BlockHandles resolve_block(int l) const;
  void resolve_handles();
  const BlockHandles& layer(int l) const { return blocks_[std::size_t(l - stage_.first_block)]; }
  int last_block() const { return stage_.first_block + stage_.blocks(cfg_.layers); }
  FullStorage& full();
  void allocate_workspace(MemoryLedger& ledger);  // or check the shared one is big enough
  // Row-parallel output (partial sums over the group, all tokens) -> this
  // rank's tokens, summed: all-reduce, or reduce-scatter with SP.
  const float* reduce_row_parallel(float* full);
  // This rank's tokens -> all tokens (identity without SP).
  const float* gather(const float* local, float* full);
  // The residual gradient entering an output projection's backward, all tokens.
  MatrixIn projection_grad(const float* d_res, float* full);
  // Linear layers' operands. A bf16 run rounds an activation in place before
  // a GEMM reads it; where the backend reads bf16 operands, the same pass
  // packs its bits into scratch "gemm_bits" (valid until the next call) and
  // the weights come as the storage's bf16 bits, so no GEMM packs them again.
  // The bits go to `home` where it is not null (a saved 16-bit copy).
  MatrixIn gemm_operand(float* x, std::size_t n, std::uint16_t* home = nullptr);
  // out = x w^T + b as such an operand; where the backend reads bits and the
  // output has a saved home, the bits alone (the GEMM's bf16 output).
  MatrixIn linear_operand(float* out, std::uint16_t* home, MatrixIn x, MatrixIn w, const float* b,
                          int N, int IC, int OC);
  // The MLP's hidden activation gelu(ln2 w^T + b) as the projection's operand:
  // bits alone from the fc GEMM through GELU where both are saved as bits.
  MatrixIn mlp_hidden(const Block& a, MatrixIn ln2, MatrixIn w, const float* b, bool recompute);
  // The norm output x (this rank's tokens) rounded and gathered to all tokens.
  MatrixIn gathered_operand(float* x, float* full, std::size_t n, std::uint16_t* home);
  // The norm of x (this rank's tokens; weight w, bias b) into
  // out, as the next GEMM's operand (rounded, gathered); the backend rounds
  // and packs in the norm's pass where it can.
  MatrixIn norm_operand(float* out, float* full, std::uint16_t* home, float* mean, float* rstd,
                        const float* x, const TensorInfo* w, const TensorInfo* b);
  // The Llama family's qkv (rotated, as values) and its gradient, where
  // math_.llama_attention() (llama_block.cpp).
  MatrixIn llama_qkv_operand(const Block& a, MatrixIn ln1, const BlockHandles& h);
  MatrixIn llama_attention_grad_operand(const Block& a, MatrixIn d_att, float* d_3c);
  // SwiGLU's hidden activation silu(gate) * up as the projection's operand, and
  // the gradient of [gate | up] (into d_fc, from d_hidden: scratch) as fc's output gradient.
  MatrixIn swiglu_hidden(const Block& a, MatrixIn ln2, const BlockHandles& h, bool recompute);
  MatrixIn swiglu_grad_operand(float* d_fc, float* d_hidden, const float* fch);
  // Attention of the block's qkv into a.atty as the projection's operand, and
  // its gradient into d_3c as the qkv layer's output gradient (the bits of
  // d_att, in gemm_bits, stay valid while they are read).
  MatrixIn attention_operand(const Block& a, MatrixIn qkv);
  MatrixIn attention_grad_operand(const Block& a, MatrixIn d_att, float* d_3c);
  // out = gelu(x), x rounded in place first (as saved, its bits to x_home
  // where not null), as the next GEMM's operand (bits only where `operand`:
  // a recompute stops before that GEMM).
  MatrixIn gelu_operand(float* out, float* x, std::size_t n, std::uint16_t* home,
                        std::uint16_t* x_home, bool operand);
  // dx = gelu'(x) dy as the fc layer's output gradient; dy is scratch. x is
  // read from x_bits where not null (its saved bits, not unpacked).
  MatrixIn gelu_grad_operand(float* dx, float* x, const std::uint16_t* x_bits, float* dy,
                             std::size_t n);
  // A GEMM input backward reads: its saved bits, or its values (which a bf16
  // run rounded before forward's GEMM read them: bf16 values, so the weight
  // gradients of a recomputed block run on bf16 kernels too).
  MatrixIn saved_input(const float* values, const std::uint16_t* bits) const {
    return bits ? MatrixIn(nullptr, bits) : bf16_valued(values);
  }
  MatrixIn weight(const TensorInfo* t);
  // The tied table's bits for the head's GEMMs where the storage holds them
  // whole and the backend reads bits (one GEMM each way, no windows).
  const std::uint16_t* table_bits() {
    return packs_bits() ? storage_->table_bf16(*ends_.wte) : nullptr;
  }
  bool tied() const { return cfg_.tied_embeddings; }
  // The untied head: logits = lnf lm_head^T, one unit held from forward to backward.
  void untied_logits_backward(const MicroBatchActs& acts, float* d_lnf, const float* lnf_all,
                              bool weight_grads);
  // Values a bf16 run holds as bf16 values (rounded activations, its weights).
  MatrixIn bf16_valued(const float* x) const {
    return MatrixIn(x).as_bf16_values(policy_.store == DType::bf16);
  }
  std::uint16_t* gemm_bits() {
    return packs_bits() ? reinterpret_cast<std::uint16_t*>(scratch(scratch_handles_.gemm_bits))
                        : nullptr;
  }
  bool packs_bits() const {
    return policy_.store == DType::bf16 && bf16_ops_.reads_bits();
  }
  // With SP each tensor rank's norm (and position) gradients cover its own
  // tokens: they are summed over the tensor group before they leave the model
  // (the step's last backward, or every one where the storage reduces each
  // micro-batch's gradients: summing accumulated sums twice would be wrong).
  void sum_partial_grads(const std::vector<const TensorInfo*>& tensors);
  // One backward over the stage; not split: each weight op runs with its
  // input gradient, else its output gradient is kept for W.
  void backward_pass(const MicroBatchActs& acts, bool split, float* input_grad,
                     const GradsReadyFn& ready, bool finalize);
  void head_backward(const MicroBatchActs& acts, float* d_res, bool split, bool finalize);
  void block_backward(const MicroBatchActs& acts, int l, bool split, bool finalize);
  void embedding_grads(const MicroBatchActs& acts, const float* d_emb, bool finalize);
  // After a unit's weight gradients of one micro-batch: SP sums, storage told.
  void finish_head_grads(bool finalize, bool table = true);  // table: the tied table's too
  void finish_block_grads(int l, bool finalize);
  void norm_grads_done(int unit, const std::vector<const TensorInfo*>& norms);  // after B
  void keep_for_weights(const MicroBatchActs& acts, bool split, const WeightInputPlace& at,
                        const float* src, std::size_t n);
  // The token embedding, reached unit by unit where ZeRO-3 cuts it into row
  // pieces (TensorInfo::units; gpt_table.cpp): each unit is gathered, used
  // and released in turn, so the whole table is never held at once.
  struct TableUnit {
    int unit;
    std::vector<std::pair<int, int>> rows;  // (first row, rows) of each piece, local vocabulary
  };
  static std::vector<TableUnit> table_units(const TensorTable& table, int d_model);
  bool table_cut() const { return table_units_.size() > 1; }
  void lookup_tokens(float* out, const std::int32_t* tokens);  // the embedding's lookup
  // The learned positions of this rank's rows (local_tokens_ from
  // first_token_) added to enc, and their gradient from d_enc.
  void add_positions(float* enc);
  void position_grads(float* dwpe, const float* d_enc);
  // The tied head: logits = lnf wte^T; a whole table stays held for backward.
  void logits_forward(float* logits, const float* lnf);
  // d_lnf += dlogits wte (if d_lnf), and with weight_grads dwte += dlogits^T lnf.
  void logits_backward(const MicroBatchActs& acts, float* d_lnf, const float* lnf_all,
                       bool weight_grads, bool finalize);
  void table_grads_from_tokens(const MicroBatchActs& acts, const float* d_emb, bool finalize);
  float* weight_input(const MicroBatchActs& acts, const WeightInputPlace& at) {
    return (at.in_saved ? acts.saved : acts.weight_inputs) + at.offset;
  }

  GptConfig cfg_;
  int B_;
  ComputeBackend& backend_;
  Bf16OperandsFor bf16_ops_{backend_};  // the backend's 16-bit operand ops, or rounded f32 ones
  TensorParallelLayout tp_;
  TokenLayout tokens_;
  BlockMath math_;  // the norm, positions, MLP and attention shape of the model's family
  SoloTensorGroup solo_group_;
  TensorGroupOps* group_;  // the given one, or solo_group_
  std::unique_ptr<AttentionOp> own_attention_;
  AttentionOp* attention_;
  StageSpec stage_;
  bool table_grads_in_b_;  // GptModelOptions::table_grads_in_b, on a tied head's stage
  TensorTable table_;
  std::vector<TableUnit> table_units_;
  std::unique_ptr<FullStorage> own_storage_;
  ModelStorage* storage_;
  ActivationPolicy policy_;
  TensorTable saved_, saved16_, work_, scratch_;
  WeightInputLayout weight_layout_;
  std::vector<BlockHandles> blocks_;  // the stage's blocks, first to last
  EndHandles ends_;
  ScratchHandles scratch_handles_;
  std::unique_ptr<ModelWorkspace> own_workspace_;
  ModelWorkspace* workspace_;  // the own one, or shared
  std::vector<float> host_losses_;
  // The micro-batch's rows, those whose norm/residual activations this rank
  // holds (all without SP), and the first of them.
  int all_tokens_, local_tokens_, first_token_;
};

}  // namespace trident
