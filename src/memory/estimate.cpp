#include "memory/estimate.hpp"

#include "model/gpt.hpp"
#include "model/gpt_params.hpp"
#include "parallel/tensor/tensor_layout.hpp"
#include "parallel/zero/zero_plan.hpp"
#include "parallel/zero/zero_storage.hpp"

namespace trident {

double MemoryEstimate::model_state() const {
  return bytes[int(MemCategory::parameters)] + bytes[int(MemCategory::gradients)] +
         bytes[int(MemCategory::optimizer)];
}

double MemoryEstimate::peak() const {
  double s = 0;
  for (double b : bytes) s += b;
  return s;
}

MemoryEstimate estimate_memory(const Deck& deck, const GridShape& shape, int stage) {
  MemoryEstimate e;
  const GptConfig& m = deck.model;
  const TensorParallelLayout tp{shape.tp, 0, deck.parallel.sequence_parallel};
  const std::size_t align = stage > 0 ? std::size_t(shape.dp) * TensorTable::kAlign : 1;
  const TensorTable table = build_gpt_param_table(m, tp, align);
  const double f = sizeof(float), n = double(table.size());
  auto& b = e.bytes;
  auto at = [&](MemCategory c) -> double& { return b[int(c)]; };
  if (stage == 0) {
    at(MemCategory::parameters) = n * f;
    at(MemCategory::gradients) = n * f;
    at(MemCategory::optimizer) = 2 * n * f;  // rank 0 updates in both dp modes
  } else {
    const ZeroPlan plan(table, shape.dp, 0, std::size_t(deck.zero.persistence_threshold));
    const double shard = double(plan.shard_size());
    const double large = double(ZeroStorage::large_slot_elements(plan));
    const double small = double(ZeroStorage::small_slot_elements(plan));
    auto pool = [&](int slots) { return large + (slots - 1) * small; };
    at(MemCategory::parameters) = (stage <= 2 ? n : shard + pool(ZeroStorage::kParamSlots)) * f;
    at(MemCategory::gradients) = ((stage == 1 ? n : pool(ZeroStorage::kGradSlots)) + shard) * f;
    at(MemCategory::optimizer) = 2 * shard * f;
    if (stage >= 2)
      at(MemCategory::buffers) = ZeroStorage::kRecvBuffers * double(std::size_t(large) / shape.dp) * f;
  }
  const int B = deck.train.micro_batch > 0 ? deck.train.micro_batch : deck.train.batch / shape.dp;
  const TensorTable acts = GptModel::activation_table(m, B, tp);
  const double tokens = double(B) * m.seq_len;
  at(MemCategory::activations) = double(acts.size()) * f + 2 * tokens * sizeof(std::int32_t);
  // Full recomputation keeps each block's input and one block's activations
  // at a time (plus the head): the per-block part divided by the layers.
  const double per_token_block = double(acts.size()) / std::max(1, m.layers);
  e.activations_full_recompute =
      (m.layers * tp.local_tokens(int(tokens)) * double(m.d_model) + per_token_block) * f;
  e.parameters = double(gpt_num_parameters(m));
  return e;
}

double zero_paper_bytes(double psi, int dp, int stage, bool mixed) {
  const double p = mixed ? 2 : 4, g = mixed ? 2 : 4, k = mixed ? 12 : 8;
  switch (stage) {
    case 0: return (p + g + k) * psi;
    case 1: return (p + g) * psi + k * psi / dp;
    case 2: return p * psi + (g + k) * psi / dp;
    default: return (p + g + k) * psi / dp;
  }
}

}  // namespace trident
