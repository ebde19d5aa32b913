#include "optim/adamw.hpp"

#include <cmath>

namespace trident {

AdamW::AdamW(const TensorTable& table, ComputeBackend& backend, MemoryLedger& ledger,
             AdamWConfig cfg)
    : table_(table), backend_(backend), cfg_(cfg) {
  m_ = Arena(backend, ledger, MemCategory::optimizer, table.size());
  v_ = Arena(backend, ledger, MemCategory::optimizer, table.size());
  if (cfg.weights != DType::f32) master_ = Arena(backend, ledger, MemCategory::optimizer, table.size());
}

void AdamW::init_masters(const Arena& params) {
  if (master_.numel()) backend_.copy(master_.data(), params.data(), params.bytes());
}

void AdamW::step(Arena& params, const Arena& grads, float lr, const TensorInfo* frozen) {
  ++t_;
  const float bc1 = 1.0f - static_cast<float>(std::pow(double(cfg_.beta1), double(t_)));
  const float bc2 = 1.0f - static_cast<float>(std::pow(double(cfg_.beta2), double(t_)));
  Arena& target = master_.numel() ? master_ : params;
  // A frozen tensor's master follows its weights, so the refresh below keeps them.
  if (frozen && master_.numel())
    backend_.copy(master_.f32(*frozen), params.f32(*frozen), frozen->numel * sizeof(float));
  for (const TensorInfo& t : table_.tensors()) {
    if (frozen && t.offset == frozen->offset) continue;
    backend_.adamw(target.f32(t), grads.f32(t), m_.f32(t), v_.f32(t), t.numel, lr, cfg_.beta1,
                   cfg_.beta2, cfg_.eps, t.weight_decay ? cfg_.weight_decay : 0.0f, bc1, bc2);
  }
  if (master_.numel()) {  // refresh the 16-bit weights from the masters
    backend_.copy(params.data(), master_.data(), params.bytes());
    backend_.round_to(params.f32(), cfg_.weights, params.numel());
  }
}

}  // namespace trident
