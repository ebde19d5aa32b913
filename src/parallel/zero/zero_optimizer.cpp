#include "parallel/zero/zero_optimizer.hpp"

#include <algorithm>
#include <cmath>

namespace trident {

ZeroOptimizer::ZeroOptimizer(ZeroStorage& storage, const TensorTable& table,
                             ComputeBackend& backend, MemoryLedger& ledger, AdamWConfig cfg,
                             const OffloadSection& offload, int rank)
    : storage_(storage),
      table_(table),
      backend_(backend),
      cfg_(cfg),
      home_(offload, backend, ledger, storage.plan().shard_size(),
            cfg.weights != DType::f32 ? 3 : 2, rank) {
  view_ = GradView(backend, ledger, storage.grads_dtype(), storage.plan().shard_size());
}

void ZeroOptimizer::init_masters(std::size_t first, const float* host, std::size_t n) {
  if (!has_masters()) return;
  const ZeroPlan& plan = storage_.plan();
  for (const ZeroUnit& U : plan.units()) {  // each unit's slice is one range of the table
    const std::size_t lo = std::max(first, plan.slice_begin(U));
    const std::size_t hi = std::min(first + n, plan.slice_begin(U) + plan.slice(U));
    if (lo < hi)
      home_.write(OptimizerHome::masters, U.shard_offset + (lo - plan.slice_begin(U)), hi - lo,
                  host + (lo - first));
  }
}

template <class F>
void ZeroOptimizer::for_owned(std::size_t first, std::size_t count, F&& f) {
  const ZeroPlan& plan = storage_.plan();
  const std::size_t last = first + count;
  for (std::size_t u = 0; u < plan.units().size(); ++u) {
    const ZeroUnit& U = plan.units()[u];
    const std::size_t so = U.shard_offset, slice = plan.slice(U);
    if (so >= last || so + slice <= first) continue;
    const std::size_t lo = plan.slice_begin(U), hi = lo + slice;
    for (const TensorInfo& t : table_.tensors()) {
      // The tensor's part of the slice, in slice offsets, then cut to the block.
      const std::size_t a = std::max(lo, t.offset), b = std::min(hi, t.offset + t.numel);
      if (a >= b) continue;
      const std::size_t s0 = std::max(so + (a - lo), first), s1 = std::min(so + (b - lo), last);
      if (s0 < s1) f(t, int(u), s0 - so, s1 - s0);  // offset within the slice, length
    }
  }
}

// The owned 16-bit weights of shard elements [first, first + count) become
// the rounding of `master` (element `first` of the masters); `block` is the
// piece of the parameters update_owned_params gave. Masters in host memory
// (a cpu home) are rounded there and the weights copied over.
void ZeroOptimizer::round_weights(std::size_t first, std::size_t count, const float* master,
                                  void* block) {
  const ZeroPlan& plan = storage_.plan();
  const DType type = storage_.param_dtype();
  const bool on_host = home_.updates_on_host();
  void* rounded = on_host ? home_.staging_block(1) : nullptr;  // 16-bit values fit in floats
  for (std::size_t u = 0; u < plan.units().size(); ++u) {
    const ZeroUnit& U = plan.units()[u];
    const std::size_t a = std::max(U.shard_offset, first);
    const std::size_t b = std::min(U.shard_offset + plan.slice(U), first + count);
    if (a >= b) continue;
    void* weights = storage_.owned_param_at(int(u), a - U.shard_offset, first, block);
    if (!on_host) {
      backend_.convert(weights, type, master + (a - first), DType::f32, b - a);
      continue;
    }
    home_.host_backend().convert(rounded, type, master + (a - first), DType::f32, b - a);
    backend_.copy_from_host(weights, rounded, (b - a) * dtype_size(type));
  }
}

void ZeroOptimizer::refresh_weights() {
  if (!has_masters()) return;
  home_.for_blocks([&](std::size_t first, std::size_t count, float* const* state) {
    storage_.update_owned_params(first, count, [&](std::size_t a, std::size_t k, void* block) {
      round_weights(a, k, state[OptimizerHome::masters] + (a - first), block);
    });
  }, /*write_back=*/false);
  storage_.publish_params();
}

double ZeroOptimizer::grad_sum_squares(bool count_tp_replicated) {
  const ZeroPlan& plan = storage_.plan();
  double s = 0;
  for_owned(0, plan.shard_size(), [&](const TensorInfo& t, int u, std::size_t off, std::size_t n) {
    if (!t.primary || (t.split_dim < 0 && !count_tp_replicated)) return;
    if (plan.units()[u].persistent && plan.rank() != 0) return;
    s += view_.sum_squares(storage_.owned_grads_arena(), storage_.owned_grads_first(u) + off, n);
  });
  return s;
}

bool ZeroOptimizer::grads_nonfinite() {
  double s = 0;
  storage_.for_each_owned_grads([&](const Arena& a, std::size_t first, std::size_t n) {
    s += view_.sum_squares(a, first, n);
  });
  return !std::isfinite(s);
}

// Block by block of the home (the whole shard when it is resident): the
// update of each element, then, with 16-bit weights, their rounding. A cpu
// home updates on the host (ZeRO-Offload): the moments and masters stay in
// host memory and AdamW runs there, on the home's host backend; each piece's
// gradients come from the backend's memory through a staging block, f32
// weights through the other and back, 16-bit ones rounded on the host. Same
// arithmetic either way (compute/adamw_math.hpp): bit for bit as without offload.
void ZeroOptimizer::step(float lr, float grad_scale) {
  ++t_;
  const float bc1 = 1.0f - static_cast<float>(std::pow(double(cfg_.beta1), double(t_)));
  const float bc2 = 1.0f - static_cast<float>(std::pow(double(cfg_.beta2), double(t_)));
  const bool masters = has_masters(), on_host = home_.updates_on_host();
  ComputeBackend& update = on_host ? home_.host_backend() : backend_;
  float* g_stage = on_host ? home_.staging_block(0) : nullptr;
  float* p_stage = on_host ? home_.staging_block(1) : nullptr;
  const Arena& grads = storage_.owned_grads_arena();
  home_.for_blocks([&](std::size_t first, std::size_t count, float* const* state) {
    float* m = state[OptimizerHome::exp_avg];
    float* v = state[OptimizerHome::exp_avg_sq];
    float* master = masters ? state[OptimizerHome::masters] : nullptr;
    // Offloaded parameters come through the storage in pieces of the block.
    storage_.update_owned_params(first, count, [&](std::size_t a, std::size_t k, void* block) {
      for_owned(a, k, [&](const TensorInfo& t, int u, std::size_t off, std::size_t n) {
        const std::size_t at = storage_.plan().units()[u].shard_offset + off - first;
        void* weights = masters ? nullptr : storage_.owned_param_at(u, off, a, block);
        float* p = masters ? master + at : on_host ? p_stage : static_cast<float*>(weights);
        if (on_host && weights) backend_.copy_to_host(p, weights, n * sizeof(float));
        const std::size_t g0 = storage_.owned_grads_first(u) + off;
        view_.for_chunks(grads, g0, n, [&](float* g, std::size_t o, std::size_t c) {
          if (on_host) backend_.copy_to_host(g_stage, g, c * sizeof(float)), g = g_stage;
          update.adamw(p + o, g, m + at + o, v + at + o, c, lr, cfg_.beta1, cfg_.beta2,
                       cfg_.eps, t.weight_decay ? cfg_.weight_decay : 0.0f, bc1, bc2, grad_scale,
                       nullptr);
        });
        if (on_host && weights) backend_.copy_from_host(weights, p, n * sizeof(float));
      });
      if (masters) round_weights(a, k, master + (a - first), block);
    });
  });
  storage_.publish_params();
}

}  // namespace trident
