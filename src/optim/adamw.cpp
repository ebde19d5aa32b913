#include "optim/adamw.hpp"

#include <cmath>
#include <vector>

namespace trident {

AdamW::AdamW(const TensorTable& table, ComputeBackend& backend, MemoryLedger& ledger,
             AdamWConfig cfg)
    : table_(table), backend_(backend), cfg_(cfg) {
  m_ = Arena(backend, ledger, MemCategory::optimizer, table.size());
  v_ = Arena(backend, ledger, MemCategory::optimizer, table.size());
  if (cfg.weights != DType::f32) master_ = Arena(backend, ledger, MemCategory::optimizer, table.size());
  view_ = GradView(backend, ledger, cfg.grads, table.size());
}

void AdamW::init_masters(std::size_t first, const float* host, std::size_t n) {
  if (master_.numel()) backend_.copy_from_host(master_.f32() + first, host, n * sizeof(float));
}

void AdamW::refresh_weights(Arena& params) {
  if (master_.numel())
    backend_.convert(params.data(), params.dtype(), master_.data(), DType::f32, params.numel());
}

void AdamW::step(Arena& params, const Arena& grads, float lr, float grad_scale,
                 const TensorInfo* frozen) {
  ++t_;
  const float bc1 = 1.0f - static_cast<float>(std::pow(double(cfg_.beta1), double(t_)));
  const float bc2 = 1.0f - static_cast<float>(std::pow(double(cfg_.beta2), double(t_)));
  Arena& target = master_.numel() ? master_ : params;
  // A frozen tensor's master follows its weights, so the refresh below keeps them.
  if (frozen && master_.numel())
    backend_.convert(master_.f32(*frozen), DType::f32,
                     static_cast<const char*>(params.data()) + frozen->offset * dtype_size(params.dtype()),
                     params.dtype(), frozen->numel);
  // bf16 weights are the masters' rounding, written by the update itself.
  auto* bf16 = params.dtype() == DType::bf16 ? static_cast<std::uint16_t*>(params.data()) : nullptr;
  const float wd = cfg_.weight_decay;
  if (view_.in_place()) {  // f32 gradients: the whole table in one call
    std::vector<AdamWSpan> spans;
    for (const TensorInfo& t : table_.tensors())
      if (!(frozen && t.offset == frozen->offset))
        spans.push_back({t.offset, t.numel, t.weight_decay});
    backend_.adamw_spans(target.f32(), grads.f32(), m_.f32(), v_.f32(), spans.data(),
                         spans.size(), lr, cfg_.beta1, cfg_.beta2, cfg_.eps, wd, bc1, bc2,
                         grad_scale, bf16);
  } else {
    for (const TensorInfo& t : table_.tensors()) {
      if (frozen && t.offset == frozen->offset) continue;
      view_.for_chunks(grads, t.offset, t.numel, [&](float* g, std::size_t off, std::size_t n) {
        backend_.adamw(target.f32(t) + off, g, m_.f32(t) + off, v_.f32(t) + off, n, lr,
                       cfg_.beta1, cfg_.beta2, cfg_.eps, t.weight_decay ? wd : 0.0f, bc1, bc2,
                       grad_scale, bf16 ? bf16 + t.offset + off : nullptr);
      });
    }
  }
  if (!bf16) refresh_weights(params);  // f16 weights: the masters' rounding
}

}  // namespace trident
