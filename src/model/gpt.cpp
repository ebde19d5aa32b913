#include "model/gpt.hpp"

#include <fmt/format.h>

#include <stdexcept>

#include "core/error.hpp"
#include "model/gpt_params.hpp"

namespace trident {

GptModel::GptModel(const GptConfig& c, int micro_batch, ComputeBackend& backend,
                   MemoryLedger& ledger, const GptModelOptions& o)
    : cfg_(c),
      B_(micro_batch),
      backend_(backend),
      tp_(o.tp),
      tokens_(o.tokens.empty() ? TokenLayout(micro_batch, c.seq_len) : o.tokens),
      math_(c, tp_, tokens_, backend),
      group_(o.tensor_group ? o.tensor_group : &solo_group_),
      stage_(o.stage),
      table_grads_in_b_(o.table_grads_in_b && c.tied_embeddings && o.stage.head && !o.stage.embedding),
      table_(build_gpt_param_table(c, o.tp, o.units, o.stage)),
      table_units_(table_units(table_, c.d_model)) {
  if (c.kv_head_count() % tp_.size != 0)
    throw std::logic_error(fmt::format("{} key/value heads over {} tensor ranks",
                                       c.kv_head_count(), tp_.size));
  if (tp_.size > 1 && !o.tensor_group)
    throw std::logic_error("a model on one of several tensor ranks needs its tensor group");
  if (!o.attention) own_attention_ = std::make_unique<LocalAttention>(backend);
  attention_ = o.attention ? o.attention : own_attention_.get();
  if (!o.storage) own_storage_ = std::make_unique<FullStorage>(table_, backend, ledger, o.weights, o.grads);
  storage_ = o.storage ? o.storage : own_storage_.get();
  if (tokens_.batch() != B_ || tokens_.seq_len() != c.seq_len)
    throw std::logic_error("GptModelOptions::tokens: another micro-batch or sequence length");
  all_tokens_ = tokens_.rows();
  local_tokens_ = tp_.local_tokens(all_tokens_);
  first_token_ = tp_.first_local_token(all_tokens_);
  policy_ = o.activations;
  saved_ = saved_activation_table(c, tokens_, tp_, stage_, policy_);
  saved_.align_end(TensorTable::kAlign);  // pools of them: each starts vector-aligned
  saved16_ = saved_16bit_table(c, tokens_, tp_, stage_, policy_);
  saved16_.align_end(2 * TensorTable::kAlign);
  work_ = work_table(c, tokens_, tp_, policy_);
  scratch_ = scratch_table(c, tokens_, tp_, policy_);
  if (!o.workspace) own_workspace_ = std::make_unique<ModelWorkspace>();
  workspace_ = o.workspace ? o.workspace : own_workspace_.get();
  allocate_workspace(ledger);
  weight_layout_ = weight_input_layout(c, tokens_, tp_, stage_, policy_);
  host_losses_.resize(all_tokens_);
  resolve_handles();
  if (packs_bits())  // the linears' weights reach the GEMMs as bits only (weight())
    for (const BlockHandles& h : blocks_)
      for (const TensorInfo* w : {h.qkv_w, h.attn_proj_w, h.fc_w, h.mlp_proj_w})
        storage_->read_as_bits(*w);
  if (packs_bits() && ends_.lm_head) storage_->read_as_bits(*ends_.lm_head);
}

void GptModel::allocate_workspace(MemoryLedger& ledger) {
  auto fit = [&](Arena& arena, const TensorTable& table, const char* what) {
    if (arena.numel() == 0 && table.size() > 0)
      arena = Arena(backend_, ledger, MemCategory::activations, table.size());
    else if (arena.numel() < table.size())
      throw std::logic_error(fmt::format("a shared workspace's {} holds {} floats, this model needs {}",
                                         what, arena.numel(), table.size()));
  };
  fit(workspace_->work, work_, "working buffer");
  fit(workspace_->scratch, scratch_, "scratch");
}

MicroBatchSizes GptModel::micro_batch_sizes() const {
  return {saved_.size(), saved16_.size(), 2 * std::size_t(all_tokens_), weight_layout_.buffer.size()};
}

FullStorage& GptModel::full() {
  if (!own_storage_) throw std::logic_error("the model's parameters live in a sharded storage");
  return *own_storage_;
}

void GptModel::for_initial_parameters(std::uint64_t seed, const ValuesFn& f) const {
  constexpr std::size_t kPiece = std::size_t(1) << 24;  // 64 MiB of f32 at a time
  std::vector<float> host(std::min(kPiece, table_.size()));
  for (std::size_t first = 0; first < table_.size(); first += kPiece) {
    const std::size_t n = std::min(kPiece, table_.size() - first);
    init_gpt_params_range(table_, host.data(), cfg_, seed, first, n);
    f(first, host.data(), n);
  }
}

void GptModel::init_parameters(std::uint64_t seed) {
  for_initial_parameters(seed, [&](std::size_t first, const float* v, std::size_t n) {
    storage_->set_params_from_host(first, v, n);
  });
}

const float* GptModel::reduce_row_parallel(float* full) {
  if (!tp_.sp()) {
    group_->all_reduce(full, std::size_t(all_tokens_) * cfg_.d_model);
    return full;
  }
  float* local = scratch(scratch_handles_.local_c);
  group_->reduce_scatter_tokens(full, local, std::size_t(local_tokens_) * cfg_.d_model);
  return local;
}

const float* GptModel::gather(const float* local, float* full) {
  if (!tp_.sp()) return local;
  group_->gather_tokens(local, full, std::size_t(local_tokens_) * cfg_.d_model);
  return full;
}

MatrixIn GptModel::projection_grad(const float* d_res, float* full) {
  const float* d = gather(d_res, full);
  if (policy_.store != DType::bf16) return d;
  // bf16 runs round the branch's copy to bf16, as autocast does, so both of
  // the projection's gradient GEMMs run on bf16 kernels; the residual stream's
  // gradient stays f32.
  std::uint16_t* bits = gemm_bits();
  bf16_ops_->round_to_bf16(full, bits, d, std::size_t(all_tokens_) * cfg_.d_model);
  return {full, bits};
}

MatrixIn GptModel::gemm_operand(float* x, std::size_t n, std::uint16_t* home) {
  if (!packs_bits()) {
    round(x, n);
    return x;
  }
  std::uint16_t* bits = home ? home : gemm_bits();
  bf16_ops_->round_to_bf16(x, bits, x, n);
  return {x, bits};
}

MatrixIn GptModel::linear_operand(float* out, std::uint16_t* home, MatrixIn x, MatrixIn w,
                                  const float* b, int N, int IC, int OC) {
  if (packs_bits() && home) {
    bf16_ops_->matmul_forward_rounded(out, home, x, w, b, N, IC, OC, /*values=*/false);
    return MatrixIn(nullptr, home);
  }
  bf16_ops_->matmul_forward(out, x, w, b, N, IC, OC);
  return gemm_operand(out, std::size_t(N) * OC, home);
}

MatrixIn GptModel::mlp_hidden(const Block& a, MatrixIn ln2, MatrixIn w, const float* b,
                              bool recompute) {
  const int C = cfg_.d_model, Fl = tp_.local_ff(cfg_);
  const std::size_t n = std::size_t(all_tokens_) * Fl;
  if (!recompute && packs_bits() && a.fch_16 && a.fch_gelu_16) {
    // Bits alone: the fc GEMM writes fch's, GELU reads them and writes its own.
    bf16_ops_->matmul_forward_rounded(a.fch, a.fch_16, ln2, w, b, all_tokens_, C, Fl, /*values=*/false);
    bf16_ops_->gelu_forward_rounded(nullptr, a.fch_gelu_16, nullptr, a.fch_16, n, policy_.store);
    return MatrixIn(nullptr, a.fch_gelu_16);
  }
  bf16_ops_->matmul_forward(a.fch, ln2, w, b, all_tokens_, C, Fl);
  return gelu_operand(a.fch_gelu, a.fch, n, a.fch_gelu_16, a.fch_16, !recompute);
}

MatrixIn GptModel::gathered_operand(float* x, float* full, std::size_t n, std::uint16_t* home) {
  if (tp_.sp()) {  // the bits would be this rank's tokens only
    round(x, n);
    return gather(x, full);
  }
  return gemm_operand(x, n, home);
}

MatrixIn GptModel::norm_operand(float* out, float* full, std::uint16_t* home, float* mean,
                                float* rstd, const float* x, const TensorInfo* norm_w,
                                const TensorInfo* norm_b) {
  const int N = local_tokens_, C = cfg_.d_model;
  const float *w = param(norm_w), *b = param(norm_b);
  if (tp_.sp() || !packs_bits() || cfg_.norm != NormKind::layernorm) {
    math_.norm_forward(out, mean, rstd, x, w, b);
    return gathered_operand(out, full, std::size_t(N) * C, home);
  }
  std::uint16_t* bits = home ? home : gemm_bits();
  bf16_ops_->layernorm_forward_rounded(out, bits, mean, rstd, x, w, b, N, C);
  return {out, bits};
}

MatrixIn GptModel::attention_operand(const Block& a, MatrixIn qkv) {
  const int Cl = tp_.local_width(cfg_);
  const std::size_t n = std::size_t(all_tokens_) * Cl;
  // The output's bits may not go to gemm_bits while qkv's are read there.
  if (!packs_bits() || !(a.atty_16 || a.qkv_16)) {
    attention_->forward(a.atty, a.lse, qkv, math_.attention_shape(), policy_.store == DType::bf16);
    return gemm_operand(a.atty, n, a.atty_16);
  }
  std::uint16_t* bits = a.atty_16 ? a.atty_16 : gemm_bits();
  attention_->forward_rounded(a.atty, bits, a.lse, qkv, math_.attention_shape());
  return {a.atty, bits};
}

MatrixIn GptModel::attention_grad_operand(const Block& a, MatrixIn d_att, float* d_3c) {
  if (math_.llama_attention()) return llama_attention_grad_operand(a, d_att, d_3c);
  const int Cl = tp_.local_width(cfg_);
  const std::size_t n = 3 * std::size_t(all_tokens_) * Cl;
  const MatrixIn qkv = saved_input(a.qkv, a.qkv_16);
  if (!packs_bits()) {
    backend_.zero(d_3c, n * sizeof(float));
    attention_->backward(d_3c, d_att, qkv, a.atty, a.lse, math_.attention_shape(),
                         policy_.store == DType::bf16);
    return gemm_operand(d_3c, n);
  }
  // gemm_bits holds d_att's bits first, then this gradient's (scratch_table
  // sizes it for both).
  std::uint16_t* bits = gemm_bits() + std::size_t(all_tokens_) * Cl;
  attention_->backward_rounded(d_3c, bits, d_att, qkv, a.atty, a.lse, math_.attention_shape());
  return {d_3c, bits};
}

MatrixIn GptModel::gelu_operand(float* out, float* x, std::size_t n, std::uint16_t* home,
                                std::uint16_t* x_home, bool operand) {
  if (policy_.store == DType::f32) {
    backend_.gelu_forward(out, x, n);
    return out;
  }
  std::uint16_t* bits = operand && packs_bits() ? (home ? home : gemm_bits()) : nullptr;
  bf16_ops_->gelu_forward_rounded(out, bits, x, operand ? x_home : nullptr, n, policy_.store);
  return bits ? MatrixIn(out, bits) : MatrixIn(out);
}

MatrixIn GptModel::gelu_grad_operand(float* dx, float* x, const std::uint16_t* x_bits, float* dy,
                                     std::size_t n) {
  if (policy_.store == DType::f32) {
    backend_.zero(dx, n * sizeof(float));
    backend_.gelu_backward(dx, x, dy, n);
    return dx;
  }
  std::uint16_t* bits = gemm_bits();
  bf16_ops_->gelu_backward_rounded(dx, bits, x, x_bits, dy, n, policy_.store);
  return bits ? MatrixIn(dx, bits) : MatrixIn(dx);
}

MatrixIn GptModel::weight(const TensorInfo* w) {
  const TensorInfo& t = *w;
  const std::uint16_t* bits = packs_bits() ? storage_->param_bf16(t) : nullptr;
  return bits ? MatrixIn(nullptr, bits) : bf16_valued(storage_->param(t));
}

void GptModel::sum_partial_grads(const std::vector<const TensorInfo*>& tensors) {
  if (!tp_.sp()) return;
  // Pack the small tensors so the group does one all-reduce, not one each.
  float* pack = scratch(scratch_handles_.sp_pack);
  std::size_t n = 0;
  for (const TensorInfo* t : tensors) {
    backend_.copy(pack + n, storage_->grad(*t), t->numel * sizeof(float));
    n += t->numel;
  }
  group_->all_reduce(pack, n);
  n = 0;
  for (const TensorInfo* t : tensors) {
    backend_.copy(storage_->grad(*t), pack + n, t->numel * sizeof(float));
    n += t->numel;
  }
}

}  // namespace trident
