#include "plan/cost_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "model/activation_policy.hpp"
#include "model/gpt_config.hpp"
#include "parallel/pipeline/schedule.hpp"

namespace trident {
namespace {

// Element-wise kernels (norms, GELU, softmax, dropout, residuals) move about
// this many bytes per byte of activations the layer keeps (fitted, as the curve).
constexpr double kTrafficPerSavedByte = 2.0;

// Ring collectives (nccl-tests' bus bandwidth): all-reduce moves 2(n-1)/n of
// the buffer per rank, reduce-scatter and all-gather (n-1)/n, each step alpha.
double ring(double bytes, int n, const Link& link, double efficiency, double factor) {
  if (n <= 1 || bytes <= 0) return 0;
  const double steps = factor * (n - 1);
  return steps / n * bytes / (link.gbps * 1e9 * efficiency) + steps * link.latency_us * 1e-6;
}

struct StepModel {
  const GptConfig& m;
  const Cluster& c;
  int tp, dtype_bytes;
  Precision dtype;
  double peak;              // FLOP/s per rank
  double elementwise_gbps;  // what a rank's element-wise kernels move

  double gemm(double rows, double cols, double inner, double count = 1) const {
    const double flops = 2 * rows * cols * inner * count;
    return flops / (peak * c.gemm_fraction(flops, dtype));
  }
  double bytes_time(double bytes) const { return bytes / (c.hbm_gbps * 1e9); }
  double elementwise_time(double bytes) const { return bytes / (elementwise_gbps * 1e9); }
};

}  // namespace

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

// The step's update of a shard of `shard` parameters (g, w: bytes of a
// gradient and a weight) where offload.optimizer puts it. `c` is the cluster
// as this rank sees it (a shared host's bandwidth already split).
//   none: AdamW at the device's memory bandwidth;
//   cpu:  the host's part (offload.ratio) at the host's bandwidth per GPU,
//         beside the device's part; the weights come back over PCIe while the
//         host updates (alternating staging), the gradients leave during the
//         last backward. On a shared host nothing overlaps: the same cores
//         also copy the gradients out and the weights back;
//   nvme: the state's kinds read and written back at the node's NVMe rate per
//         GPU (and over PCIe on a GPU), the update overlapped with the stream.
double optimizer_time(const Deck& deck, const Cluster& c, const StepModel& sm, double shard,
                      int g, int w, double backward_last) {
  const double adamw_bytes = 3 * 2 * 4 + g + w;
  const OffloadTarget home = deck.offload.optimizer;
  if (home == OffloadTarget::none) return sm.bytes_time(shard * adamw_bytes);
  const double per_gpu = c.shared_node ? 1.0 : 1.0 / c.gpus_per_node;
  if (home == OffloadTarget::nvme) {
    const double kinds = w == 4 ? 2 : 3;  // moments, and masters of 16-bit weights
    const double stream = 2 * shard * kinds * 4 / (c.nvme_gbps * per_gpu * 1e9);
    const double pcie = c.shared_node ? 0 : shard * kinds * 4 / (c.pcie_gbps * 1e9);
    return std::max({stream, pcie, sm.bytes_time(shard * adamw_bytes)});
  }
  const double host = shard * deck.offload.ratio, device = shard - host;
  const double on_device = sm.bytes_time(device * adamw_bytes);
  if (c.shared_node)  // plus the gradients' host copy and the weights' way back
    return on_device + sm.bytes_time(host * (adamw_bytes + 2 * g + 2 * w));
  const double on_host = host * adamw_bytes / (c.host_gbps * per_gpu * 1e9);
  const double back = host * (w == 4 ? 2 * w : w) / (c.pcie_gbps * 1e9);  // f32: over and back
  const double grads_out = host * g / (c.pcie_gbps * 1e9);
  return std::max({on_device, on_host, back}) + std::max(0.0, grads_out - backward_last);
}

}  // namespace

