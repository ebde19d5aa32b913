#include "parallel/zero/zero_optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace trident {

ZeroOptimizer::ZeroOptimizer(ZeroStorage& storage, const TensorTable& table,
                             ComputeBackend& backend, MemoryLedger& ledger, AdamWConfig cfg,
                             const OffloadSection& offload, int rank)
    : storage_(storage),
      table_(table),
      backend_(backend),
      cfg_(cfg),
      home_(offload, backend, ledger, storage.plan().shard_size(),
            cfg.weights != DType::f32 ? 3 : 2, storage.grads_dtype(), rank) {
  view_ = GradView(backend, ledger, storage.grads_dtype(), storage.plan().shard_size());
  if (home_.updates_on_host()) {
    // ZeRO-Offload: each slice leaves for the host once its sum is final,
    // while backward computes the next units.
    on_host_.assign(storage.plan().units().size(), false);
    storage.on_final_grads([this](int u) { copy_grads_to_host(u, /*now=*/false); });
  }
}

void ZeroOptimizer::copy_grads_to_host(int u, bool now) {
  const ZeroUnit& U = storage_.plan().units()[u];
  on_host_[std::size_t(u)] = true;
  // The part of the slice whose state the host holds (offload.ratio).
  const std::size_t lo = std::max(U.shard_offset, home_.offloaded_first());
  const std::size_t hi = U.shard_offset + storage_.plan().slice(U);
  if (lo >= hi) return;
  const std::size_t w = dtype_size(storage_.grads_dtype());
  const char* grads = static_cast<const char*>(storage_.owned_grads(u)) + (lo - U.shard_offset) * w;
  if (now) backend_.copy_to_host(host_grads(lo), grads, (hi - lo) * w);
  else backend_.copy_to_host_async(host_grads(lo), grads, (hi - lo) * w);
}

void ZeroOptimizer::begin_step() {
  if (on_host_.empty()) return;
  backend_.wait_copies();
  std::fill(on_host_.begin(), on_host_.end(), false);
}

void ZeroOptimizer::grads_changed(int u) {
  if (!on_host_.empty()) on_host_[std::size_t(u)] = false;
}

