#include "plan/cost_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "model/activation_policy.hpp"
#include "model/gpt_config.hpp"
#include "plan/cost_terms.hpp"

namespace trident {

std::string Prediction::largest_cost() const {
  auto it = std::max_element(costs.begin(), costs.end(),
                             [](const auto& a, const auto& b) { return a.second < b.second; });
  return it == costs.end() ? "" : it->first;
}

std::string Prediction::reason() const {
  std::vector<std::pair<std::string, double>> sorted = costs;
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string out;
  for (std::size_t i = 0; i < sorted.size() && i < 3; ++i)
    out += fmt::format("{}{} {:.0f}%", i ? ", " : "", sorted[i].first,
                       100 * sorted[i].second / step_s);
  if (!fits_device()) out = "does not fit: " + out;
  else if (!fits()) out = "host memory short: " + out;
  return out;
}

namespace {

void describe_layout(Prediction& p, const Deck& deck, const GridShape& shape) {
  const auto& par = deck.parallel;
  p.shape = shape;
  p.virtual_stages = par.virtual_stages;
  p.micro_batch = deck.train.micro_batch;
  p.micro_batches = deck.train.batch / (shape.dp * deck.train.micro_batch);
  p.zero_stage = deck.zero.stage;
  p.sequence_parallel = par.sequence_parallel && shape.tp > 1;
  p.recompute = deck.train.recompute;
  p.schedule = par.schedule;
  p.offload = deck.offload.optimizer;
  p.offload_ratio = p.offload == OffloadTarget::cpu ? deck.offload.ratio : 1.0;
}

// Tokens/s, model and hardware TFLOP/s per GPU and MFU of a step of p.step_s.
void model_throughput(Prediction& p, const StepContext& x) {
  const GptConfig& m = x.deck.model;
  const double h = x.h, s = x.s;
  const double step_tokens = double(x.deck.train.batch) * s;
  // Attention counted in full, as the published runs it is compared with count it.
  const double model_flops = gpt_flops_per_token(m, AttentionFlops::full) * step_tokens;
  const double attention_fwd = 4.0 * m.layers * h * s * step_tokens;  // QK^T and AV, forward
  const double layer_fwd = 2.0 * block_matmul_weights(m) * m.layers * step_tokens + attention_fwd;
  const double qk_again = x.stored_attention ? 0.0 : attention_fwd / 2;  // flash backward's Q K^T
  const double extra = p.recompute == Recompute::full ? layer_fwd + qk_again
                       : p.recompute == Recompute::selective && x.stored_attention ? attention_fwd
                                                                                   : qk_again;
  const double gpus = x.shape.size();
  p.tokens_per_s_per_gpu = step_tokens / p.step_s / gpus;
  p.model_tflops = model_flops / p.step_s / gpus / 1e12;
  p.hardware_tflops = (model_flops + extra) / p.step_s / gpus / 1e12;
  p.mfu = p.model_tflops / x.c.peak_tflops(x.deck.precision.dtype) * x.on_node;
}

}  // namespace

// The slowest stage's step: its micro-batches, the bubble, what data
// parallelism leaves exposed, the optimizer.
Prediction predict_step(const Deck& deck, const GridShape& shape, const Cluster& cluster,
                        const MemoryEstimate& state, bool stored_attention) {
  Prediction p;
  describe_layout(p, deck, shape);
  const StepContext x(deck, shape, cluster, stored_attention);
  const int mbs = x.micro_batches;
  const LayerTimes layer = layer_forward(x);
  const LogitsTimes logits = logits_times(x);
  const MicroBatchTimes mb = micro_batch_times(x, layer);
  const double stage_mb = mb.stage();  // a stage without the head
  const double last_mb = stage_mb + logits.total();
  const double bubble = pp_bubble_time(x, stage_mb, logits.total());
  // Data parallel: parameters on this rank (its layers, and the embedding's
  // tables on the first and last stage).
  const double psi = parameters_on_rank(deck.model, shape);
  const double layers_per_rank = double(deck.model.layers) / shape.pp;
  const double backward_last =
      layers_per_rank * (2 * (layer.gemm + layer.scores + layer.memory_bound + layer.tp_comm)) +
      mb.recompute + 2.0 / 3.0 * logits.total();
  const DataParallelTimes dp = dp_comm_time(x, psi, backward_last, last_mb);
  // Under ZeRO the optimizer updates its 1/(dp x cp) shard.
  const double shard = deck.zero.stage > 0 ? psi / shape.replicas() : psi;
  const double optimizer = optimizer_time(x, shard, backward_last);

  p.costs = {{"gemm", mbs * (mb.gemm + logits.gemm)},
             {"memory-bound", mbs * (mb.memory_bound + logits.memory_bound)},
             {"recompute", mbs * mb.recompute},
             {"tp-comm", mbs * mb.tp_comm},
             {"pp-p2p", mbs * mb.pp_p2p},
             {"pp-bubble", bubble},
             {"dp-comm", dp.exposed},
             {"dp-latency", dp.latency},
             {"optimizer", optimizer}};
  // The ring's transfers, a term only where there is a context group.
  if (shape.cp > 1) p.costs.insert(p.costs.begin() + 4, {"cp-comm", mbs * mb.cp_comm});
  p.step_s = mbs * last_mb + bubble + dp.total() + optimizer;
  model_throughput(p, x);
  predict_memory(p, deck, shape, cluster, state, stored_attention);
  return p;
}

}  // namespace trident