Prediction predict_step(const Deck& deck, const GridShape& shape, const Cluster& cluster,
                        const MemoryEstimate& state, bool stored_attention) {
  const GptConfig& m = deck.model;
  const auto& par = deck.parallel;
  Prediction p;
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

  const int t = shape.tp, pp = shape.pp, v = par.virtual_stages, mbs = p.micro_batches;
  const int w = precision_dtype(deck.precision.dtype) == DType::f32 ? 4 : 2;
  const int g = precision_dtype(deck.precision.reduce_dtype) == DType::f32 ? 4 : 2;
  // this-cpu: every rank runs on this one host (sharing cores once there are
  // more ranks than cores), so they split its FLOP/s, bandwidth and memory.
  const int on_node = cluster.shared_node ? shape.size() : 1;
  Cluster c = cluster;
  if (cluster.shared_node) c.hbm_gbps /= on_node, c.nvme_gbps /= on_node;
  // A shared host's element-wise rate per rank: one thread's, shared when
  // ranks outnumber cores. A rank's further threads are not counted: with
  // its GEMMs near 2x, a whole bf16 step ran only 1.4x (micro-batch 2) to
  // 1.8x (16) faster on two threads than on one on a 2-core host, so large
  // micro-batches are predicted slow.
  const double elementwise_gbps =
      cluster.elementwise_gbps > 0
          ? cluster.elementwise_gbps * std::min(1.0, double(cluster.gpus_per_node) / on_node)
          : c.hbm_gbps;
  const StepModel sm{m, c, t, w, deck.precision.dtype,
                     c.peak_tflops(deck.precision.dtype) * 1e12 / on_node, elementwise_gbps};
  const double h = m.d_model, s = m.seq_len, tokens = double(p.micro_batch) * s;
  // A group inside a node rides NVLink. One spanning nodes with k members per
  // node runs k rings side by side, one per NIC (NCCL channels), so it sees k
  // NICs' bandwidth, capped by NVLink.
  auto link_for = [&](int span, int stride) {
    if (span <= c.gpus_per_node) return c.intra;
    const int members = std::max(1, c.gpus_per_node / std::min(stride, c.gpus_per_node));
    return Link{std::min(c.intra.gbps, members * c.inter.gbps), c.inter.latency_us};
  };
  auto all_reduce = [&](double bytes, int n, const Link& l) { return ring(bytes, n, l, c.comm_efficiency, 2); };
  auto gather = [&](double bytes, int n, const Link& l) { return ring(bytes, n, l, c.comm_efficiency, 1); };

  // One layer, one micro-batch, forward (Megatron: QKV, projection, two MLP GEMMs
  // split over tp; scores and mixing batched over the rank's heads).
  const double linear = sm.gemm(tokens, 3 * h / t, h) + sm.gemm(tokens, h, h / t) +
                        sm.gemm(tokens, 4 * h / t, h) + sm.gemm(tokens, h, 4 * h / t);
  const double heads = double(p.micro_batch) * m.heads / t;
  const double scores = 2 * sm.gemm(s, s, h / m.heads, heads);
  auto layer_bytes = [&](Recompute r, int bytes) {
    return layer_activation_bytes(m, tokens, t, p.sequence_parallel, r, false, bytes,
                                  stored_attention);
  };
  // An activation's bytes as passes and messages move it (Trident's CPU
  // backend: f32 in every precision); what element-wise passes move, and
  // what selective recompute drops: the probabilities (nothing under flash
  // attention).
  const int act_bytes = c.f32_activations ? 4 : w;
  const double moved = layer_bytes(Recompute::none, act_bytes);
  const double dropped = moved - layer_bytes(Recompute::selective, act_bytes);
  const double elementwise = sm.elementwise_time(kTrafficPerSavedByte * moved);
  const double rebuilt = sm.elementwise_time(kTrafficPerSavedByte * dropped);
  // Two all-reduces per layer each way (Megatron section 3); SP's all-gather +
  // reduce-scatter pairs move the same bytes (Korthikanti section 4.2.2).
  const double tp_comm = 2 * all_reduce(tokens * h * act_bytes, t, link_for(t, 1));
  const double forward = linear + scores + elementwise;
  double recompute = 0;
  if (p.recompute == Recompute::full) recompute = forward + tp_comm;
  if (p.recompute == Recompute::selective) recompute = (stored_attention ? scores : 0) + rebuilt;
  // Flash attention's backward recomputes Q K^T from the saved log-sum-exp.
  if (!stored_attention) recompute += scores / 2;

  // Logits on the last stage: the tied head's GEMM forward and twice backward,
  // f32 softmax cross-entropy over the rank's vocabulary shard.
  const double logits_gemm = 3 * sm.gemm(tokens, double(m.vocab) / t, h);
  const double logits_passes = sm.elementwise_time(3.0 * 4 * tokens * m.vocab / t);
  const double logits = logits_gemm + logits_passes;
  const double layers_per_rank = double(m.layers) / pp;
  // Activations cross each chunk boundary once each way (SP: 1/tp of them).
  const double p2p_bytes = tokens * h * act_bytes / (p.sequence_parallel ? t : 1);
  const double p2p = pp > 1 ? 2 * v * (p2p_bytes / (link_for(2 * t * shape.dp, t * shape.dp).gbps * 1e9 *
                                                    c.comm_efficiency) +
                                       link_for(2 * t * shape.dp, t * shape.dp).latency_us * 1e-6)
                            : 0;
  const double gemm_mb = layers_per_rank * 3 * (linear + scores);
  const double elem_mb = layers_per_rank * 3 * elementwise;
  // Backward moves the same again; SP's also gathers the two norms' outputs
  // once more (kept for this rank's tokens only): half an all-reduce each.
  const double tpc_mb = layers_per_rank * (p.sequence_parallel ? 2.5 : 2.0) * tp_comm;
  const double rc_mb = layers_per_rank * recompute;
  const double stage_mb = gemm_mb + elem_mb + tpc_mb + rc_mb + p2p;  // a stage without the head
  const double last_mb = stage_mb + logits;
  // Past its cores a shared host is bound by core time: a bubble idles cores only
  // while fewer of a pipeline's ranks are busy than it has cores, as in a
  // pipeline with one stage per core.
  const int bubble_stages =
      cluster.shared_node
          ? std::clamp(int(std::lround(double(cluster.gpus_per_node) * pp / shape.size())), 1, pp)
          : pp;
  const double bubble_frac =
      bubble_stages > 1 ? theoretical_bubble(par.schedule, bubble_stages, mbs, v)
                        : 0.0;
  const double avg_mb = stage_mb + logits / pp;
  const double bubble = bubble_frac / (1 - bubble_frac) * mbs * avg_mb;

  // Data parallel: parameters on this rank (its layers, and the tied embedding
  // on the first and last stage), gradients reduced over dp ranks tp apart.
  const double psi = (layers_per_rank * (12 * h * h + 13 * h) + double(m.vocab) * h + s * h) / t;
  const Link dp_link = link_for(t * shape.dp, t);
  const int dp = shape.dp, zs = deck.zero.stage;
  const double backward_last = layers_per_rank * (2 * (linear + scores + elementwise + tp_comm)) +
                               rc_mb + 2.0 / 3.0 * logits;
  double dp_exposed = 0, zero3_exposed = 0;
  const double reduce_grads = zs == 0 ? all_reduce(psi * g, dp, dp_link) : gather(psi * g, dp, dp_link);
  const double publish = gather(psi * w, dp, dp_link);  // the updated parameters, stages 1-2
  if (cluster.shared_node) {
    // A shared host's collectives are copies by the same cores that compute,
    // so nothing hides them. Stages 2-3 reduce-scatter each micro-batch's
    // gradients (their slots hold a unit, not a step's sums); stage 3 also
    // gathers each unit for forward and again for backward.
    dp_exposed = (zs >= 2 ? mbs : 1) * reduce_grads + (zs == 1 || zs == 2 ? publish : 0);
    if (zs == 3) zero3_exposed = mbs * 2 * publish;
  } else if (zs == 0) {
    dp_exposed = std::max(0.0, reduce_grads - backward_last);
  } else {
    // Reduce-scatter overlaps the last backward; the all-gather of the updated
    // 16-bit parameters follows the optimizer (ZeRO section 5).
    dp_exposed = std::max(0.0, reduce_grads - backward_last);
    if (zs <= 2) dp_exposed += publish;
    // Stage 3 gathers each unit before its forward and backward, hidden behind
    // the micro-batch's compute where the link keeps up.
    if (zs == 3) zero3_exposed = mbs * std::max(0.0, 2 * publish - last_mb);
  }
  // AdamW touches the f32 master, both moments (read + write), the gradient
  // and writes the 16-bit weight, on its 1/dp shard under ZeRO.
  const double shard = zs > 0 ? psi / dp : psi;
  const double optimizer = optimizer_time(deck, c, sm, shard, g, w, backward_last);

  p.costs = {{"gemm", mbs * (gemm_mb + logits_gemm)},
             {"memory-bound", mbs * (elem_mb + logits_passes)},
             {"recompute", mbs * rc_mb},
             {"tp-comm", mbs * tpc_mb},
             {"pp-p2p", mbs * p2p},
             {"pp-bubble", bubble},
             {"dp-comm", dp_exposed + zero3_exposed},
             {"optimizer", optimizer}};
  p.step_s = mbs * last_mb + bubble + dp_exposed + zero3_exposed + optimizer;

  const double step_tokens = double(deck.train.batch) * s;
  // Attention counted in full, as the published runs it is compared with count it.
  const double model_flops = gpt_flops_per_token(m, AttentionFlops::full) * step_tokens;
  const double attention_fwd = 4.0 * m.layers * h * s * step_tokens;  // QK^T and AV, forward
  const double layer_fwd = 2.0 * 12 * h * h * m.layers * step_tokens + attention_fwd;
  const double qk_again = stored_attention ? 0.0 : attention_fwd / 2;  // flash backward's Q K^T
  const double extra = p.recompute == Recompute::full ? layer_fwd + qk_again
                       : p.recompute == Recompute::selective && stored_attention ? attention_fwd
                                                                                 : qk_again;
  const double gpus = shape.size();
  p.tokens_per_s_per_gpu = step_tokens / p.step_s / gpus;
  p.model_tflops = model_flops / p.step_s / gpus / 1e12;
  p.hardware_tflops = (model_flops + extra) / p.step_s / gpus / 1e12;
  p.mfu = p.model_tflops / c.peak_tflops(deck.precision.dtype) * on_node;

  predict_memory(p, deck, shape, cluster, state, stored_attention);
  return p;
}

}  // namespace trident