template <class F>
void ZeroOptimizer::host_grad_chunks(std::size_t first, std::size_t n, F&& f) {
  const DType type = storage_.grads_dtype();
  if (type == DType::f32) return f(reinterpret_cast<const float*>(host_grads(first)), 0, n);
  float* wide = home_.staging_block(0);
  const std::size_t cap = home_.staging_elements();
  for (std::size_t off = 0; off < n; off += cap) {
    const std::size_t k = std::min(cap, n - off);
    home_.host_backend().convert(wide, DType::f32, host_grads(first + off), type, k);
    f(static_cast<const float*>(wide), off, k);
  }
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

template <class F>
void ZeroOptimizer::for_unit_ranges(std::size_t lo, std::size_t hi, F&& f) {
  const ZeroPlan& plan = storage_.plan();
  for (std::size_t u = 0; u < plan.units().size(); ++u) {
    const ZeroUnit& U = plan.units()[u];
    const std::size_t a = std::max(U.shard_offset, lo);
    const std::size_t b = std::min(U.shard_offset + plan.slice(U), hi);
    if (a < b) f(int(u), a, b);
  }
}

char* ZeroOptimizer::next_weights_staging() {
  char* staging = reinterpret_cast<char*>(home_.staging_block(1 + weights_block_));
  weights_block_ ^= 1;
  return staging;
}

// The owned 16-bit weights of shard elements [lo, hi) of a piece that starts
// at `first` become the rounding of the masters (`master`: element `first`),
// written into `staging` (host memory, element `first` at its start) or,
// without staging, into the owned weights themselves (`block`: the piece
// update_owned_params gave).
void ZeroOptimizer::round_weights(std::size_t first, std::size_t lo, std::size_t hi,
                                  const float* master, char* staging, void* block) {
  const DType type = storage_.param_dtype();
  if (staging) {
    home_.host_backend().convert(staging + (lo - first) * dtype_size(type), type,
                                 master + (lo - first), DType::f32, hi - lo);
    return;
  }
  for_unit_ranges(lo, hi, [&](int u, std::size_t a, std::size_t b) {
    backend_.convert(storage_.owned_param_at(u, a - storage_.plan().units()[u].shard_offset,
                                             first, block),
                     type, master + (a - first), DType::f32, b - a);
  });
}

// A piece's rounded weights, staged on the host, to the owned weights: they
// go while the host updates the next piece into the other staging block (the
// caller waits for the last). Waiting here for the previous piece's copies
// frees that other block.
void ZeroOptimizer::send_weights(std::size_t first, std::size_t count, const char* staging,
                                 void* block) {
  const std::size_t w = dtype_size(storage_.param_dtype());
  backend_.wait_copies();
  for_unit_ranges(first, first + count, [&](int u, std::size_t a, std::size_t b) {
    void* weights =
        storage_.owned_param_at(u, a - storage_.plan().units()[u].shard_offset, first, block);
    const char* from = staging + (a - first) * w;
    if (block) backend_.copy_from_host(weights, from, (b - a) * w);
    else backend_.copy_from_host_async(weights, from, (b - a) * w);
  });
}

void ZeroOptimizer::refresh_weights() {
  if (!has_masters()) return;
  home_.for_blocks([&](std::size_t first, std::size_t count, float* const* state) {
    const bool on_host = block_on_host(first);
    storage_.update_owned_params(first, count, [&](std::size_t a, std::size_t k, void* block) {
      char* staging = on_host ? next_weights_staging() : nullptr;
      round_weights(a, a, a + k, state[OptimizerHome::masters] + (a - first), staging, block);
      if (staging) send_weights(a, k, staging, block);
    });
  }, /*write_back=*/false);
  backend_.wait_copies();
  storage_.publish_params();
}

double ZeroOptimizer::grad_sum_squares(bool count_tp_replicated) {
  const ZeroPlan& plan = storage_.plan();
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  for_owned(0, plan.shard_size(), [&](const TensorInfo& t, int u, std::size_t off, std::size_t n) {
    if (!t.primary || (t.split_dim < 0 && !count_tp_replicated)) return;
    if (plan.units()[u].persistent && plan.rank() != 0) return;
    ranges.emplace_back(storage_.owned_grads_first(u) + off, n);
  });
  // The tensors' sums added in the same order, with one wait for all of them:
  // a device backend synchronises its stream for each sum it returns.
  return view_.sum_squares(storage_.owned_grads_arena(), ranges);
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
// host memory and AdamW runs there, on the home's host backend, reading the
// gradients' host copy (slices backward did not send, or that changed since,
// are copied first); f32 weights pass through a staging block and back,
// 16-bit ones are rounded on the host. Same arithmetic either way
// (compute/adamw_math.hpp): bit for bit as without offload.
// With offload.ratio < 1 the device's part is the first block: on CUDA its
// kernels run while the host updates the rest.
// Where the update writes host memory, bf16 weights come out of the update
// itself (one pass over the masters fewer; the padding between tensors is
// rounded apart, as the separate rounding does).
void ZeroOptimizer::step(float lr, float grad_scale) {
  ++t_;
  const float bc1 = 1.0f - static_cast<float>(std::pow(double(cfg_.beta1), double(t_)));
  const float bc2 = 1.0f - static_cast<float>(std::pow(double(cfg_.beta2), double(t_)));
  const bool masters = has_masters();
  const Arena& grads = storage_.owned_grads_arena();
  if (home_.updates_on_host()) {
    backend_.wait_copies();
    for (std::size_t u = 0; u < on_host_.size(); ++u)
      if (!on_host_[u]) copy_grads_to_host(int(u), /*now=*/true);
    std::fill(on_host_.begin(), on_host_.end(), false);
  }
  home_.for_blocks([&](std::size_t first, std::size_t count, float* const* state) {
    const bool on_host = block_on_host(first);
    const bool fused = masters && storage_.param_dtype() == DType::bf16 &&
                       (on_host || backend_.memory_is_host());
    ComputeBackend& update = on_host ? home_.host_backend() : backend_;
    float* p_stage = on_host ? home_.staging_block(1) : nullptr;
    float* m = state[OptimizerHome::exp_avg];
    float* v = state[OptimizerHome::exp_avg_sq];
    float* master = masters ? state[OptimizerHome::masters] : nullptr;
    // Offloaded parameters come through the storage in pieces of the block.
    storage_.update_owned_params(first, count, [&](std::size_t a, std::size_t k, void* block) {
      char* staging = on_host && masters ? next_weights_staging() : nullptr;
      std::size_t rounded = a;  // fused: the piece's weights below this are written
      for_owned(a, k, [&](const TensorInfo& t, int u, std::size_t off, std::size_t n) {
        const std::size_t s = storage_.plan().units()[u].shard_offset + off;  // shard element
        const std::size_t at = s - first;
        void* weights = masters ? nullptr : storage_.owned_param_at(u, off, a, block);
        float* p = masters ? master + at : on_host ? p_stage : static_cast<float*>(weights);
        std::uint16_t* bits = nullptr;
        if (fused) {
          if (rounded < s) round_weights(a, rounded, s, master + (a - first), staging, block);
          bits = staging ? reinterpret_cast<std::uint16_t*>(staging) + (s - a)
                         : static_cast<std::uint16_t*>(storage_.owned_param_at(u, off, a, block));
          rounded = s + n;
        }
        if (on_host && weights) backend_.copy_to_host(p, weights, n * sizeof(float));
        auto adamw = [&](const float* g, std::size_t o, std::size_t c) {
          update.adamw(p + o, g, m + at + o, v + at + o, c, lr, cfg_.beta1, cfg_.beta2,
                       cfg_.eps, t.weight_decay ? cfg_.weight_decay : 0.0f, bc1, bc2, grad_scale,
                       bits ? bits + o : nullptr);
        };
        if (on_host)
          host_grad_chunks(s, n, adamw);
        else
          view_.for_chunks(grads, storage_.owned_grads_first(u) + off, n, adamw);
        if (on_host && weights) backend_.copy_from_host(weights, p, n * sizeof(float));
      });
      if (!masters) return;
      if (rounded < a + k) round_weights(a, rounded, a + k, master + (a - first), staging, block);
      if (staging) send_weights(a, k, staging, block);
    });
  });
  backend_.wait_copies();
  storage_.publish_params();
}

}  // namespace trident
