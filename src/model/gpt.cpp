#include "model/gpt.hpp"

#include <fmt/format.h>

#include "model/gpt_params.hpp"

namespace trident {

struct GptModel::Block {
  float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *res2, *ln2, *ln2_mean, *ln2_rstd, *fch,
      *fch_gelu, *res3;
};

GptModel::GptModel(const GptConfig& c, int micro_batch, ComputeBackend& backend,
                   MemoryLedger& ledger)
    : cfg_(c), B_(micro_batch), backend_(backend), table_(build_gpt_param_table(c)) {
  params_ = Arena(backend, ledger, MemCategory::parameters, table_.size());
  grads_ = Arena(backend, ledger, MemCategory::gradients, table_.size());

  const std::int64_t BT = std::int64_t(B_) * c.seq_len, C = c.d_model, F = c.d_ff();
  const std::int64_t att = std::int64_t(B_) * c.heads * c.seq_len * c.seq_len;
  auto add = [&](std::string name, std::int64_t n) {
    TensorInfo t;
    t.name = std::move(name);
    t.shape = {n};
    act_table_.add(std::move(t));
  };
  add("encoded", BT * C);
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = fmt::format("h.{}.", l);
    add(p + "ln1", BT * C), add(p + "ln1_mean", BT), add(p + "ln1_rstd", BT);
    add(p + "qkv", BT * 3 * C), add(p + "atty", BT * C), add(p + "att", att);
    add(p + "res2", BT * C);
    add(p + "ln2", BT * C), add(p + "ln2_mean", BT), add(p + "ln2_rstd", BT);
    add(p + "fch", BT * F), add(p + "fch_gelu", BT * F), add(p + "res3", BT * C);
  }
  add("lnf", BT * C), add("lnf_mean", BT), add("lnf_rstd", BT);
  add("logits", BT * c.vocab), add("losses", BT);
  // Backward scratch: gradients of activations are never kept for a whole layer stack.
  add("d_res", BT * C), add("d_c", BT * C), add("d_3c", BT * 3 * C);
  add("d_ff_a", BT * F), add("d_ff_b", BT * F), add("d_att", att);
  // The scratch is counted as activations: it scales with micro_batch * seq_len.
  acts_ = Arena(backend, ledger, MemCategory::activations, act_table_.size());
  io_ = Arena(backend, ledger, MemCategory::activations, 2 * BT, DType::i32);
  host_losses_.resize(BT);
}

GptModel::Block GptModel::block(int l) {
  const std::string p = fmt::format("h.{}.", l);
  auto a = [&](const char* n) { return acts_.f32(act_table_.at(p + n)); };
  return {a("ln1"), a("ln1_mean"), a("ln1_rstd"), a("qkv"),  a("atty"), a("att"),  a("res2"),
          a("ln2"), a("ln2_mean"), a("ln2_rstd"), a("fch"), a("fch_gelu"), a("res3")};
}

void GptModel::init_parameters(std::uint64_t seed) {
  std::vector<float> host(table_.size(), 0.0f);
  init_gpt_params(table_, host.data(), cfg_, seed);
  backend_.copy_from_host(params_.data(), host.data(), host.size() * sizeof(float));
}

double GptModel::forward(const std::int32_t* tokens, const std::int32_t* targets, float dloss) {
  const int B = B_, T = cfg_.seq_len, C = cfg_.d_model, F = cfg_.d_ff(), V = cfg_.vocab;
  const int NH = cfg_.heads, BT = B * T;
  auto* tok = static_cast<std::int32_t*>(io_.data());
  auto* tgt = tok + BT;
  backend_.copy_from_host(tok, tokens, BT * sizeof(std::int32_t));
  backend_.copy_from_host(tgt, targets, BT * sizeof(std::int32_t));
  auto P = [&](const std::string& n) { return params_.f32(table_.at(n)); };
  ComputeBackend& be = backend_;
  float* scratch = act("d_c");

  float* x = act("encoded");
  be.embedding_forward(x, tok, P("wte"), P("wpe"), B, T, C);
  for (int l = 0; l < cfg_.layers; ++l) {
    const std::string p = fmt::format("h.{}.", l);
    Block a = block(l);
    be.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, P(p + "ln1.w"), P(p + "ln1.b"), BT, C);
    be.matmul_forward(a.qkv, a.ln1, P(p + "attn.qkv.w"), P(p + "attn.qkv.b"), BT, C, 3 * C);
    be.attention_forward(a.atty, a.att, a.qkv, B, T, C, NH);
    be.matmul_forward(scratch, a.atty, P(p + "attn.proj.w"), P(p + "attn.proj.b"), BT, C, C);
    be.add(a.res2, x, scratch, std::size_t(BT) * C);
    be.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, P(p + "ln2.w"), P(p + "ln2.b"),
                         BT, C);
    be.matmul_forward(a.fch, a.ln2, P(p + "mlp.fc.w"), P(p + "mlp.fc.b"), BT, C, F);
    be.gelu_forward(a.fch_gelu, a.fch, std::size_t(BT) * F);
    be.matmul_forward(scratch, a.fch_gelu, P(p + "mlp.proj.w"), P(p + "mlp.proj.b"), BT, F, C);
    be.add(a.res3, a.res2, scratch, std::size_t(BT) * C);
    x = a.res3;
  }
  be.layernorm_forward(act("lnf"), act("lnf_mean"), act("lnf_rstd"), x, P("lnf.w"), P("lnf.b"),
                       BT, C);
  float* logits = act("logits");
  be.matmul_forward(logits, act("lnf"), P("wte"), nullptr, BT, C, V);  // tied head
  be.cross_entropy(act("losses"), dloss != 0.0f ? logits : nullptr, logits, tgt, BT, V, dloss);
  be.copy_to_host(host_losses_.data(), act("losses"), BT * sizeof(float));
  double sum = 0;
  for (float v : host_losses_) sum += v;
  return sum;
}

