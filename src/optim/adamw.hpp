// AdamW with decoupled weight decay (Loshchilov & Hutter), PyTorch semantics:
// p *= 1 - lr*wd; m, v moments; p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps).
// Decay applies to the tensors the table marks (matrices), not biases or norms.
#pragma once
#include <cstdint>

#include "compute/backend.hpp"
#include "memory/arena.hpp"
#include "memory/tensor_table.hpp"

namespace trident {

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
  // bf16/f16: the model's weights are rounded to this type; the optimizer
  // keeps f32 master weights, updates them, and writes the rounded values back.
  DType weights = DType::f32;
};

class AdamW {
 public:
  AdamW(const TensorTable& table, ComputeBackend& backend, MemoryLedger& ledger, AdamWConfig cfg);
  // With 16-bit weights: take the masters from the (not yet rounded) parameters.
  void init_masters(const Arena& params);
  // One update of every tensor in the table but `frozen` (a copy another rank
  // owns: pipedream's last-stage tied embedding); the step count advances by one.
  void step(Arena& params, const Arena& grads, float lr, const TensorInfo* frozen = nullptr);
  std::int64_t steps_taken() const { return t_; }
  void set_steps_taken(std::int64_t t) { t_ = t; }  // restoring a checkpoint
  Arena& first_moment() { return m_; }
  Arena& second_moment() { return v_; }
  Arena* masters() { return master_.numel() ? &master_ : nullptr; }

 private:
  const TensorTable& table_;
  ComputeBackend& backend_;
  AdamWConfig cfg_;
  Arena m_, v_, master_;
  std::int64_t t_ = 0;
};

}  // namespace trident
