#include "plan/cost_terms.hpp"

#include <algorithm>
#include <cmath>

#include "model/gpt_params.hpp"
#include "plan/cost_model.hpp"
#include "parallel/pipeline/schedule.hpp"

namespace trident {
namespace {

// Element-wise kernels (norms, GELU, softmax, dropout, residuals) move about
// this many bytes per byte of activations the layer keeps (fitted, as the curve).
constexpr double kTrafficPerSavedByte = 2.0;

int dtype_bytes(Precision p) { return precision_dtype(p) == DType::f32 ? 4 : 2; }

Cluster as_one_rank_sees_it(const Cluster& cluster, int on_node) {
  Cluster c = cluster;
  if (cluster.shared_node) c.hbm_gbps /= on_node, c.nvme_gbps /= on_node;
  return c;
}

// A shared host's element-wise rate per rank: one thread's, shared when
// ranks outnumber cores. A rank's further threads are not counted: with
// its GEMMs near 2x, a whole bf16 step ran only 1.4x (micro-batch 2) to
// 1.8x (16) faster on two threads than on one on a 2-core host, so large
// micro-batches are predicted slow.
double elementwise_rate(const Cluster& cluster, const Cluster& c, int on_node) {
  return cluster.elementwise_gbps > 0
             ? cluster.elementwise_gbps * std::min(1.0, double(cluster.gpus_per_node) / on_node)
             : c.hbm_gbps;
}

}  // namespace

double StepModel::gemm(double rows, double cols, double inner, double count) const {
  const double flops = 2 * rows * cols * inner * count;
  return flops / (peak * c.gemm_fraction(flops, dtype));
}

StepContext::StepContext(const Deck& deck, const GridShape& shape, const Cluster& cluster,
                         bool stored_attention)
    : deck(deck),
      shape(shape),
      cluster(cluster),
      stored_attention(stored_attention),
      micro_batch(deck.train.micro_batch),
      micro_batches(deck.train.batch / (shape.dp * deck.train.micro_batch)),
      sequence_parallel(deck.parallel.sequence_parallel && shape.tp > 1),
      w(dtype_bytes(deck.precision.dtype)),
      g(dtype_bytes(deck.precision.reduce_dtype)),
      on_node(cluster.shared_node ? shape.size() : 1),
      c(as_one_rank_sees_it(cluster, on_node)),
      sm{deck.model, c, shape.tp, w, deck.precision.dtype,
         c.peak_tflops(deck.precision.dtype) * 1e12 / on_node, elementwise_rate(cluster, c, on_node)},
      h(deck.model.d_model),
      s(deck.model.seq_len),
      rows(s / shape.cp),
      tokens(double(micro_batch) * rows),
      act_bytes(c.f32_activations ? 4 : w) {}

// One layer, one micro-batch, forward (Megatron: QKV, projection, two MLP GEMMs
// split over tp; scores and mixing batched over the rank's heads, the rank's
// rows against the whole sequence's keys under context parallelism). An
// activation's bytes as passes and messages move it (Trident's CPU backend:
// f32 in every precision); what element-wise passes move, and what selective
// recompute drops: the probabilities (nothing under flash attention).
LayerTimes layer_forward(const StepContext& x) {
  const GptConfig& m = x.deck.model;
  const int t = x.shape.tp;
  const double h = x.h, s = x.s, tokens = x.tokens, f = m.d_ff();
  const double ups = m.mlp == MlpKind::swiglu ? 2 : 1;  // SwiGLU's gate and up
  LayerTimes l;
  l.gemm = x.sm.gemm(tokens, m.qkv_width() / double(t), h) + x.sm.gemm(tokens, h, h / t) +
           x.sm.gemm(tokens, ups * f / t, h) + x.sm.gemm(tokens, h, f / t);
  const double heads = double(x.micro_batch) * m.heads / t;
  l.scores = 2 * x.sm.gemm(x.rows, s, h / m.heads, heads);
  auto layer_bytes = [&](Recompute r, int bytes) {
    return layer_activation_bytes(m, tokens, t, x.sequence_parallel, r, false, bytes,
                                  x.stored_attention);
  };
  const double moved = layer_bytes(Recompute::none, x.act_bytes);
  const double dropped = moved - layer_bytes(Recompute::selective, x.act_bytes);
  l.memory_bound = x.sm.elementwise_time(kTrafficPerSavedByte * moved);
  l.rebuilt = x.sm.elementwise_time(kTrafficPerSavedByte * dropped);
  // Two all-reduces per layer each way (Megatron section 3); SP's all-gather +
  // reduce-scatter pairs move the same bytes (Korthikanti section 4.2.2).
  l.tp_comm = 2 * x.all_reduce(tokens * h * x.act_bytes, t, x.link_for(t, 1));
  return l;
}

double block_matmul_weights(const GptConfig& m) {
  const double h = m.d_model, f = m.d_ff(), ups = m.mlp == MlpKind::swiglu ? 2 : 1;
  return h * m.qkv_width() + h * h + (ups + 1) * h * f;
}

double parameters_on_rank(const GptConfig& m, const GridShape& shape) {
  const double h = m.d_model, tables = (m.tied_embeddings ? 1.0 : 2.0) * m.vocab * h;
  const double positions = m.positions == PositionEncoding::learned ? double(m.seq_len) * h : 0;
  // What the layers hold besides their linears' weights: biases and norms.
  const double block = (double(gpt_num_parameters(m)) - tables - positions) / m.layers;
  // With one stage it holds both tables; across stages the first and last hold one each.
  const double stage_tables = shape.pp > 1 && !m.tied_embeddings ? tables / 2 : tables;
  return (double(m.layers) / shape.pp * block + stage_tables + positions) / shape.tp;
}

double layer_recompute(const StepContext& x, const LayerTimes& l) {
  const Recompute mode = x.deck.train.recompute;
  const double forward = l.gemm + l.scores + l.memory_bound;
  double recompute = 0;
  if (mode == Recompute::full) recompute = forward + l.tp_comm;
  if (mode == Recompute::selective) recompute = (x.stored_attention ? l.scores : 0) + l.rebuilt;
  // Flash attention's backward recomputes Q K^T from the saved log-sum-exp.
  if (!x.stored_attention) recompute += l.scores / 2;
  return recompute;
}

// The tied head's GEMM forward and twice backward, f32 softmax cross-entropy
// over the rank's vocabulary shard.
LogitsTimes logits_times(const StepContext& x) {
  const GptConfig& m = x.deck.model;
  const int t = x.shape.tp;
  LogitsTimes l;
  l.gemm = 3 * x.sm.gemm(x.tokens, double(m.vocab) / t, x.h);
  l.memory_bound = x.sm.elementwise_time(3.0 * 4 * x.tokens * m.vocab / t);
  return l;
}

// Activations cross each chunk boundary once each way (SP: 1/tp of them), to
// the stage tp x cp x dp ranks on.
double pp_p2p_time(const StepContext& x) {
  const int t = x.shape.tp, pp = x.shape.pp, v = x.deck.parallel.virtual_stages;
  const double p2p_bytes = x.tokens * x.h * x.act_bytes / (x.sequence_parallel ? t : 1);
  const int stride = t * x.shape.cp * x.shape.dp;
  const Link link = x.link_for(2 * stride, stride);
  return pp > 1 ? 2 * v * (p2p_bytes / (link.gbps * 1e9 * x.c.comm_efficiency) +
                           link.latency_us * 1e-6)
                : 0;
}

// Backward moves the same again; SP's also gathers the two norms' outputs
// once more (kept for this rank's tokens only): half an all-reduce each.
MicroBatchTimes micro_batch_times(const StepContext& x, const LayerTimes& layer) {
  const double layers_per_rank = double(x.deck.model.layers) / x.shape.pp;
  MicroBatchTimes mb;
  mb.gemm = layers_per_rank * 3 * (layer.gemm + layer.scores);
  mb.memory_bound = layers_per_rank * 3 * layer.memory_bound;
  mb.tp_comm = layers_per_rank * (x.sequence_parallel ? 2.5 : 2.0) * layer.tp_comm;
  mb.recompute = layers_per_rank * layer_recompute(x, layer);
  mb.pp_p2p = pp_p2p_time(x);
  mb.cp_comm = cp_ring_time(x, layer);
  return mb;
}

// Past its cores a shared host is bound by core time: a bubble idles cores only
// while fewer of a pipeline's ranks are busy than it has cores, as in a
// pipeline with one stage per core.
double pp_bubble_time(const StepContext& x, double stage_mb, double logits) {
  const int pp = x.shape.pp, mbs = x.micro_batches;
  const int bubble_stages =
      x.cluster.shared_node
          ? std::clamp(int(std::lround(double(x.cluster.gpus_per_node) * pp / x.shape.size())), 1, pp)
          : pp;
  const double bubble_frac =
      bubble_stages > 1 ? theoretical_bubble(x.deck.parallel.schedule, bubble_stages, mbs,
                                             x.deck.parallel.virtual_stages)
                        : 0.0;
  const double avg_mb = stage_mb + logits / pp;
  return bubble_frac / (1 - bubble_frac) * mbs * avg_mb;
}

// AdamW touches the f32 master, both moments (read + write), the gradient and
// writes the weight (g, w: bytes of a gradient and a weight). `x.c` is the
// cluster as this rank sees it (a shared host's bandwidth already split).
//   none: AdamW at the device's memory bandwidth;
//   cpu:  the host's part (offload.ratio) at the host's bandwidth per GPU,
//         beside the device's part; the weights come back over PCIe while the
//         host updates (alternating staging), the gradients leave during the
//         last backward. On a shared host nothing overlaps: the same cores
//         also copy the gradients out and the weights back;
//   nvme: the state's kinds read and written back at the node's NVMe rate per
//         GPU (and over PCIe on a GPU), the update overlapped with the stream.
double optimizer_time(const StepContext& x, double shard, double backward_last) {
  const Cluster& c = x.c;
  const StepModel& sm = x.sm;
  const int g = x.g, w = x.w;
  const double adamw_bytes = 3 * 2 * 4 + g + w;
  const OffloadTarget home = x.deck.offload.optimizer;
  if (home == OffloadTarget::none) return sm.bytes_time(shard * adamw_bytes);
  const double per_gpu = c.shared_node ? 1.0 : 1.0 / c.gpus_per_node;
  if (home == OffloadTarget::nvme) {
    const double kinds = w == 4 ? 2 : 3;  // moments, and masters of 16-bit weights
    const double stream = 2 * shard * kinds * 4 / (c.nvme_gbps * per_gpu * 1e9);
    const double pcie = c.shared_node ? 0 : shard * kinds * 4 / (c.pcie_gbps * 1e9);
    return std::max({stream, pcie, sm.bytes_time(shard * adamw_bytes)});
  }
  const double host = shard * x.deck.offload.ratio, device = shard - host;
  const double on_device = sm.bytes_time(device * adamw_bytes);
  if (c.shared_node)  // plus the gradients' host copy and the weights' way back
    return on_device + sm.bytes_time(host * (adamw_bytes + 2 * g + 2 * w));
  const double on_host = host * adamw_bytes / (c.host_gbps * per_gpu * 1e9);
  const double back = host * (w == 4 ? 2 * w : w) / (c.pcie_gbps * 1e9);  // f32: over and back
  const double grads_out = host * g / (c.pcie_gbps * 1e9);
  return std::max({on_device, on_host, back}) + std::max(0.0, grads_out - backward_last);
}

}  // namespace trident