void GptModel::backward(const GradsReadyFn& ready) {
  const int B = B_, T = cfg_.seq_len, C = cfg_.d_model, F = cfg_.d_ff(), V = cfg_.vocab;
  const int NH = cfg_.heads, BT = B * T;
  const auto* tok = static_cast<const std::int32_t*>(io_.data());
  auto P = [&](const std::string& n) { return params_.f32(table_.at(n)); };
  auto G = [&](const std::string& n) { return grads_.f32(table_.at(n)); };
  auto notify = [&](const std::string& first) {
    if (ready) ready(table_.at(first).offset);
  };
  ComputeBackend& be = backend_;
  const std::size_t nC = std::size_t(BT) * C * sizeof(float);
  const std::size_t nF = std::size_t(BT) * F * sizeof(float);
  float *d_res = act("d_res"), *d_c = act("d_c"), *d_3c = act("d_3c");
  float *d_ff_a = act("d_ff_a"), *d_ff_b = act("d_ff_b"), *d_att = act("d_att");
  float* x_last = cfg_.layers > 0 ? block(cfg_.layers - 1).res3 : act("encoded");

  // Head and final norm (dlogits were left in place of the logits by forward).
  be.zero(d_c, nC);
  be.matmul_backward(d_c, G("wte"), nullptr, act("logits"), act("lnf"), P("wte"), BT, C, V);
  be.zero(d_res, nC);
  be.layernorm_backward(d_res, G("lnf.w"), G("lnf.b"), d_c, x_last, P("lnf.w"), act("lnf_mean"),
                        act("lnf_rstd"), BT, C);
  notify("lnf.w");

  for (int l = cfg_.layers - 1; l >= 0; --l) {
    const std::string p = fmt::format("h.{}.", l);
    Block a = block(l);
    float* x_in = l == 0 ? act("encoded") : block(l - 1).res3;
    // d_res holds dLoss/d(res3): the MLP branch and the skip both receive it.
    be.zero(d_ff_a, nF);
    be.matmul_backward(d_ff_a, G(p + "mlp.proj.w"), G(p + "mlp.proj.b"), d_res, a.fch_gelu,
                       P(p + "mlp.proj.w"), BT, F, C);
    be.zero(d_ff_b, nF);
    be.gelu_backward(d_ff_b, a.fch, d_ff_a, std::size_t(BT) * F);
    be.zero(d_c, nC);
    be.matmul_backward(d_c, G(p + "mlp.fc.w"), G(p + "mlp.fc.b"), d_ff_b, a.ln2,
                       P(p + "mlp.fc.w"), BT, C, F);
    be.layernorm_backward(d_res, G(p + "ln2.w"), G(p + "ln2.b"), d_c, a.res2, P(p + "ln2.w"),
                          a.ln2_mean, a.ln2_rstd, BT, C);
    // d_res now holds dLoss/d(res2).
    be.zero(d_c, nC);
    be.matmul_backward(d_c, G(p + "attn.proj.w"), G(p + "attn.proj.b"), d_res, a.atty,
                       P(p + "attn.proj.w"), BT, C, C);
    be.zero(d_3c, 3 * nC);
    be.attention_backward(d_3c, d_att, d_c, a.qkv, a.att, B, T, C, NH);
    be.zero(d_c, nC);
    be.matmul_backward(d_c, G(p + "attn.qkv.w"), G(p + "attn.qkv.b"), d_3c, a.ln1,
                       P(p + "attn.qkv.w"), BT, C, 3 * C);
    be.layernorm_backward(d_res, G(p + "ln1.w"), G(p + "ln1.b"), d_c, x_in, P(p + "ln1.w"),
                          a.ln1_mean, a.ln1_rstd, BT, C);
    notify(p + "ln1.w");
  }
  be.embedding_backward(G("wte"), G("wpe"), d_res, tok, B, T, C);
  notify("wte");
}

}  // namespace trident
