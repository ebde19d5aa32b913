#include "parallel/pipeline/schedule_costs.hpp"

#include <algorithm>

#include "io/deck.hpp"
#include "model/gpt.hpp"

namespace trident {
namespace {

int micro_batch_of(const ScheduleCostDeck& deck, const GridShape& shape) {
  return deck.train.micro_batch > 0 ? deck.train.micro_batch : deck.train.batch / shape.dp;
}

// A micro-batch's rows on one rank: whole sequences, or 1/cp of each under
// context parallelism (the tables' sizes depend on the row count alone).
TokenLayout rank_rows(int B, const GptConfig& m, const GridShape& shape) {
  return TokenLayout(B, m.seq_len, {{0, 0, m.seq_len / shape.cp}});
}

}  // namespace

// The paper's unit costs and the budgets each schedule states (schedule.hpp).
ZeroBubbleCosts unit_costs(ScheduleKind kind, int p, int) {
  const int chunks = places_chunks_in_v(kind) ? 2 : 1, V = p * chunks;
  ZeroBubbleCosts c;
  c.send_bytes = kUnitSendBuffer;
  c.f.assign(V, 1.0), c.b.assign(V, 1.0), c.w.assign(V, 1.0);
  c.slot_bytes.assign(V, 1.0 / chunks), c.w_bytes.assign(V, kUnitWeightBuffer / chunks);
  const std::vector<double> one_f_one_b(p, 1.0);
  for (int s = 0; s < p; ++s) c.budget.push_back(zero_bubble_budget(kind, s, one_f_one_b));
  return c;
}

double zero_bubble_budget(ScheduleKind kind, int s, const std::vector<double>& slot) {
  const int p = int(slot.size());
  if (kind != ScheduleKind::zb_h1 && kind != ScheduleKind::zb_v) return 0;
  double peak = 0;
  for (int r = 0; r < p; ++r) peak = std::max(peak, (p - r) * slot[r]);
  return kZeroBubbleSlack * peak;
}

double slot_bytes(const ScheduleCostDeck& deck, const GridShape& shape, const StageSpec& spec) {
  const GptConfig& m = deck.model;
  const int B = micro_batch_of(deck, shape);
  const TensorParallelLayout tp{shape.tp, 0, deck.parallel.sequence_parallel};
  const ActivationPolicy policy =
      make_activation_policy(deck.train.recompute, deck.train.partition_activations, shape.tp,
                             tp.sp(), deck.precision.dtype);
  TensorTable saved = GptModel::saved_activation_table(m, rank_rows(B, m, shape), tp, spec, policy);
  saved.align_end(TensorTable::kAlign);
  TensorTable saved16 = GptModel::saved_16bit_table(m, rank_rows(B, m, shape), tp, spec, policy);
  saved16.align_end(2 * TensorTable::kAlign);
  return double(saved.size()) * sizeof(float) + double(saved16.size()) * 2 +
         2.0 * B * (m.seq_len / shape.cp) * sizeof(std::int32_t);
}

double send_buffer_bytes(const ScheduleCostDeck& deck, const GridShape& shape) {
  const TensorParallelLayout tp{shape.tp, 0, deck.parallel.sequence_parallel};
  const int tokens = micro_batch_of(deck, shape) * (deck.model.seq_len / shape.cp);
  return double(tp.local_tokens(tokens)) * deck.model.d_model * sizeof(float);
}

double weight_buffer_bytes(const ScheduleCostDeck& deck, const GridShape& shape, const StageSpec& spec) {
  const TensorParallelLayout tp{shape.tp, 0, deck.parallel.sequence_parallel};
  const ActivationPolicy policy =
      make_activation_policy(deck.train.recompute, deck.train.partition_activations, shape.tp,
                             tp.sp(), deck.precision.dtype);
  const WeightInputLayout kept =
      GptModel::weight_input_layout(
          deck.model, rank_rows(micro_batch_of(deck, shape), deck.model, shape), tp, spec, policy);
  return double(kept.buffer.size()) * sizeof(float);
}

ZeroBubbleCosts zero_bubble_costs(const ScheduleCostDeck& deck, const GridShape& shape,
                                  const Partition& part) {
  const ScheduleKind kind = deck.parallel.schedule;
  const GptConfig& m = deck.model;
  const int p = shape.pp, V = int(part.size()) - 1;
  // FLOPs per token of one block (Narayanan et al. 2021, appendix): GEMMs
  // 2 * 12 C^2 / tp forward, as much for the input gradients (B) and for the
  // weight gradients (W); attention's two T x T products 4 T C / tp forward,
  // twice that backward, all in B. The head's 2 C V in F, B and W (a tied
  // table's gradient in B where tied_table_grads_in_b).
  const double C = m.d_model, T = m.seq_len, vocab = m.vocab, tp = shape.tp;
  const double gemm = 24 * C * C / tp, attn = 4 * T * C / tp, head = 2 * C * vocab / tp;
  const bool table_in_b = tied_table_grads_in_b(deck, shape);
  ZeroBubbleCosts c;
  for (int vs = 0; vs < V; ++vs) {
    const StageSpec spec = stage_spec_of(part, vs);
    const double blocks = spec.blocks(m.layers), h = spec.head ? head : 0;
    c.f.push_back(blocks * (gemm + attn) + h);
    c.b.push_back(blocks * (gemm + 2 * attn) + (table_in_b ? 2 * h : h));
    c.w.push_back(blocks * gemm + (table_in_b ? 0 : h));
    c.slot_bytes.push_back(slot_bytes(deck, shape, spec));
    c.w_bytes.push_back(weight_buffer_bytes(deck, shape, spec));
  }
  c.send_bytes = send_buffer_bytes(deck, shape);
  // The budget is 1F1B's on the same model: one chunk per rank, its own
  // partition, and on every stage but the first a send buffer per slot.
  const Partition one = V == p ? part : partition_uniform(m.layers, p);
  std::vector<double> one_f_one_b;
  for (int s = 0; s < p; ++s)
    one_f_one_b.push_back(slot_bytes(deck, shape, stage_spec_of(one, s)) + (s > 0 ? c.send_bytes : 0));
  // A rank's chunks share one working buffer and scratch, as 1F1B's one
  // chunk has: the budget's slack covers that set too.
  const TensorParallelLayout tpl{shape.tp, 0, deck.parallel.sequence_parallel};
  const ActivationPolicy policy =
      make_activation_policy(deck.train.recompute, deck.train.partition_activations, shape.tp,
                             tpl.sp(), deck.precision.dtype);
  const int B = micro_batch_of(deck, shape);
  const double fixed = double(GptModel::work_table(m, rank_rows(B, m, shape), tpl, policy).size() +
                              GptModel::scratch_table(m, rank_rows(B, m, shape), tpl, policy).size()) * sizeof(float);
  for (int s = 0; s < p; ++s) {
    const double b = zero_bubble_budget(kind, s, one_f_one_b);
    c.budget.push_back(b > 0 ? b + (kZeroBubbleSlack - 1) * fixed : 0);
  }
  return c;
}

ScheduleCostDeck schedule_cost_deck(const Deck& deck) {
  return {deck.model, deck.train, deck.parallel, deck.precision, deck.zero};
}

bool tied_table_grads_in_b(const ScheduleCostDeck& deck, const GridShape& shape) {
  const ScheduleKind kind = deck.parallel.schedule;
  return deck.model.tied_embeddings && shape.pp > 1 && splits_backward(kind) &&
         !places_chunks_in_v(kind) && shape.replicas() == 1 && deck.zero.stage == 0 &&
         deck.precision.reduce_dtype == Precision::fp32;
}

}  // namespace trident
