// predict_step's collectives: which link a group rides, what its bytes and its
// steps cost, and what data parallelism (dp-comm, dp-latency) and the context
// group's ring (cp-comm) leave exposed.
#include <algorithm>
#include <cmath>

#include "plan/cost_terms.hpp"

namespace trident {
namespace {

// Ring collectives move (nccl-tests' bus bandwidth) 2(n-1)/n of the buffer
// per rank for an all-reduce, (n-1)/n for a reduce-scatter or all-gather.
double ring_bandwidth_time(double bytes, int n, const Link& link, double efficiency,
                           double factor) {
  if (n <= 1 || bytes <= 0) return 0;
  return factor * (n - 1) / n * bytes / (link.gbps * 1e9 * efficiency);
}

// What a collective of `comm` seconds adds beside `compute` seconds it may
// hide behind.
double exposed_beside(double comm, double compute, double overlap) {
  return comm - overlap * std::min(comm, compute);
}

}  // namespace

// A group inside a node rides NVLink. One spanning nodes with k members per
// node runs k rings side by side, one per NIC (NCCL's channels): the node's
// NICs are shared by its groups, k each (up to nics_per_group), capped by
// NVLink. A shared host's ranks never leave it.
Link StepContext::link_for(int span, int stride) const {
  if (span <= c.gpus_per_node || c.shared_node) return c.intra;
  const int members = std::max(1, c.gpus_per_node / std::min(stride, c.gpus_per_node));
  const int nics = std::clamp(c.nics_per_group, 1, members);
  return Link{std::min(c.intra.gbps, nics * c.inter.gbps), c.inter.latency_us, true};
}

double StepContext::all_reduce_bandwidth(double bytes, int n, const Link& l) const {
  return ring_bandwidth_time(bytes, n, l, c.comm_efficiency, 2);
}

double StepContext::gather_bandwidth(double bytes, int n, const Link& l) const {
  return ring_bandwidth_time(bytes, n, l, c.comm_efficiency, 1);
}

// Across nodes NCCL all-reduces on its double binary trees, 2 log2(n) steps
// (Sanders et al. 2009; NCCL 2.4); reduce-scatter and all-gather have rings
// only: n - 1 steps, each waiting on the slowest rank of the step.
double StepContext::all_reduce_latency(int n, const Link& l) const {
  if (n <= 1) return 0;
  if (!l.across_nodes) return 2.0 * (n - 1) * l.latency_us * 1e-6;
  return 2.0 * std::ceil(std::log2(double(n))) * c.collective_step_us * 1e-6;
}

double StepContext::gather_latency(int n, const Link& l) const {
  if (n <= 1) return 0;
  return (n - 1) * (l.across_nodes ? c.collective_step_us : l.latency_us) * 1e-6;
}

// Gradients reduced over the data x context group (dp x cp ranks tp apart:
// weights are replicated over both), unit by unit (one a layer, and
// the embedding: zero_plan), each unit's collective once per step, or once
// per micro-batch where the stage's slots hold a unit rather than a step's
// sums (stages 2-3). The bytes overlap the backward (the gathers, ZeRO-3's
// micro-batch) where the link keeps up; the steps do not: every rank waits
// for the slowest to reach each one.
DataParallelTimes dp_comm_time(const StepContext& x, double psi, double backward,
                               double micro_batch) {
  const int t = x.shape.tp, dp = x.shape.replicas(), zs = x.deck.zero.stage;
  const int mbs = x.micro_batches;
  const Link link = x.link_for(t * dp, t);
  const double units = double(x.deck.model.layers) / x.shape.pp + 1;
  const double grads = psi * x.g, params = psi * x.w;
  DataParallelTimes d;
  if (x.cluster.shared_node) {
    // A shared host's collectives are copies by the same cores that compute,
    // so nothing hides them. Stage 3 also gathers each unit for forward and
    // again for backward.
    const double reduce = zs == 0 ? x.all_reduce(grads, dp, link) : x.gather(grads, dp, link);
    const double publish = x.gather(params, dp, link);  // the updated parameters, stages 1-2
    d.exposed = (zs >= 2 ? mbs : 1) * reduce + (zs == 1 || zs == 2 ? publish : 0);
    if (zs == 3) d.exposed += mbs * 2 * publish;
    return d;
  }
  const double reduce_bytes =
      zs == 0 ? x.all_reduce_bandwidth(grads, dp, link) : x.gather_bandwidth(grads, dp, link);
  const double reduce_steps =
      units * (zs == 0 ? x.all_reduce_latency(dp, link) : x.gather_latency(dp, link));
  const double gather_bytes = x.gather_bandwidth(params, dp, link);
  const double gather_steps = units * x.gather_latency(dp, link);
  const double overlap = x.c.comm_overlap;
  if (zs == 3) {
    // Each micro-batch gathers every unit for forward and for backward and
    // reduce-scatters its gradients, behind that micro-batch's compute.
    d.exposed = mbs * exposed_beside(2 * gather_bytes + reduce_bytes, micro_batch, overlap);
    d.latency = mbs * (2 * gather_steps + reduce_steps);
    return d;
  }
  const int reductions = zs == 2 ? mbs : 1;
  d.exposed = reductions * exposed_beside(reduce_bytes, backward, overlap);
  d.latency = reductions * reduce_steps;
  // The updated 16-bit parameters' all-gather follows the optimizer (ZeRO section 5).
  if (zs >= 1) d.exposed += gather_bytes, d.latency += gather_steps;
  return d;
}

// Ring attention: each layer's forward passes its key/value block cp - 1
// times around the context group (ranks tp apart), in f32 as Trident's ring
// moves them; backward passes the blocks again beside their gradients, twice
// the bytes; full recompute runs the forward's ring again. Each transfer is in
// flight while a block is computed, so the passes hide behind the layer's
// attention products (backward's: twice the forward's) as far as the
// cluster's overlap lets them. A shared host's cores copy what they compute
// beside, so there nothing hides.
double cp_ring_time(const StepContext& x, const LayerTimes& layer) {
  const int cp = x.shape.cp, t = x.shape.tp;
  if (cp <= 1) return 0;
  const GptConfig& m = x.deck.model;
  const double block = 2.0 * m.kv_width() / t * x.tokens * sizeof(float);
  const Link link = x.link_for(t * cp, t);
  const double pass =
      block / (link.gbps * 1e9 * x.c.comm_efficiency) + link.latency_us * 1e-6;
  const double forward = (cp - 1) * pass, backward = 2 * forward;
  const double overlap = x.cluster.shared_node ? 0 : x.c.comm_overlap;
  const double forwards = x.deck.train.recompute == Recompute::full ? 2 : 1;
  const double per_layer = forwards * exposed_beside(forward, layer.scores, overlap) +
                           exposed_beside(backward, 2 * layer.scores, overlap);
  return double(m.layers) / x.shape.pp * per_layer;
}

}  // namespace trident
