#include "parallel/zero/zero_optimizer.hpp"

#include <cmath>

namespace trident {

ZeroOptimizer::ZeroOptimizer(ZeroStorage& storage, const TensorTable& table,
                             ComputeBackend& backend, MemoryLedger& ledger, AdamWConfig cfg)
    : storage_(storage), table_(table), backend_(backend), cfg_(cfg) {
  const std::size_t n = storage.plan().shard_size();
  m_ = Arena(backend, ledger, MemCategory::optimizer, n);
  v_ = Arena(backend, ledger, MemCategory::optimizer, n);
  if (cfg.weights != DType::f32) master_ = Arena(backend, ledger, MemCategory::optimizer, n);
  view_ = GradView(backend, ledger, storage.grads_dtype(), n);
}

void ZeroOptimizer::init_masters(const std::vector<float>& host) {
  if (!master_.numel()) return;
  const ZeroPlan& plan = storage_.plan();
  for (const ZeroUnit& U : plan.units())
    backend_.copy_from_host(master_.f32() + U.shard_offset, host.data() + plan.slice_begin(U),
                            plan.slice(U) * sizeof(float));
}

void ZeroOptimizer::refresh_weights() {
  if (!master_.numel()) return;
  const ZeroPlan& plan = storage_.plan();
  for (std::size_t u = 0; u < plan.units().size(); ++u) {
    const ZeroUnit& U = plan.units()[u];
    backend_.convert(storage_.owned_params(int(u)), storage_.param_dtype(),
                     master_.f32() + U.shard_offset, DType::f32, plan.slice(U));
  }
  storage_.publish_params();
}

template <class F>
void ZeroOptimizer::for_owned(F&& f) {
  const ZeroPlan& plan = storage_.plan();
  for (std::size_t u = 0; u < plan.units().size(); ++u) {
    const ZeroUnit& U = plan.units()[u];
    const std::size_t lo = plan.slice_begin(U), hi = lo + plan.slice(U);
    for (const TensorInfo& t : table_.tensors()) {
      const std::size_t a = std::max(lo, t.offset), b = std::min(hi, t.offset + t.numel);
      if (a < b) f(t, int(u), a - lo, b - a);  // offset within the slice, length
    }
  }
}

double ZeroOptimizer::grad_sum_squares(bool count_tp_replicated) {
  const ZeroPlan& plan = storage_.plan();
  double s = 0;
  for_owned([&](const TensorInfo& t, int u, std::size_t off, std::size_t n) {
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

void ZeroOptimizer::step(float lr, float grad_scale) {
  ++t_;
  const float bc1 = 1.0f - static_cast<float>(std::pow(double(cfg_.beta1), double(t_)));
  const float bc2 = 1.0f - static_cast<float>(std::pow(double(cfg_.beta2), double(t_)));
  const ZeroPlan& plan = storage_.plan();
  const bool masters = master_.numel() > 0;
  for_owned([&](const TensorInfo& t, int u, std::size_t off, std::size_t n) {
    const std::size_t so = plan.units()[u].shard_offset + off;
    float* p = masters ? master_.f32() + so : static_cast<float*>(storage_.owned_params(u)) + off;
    const std::size_t first = storage_.owned_grads_first(u) + off;
    view_.for_chunks(storage_.owned_grads_arena(), first, n, [&](float* g, std::size_t o, std::size_t k) {
      if (grad_scale != 1.0f) backend_.scale(g, grad_scale, k);
      backend_.adamw(p + o, g, m_.f32() + so + o, v_.f32() + so + o, k, lr, cfg_.beta1, cfg_.beta2,
                     cfg_.eps, t.weight_decay ? cfg_.weight_decay : 0.0f, bc1, bc2);
    });
  });
  if (masters) refresh_weights();  // the owned 16-bit weights, then publish
  else storage_.publish_params();
}

}  // namespace trident
