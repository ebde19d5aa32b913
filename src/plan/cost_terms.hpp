// predict_step's cost terms, one function each, named as Prediction::costs
// names them (gemm, memory-bound, recompute, tp-comm, cp-comm, pp-p2p,
// pp-bubble, dp-comm, optimizer), over what every term reads: the layout and
// the cluster as one rank sees it. Internal to plan/.
#pragma once
#include "grid/grid.hpp"
#include "io/deck.hpp"
#include "plan/cluster.hpp"

namespace trident {

// One GEMM's time at the cluster's efficiency for its size, and what
// element-wise and memory-bound passes take.
struct StepModel {
  const GptConfig& m;
  const Cluster& c;
  int tp, dtype_bytes;
  Precision dtype;
  double peak;              // FLOP/s per rank
  double elementwise_gbps;  // what a rank's element-wise kernels move

  double gemm(double rows, double cols, double inner, double count = 1) const;
  double bytes_time(double bytes) const { return bytes / (c.hbm_gbps * 1e9); }
  double elementwise_time(double bytes) const { return bytes / (elementwise_gbps * 1e9); }
};

// The layout and the cluster as one of its ranks sees it. Not copyable:
// `sm` refers to `c`.
struct StepContext {
  StepContext(const Deck& deck, const GridShape& shape, const Cluster& cluster,
              bool stored_attention);
  StepContext(const StepContext&) = delete;
  StepContext& operator=(const StepContext&) = delete;

  const Deck& deck;
  const GridShape& shape;
  const Cluster& cluster;  // as given
  bool stored_attention;
  int micro_batch, micro_batches;
  bool sequence_parallel;  // and tp > 1
  int w, g;                // bytes of a weight and of a reduced gradient
  // this-cpu: every rank runs on this one host (sharing cores once there are
  // more ranks than cores), so they split its FLOP/s, bandwidth and memory.
  int on_node;
  Cluster c;  // the cluster's bandwidths as this rank gets them
  StepModel sm;
  double h, s;          // d_model, seq_len
  double rows;          // a rank's rows of each sequence: seq_len / cp
  double tokens;        // the rank's tokens of a micro-batch
  int act_bytes;        // an activation's bytes as passes and messages move it

  // A group spanning `span` ranks, members `stride` apart: NVLink inside a
  // node, else the node's NICs shared by its groups (cost_terms_comm.cpp).
  Link link_for(int span, int stride) const;
  // A collective's time moving its bytes, and its steps' latency.
  double all_reduce_bandwidth(double bytes, int n, const Link& l) const;
  double gather_bandwidth(double bytes, int n, const Link& l) const;  // also reduce-scatter
  double all_reduce_latency(int n, const Link& l) const;
  double gather_latency(int n, const Link& l) const;
  double all_reduce(double bytes, int n, const Link& l) const {
    return all_reduce_bandwidth(bytes, n, l) + all_reduce_latency(n, l);
  }
  double gather(double bytes, int n, const Link& l) const {
    return gather_bandwidth(bytes, n, l) + gather_latency(n, l);
  }
};

// Weights of one block's linears (Q, K and V at GQA's widths, the
// projection, the MLP's two or, SwiGLU, three matrices).
double block_matmul_weights(const GptConfig& m);
// Parameters one rank holds before ZeRO: its layers, and the embedding's
// tables on the first and last stage, split over the tensor group.
double parameters_on_rank(const GptConfig& m, const GridShape& shape);

// One layer's forward on one micro-batch, by kind of work.
struct LayerTimes {
  double gemm = 0;          // the four linears
  double scores = 0;        // attention's two batched products
  double memory_bound = 0;  // element-wise passes
  double rebuilt = 0;       // what selective recompute rebuilds element-wise
  double tp_comm = 0;       // the tensor group's all-reduces
};
LayerTimes layer_forward(const StepContext& x);
double layer_recompute(const StepContext& x, const LayerTimes& layer);

// The logits on the last stage: the tied head's GEMMs and the loss's passes.
struct LogitsTimes {
  double gemm = 0, memory_bound = 0;
  double total() const { return gemm + memory_bound; }
};
LogitsTimes logits_times(const StepContext& x);

// One micro-batch on one stage (without the head), per cost term.
struct MicroBatchTimes {
  double gemm = 0, memory_bound = 0, tp_comm = 0, recompute = 0, pp_p2p = 0, cp_comm = 0;
  double stage() const { return gemm + memory_bound + tp_comm + recompute + pp_p2p + cp_comm; }
};
MicroBatchTimes micro_batch_times(const StepContext& x, const LayerTimes& layer);
// Ring attention's key/value blocks around the context group on one stage's
// layers, what the attention blocks beside them leave exposed; 0 at cp 1.
double cp_ring_time(const StepContext& x, const LayerTimes& layer);
double pp_p2p_time(const StepContext& x);
// The schedule's idle time over a step whose stages take `stage_mb` per
// micro-batch and the last one `logits` more.
double pp_bubble_time(const StepContext& x, double stage_mb, double logits);

// Data-parallel traffic the compute does not hide: the bytes of the
// gradients' reduction and the updated parameters' gather, ZeRO-3's gathers
// of each unit (dp-comm); and the collectives' steps (dp-latency), which
// wait on every rank of the group and so are not hidden. The group is data x
// context: weights are replicated over both.
struct DataParallelTimes {
  double exposed = 0, latency = 0;
  double total() const { return exposed + latency; }
};
// `psi`: parameters on this rank; `backward`: a micro-batch's backward, which
// a reduction overlaps; `micro_batch`: a micro-batch on the last stage,
// behind which ZeRO-3's gathers hide.
DataParallelTimes dp_comm_time(const StepContext& x, double psi, double backward,
                               double micro_batch);
// The optimizer step over `shard` parameters where offload.optimizer puts it.
double optimizer_time(const StepContext& x, double shard, double backward_last);

}  // namespace trident
