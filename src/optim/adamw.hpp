// AdamW with decoupled weight decay (Loshchilov & Hutter), PyTorch semantics:
// p *= 1 - lr*wd; m, v moments; p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps).
// Decay applies to the tensors the table marks (matrices), not biases or norms.
#pragma once
#include <cstdint>
#include <vector>

#include "compute/backend.hpp"
#include "memory/arena.hpp"
#include "memory/tensor_table.hpp"
#include "optim/grad_view.hpp"

namespace trident {

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
  // bf16/f16: the model's weights are rounded to this type; the optimizer
  // keeps f32 master weights, updates them, and writes the rounded values back.
  DType weights = DType::f32;
  DType grads = DType::f32;  // how the gradients are stored (precision.reduce_dtype)
};

class AdamW {
 public:
  AdamW(const TensorTable& table, ComputeBackend& backend, MemoryLedger& ledger, AdamWConfig cfg);
  // With 16-bit weights: masters [first, first + n) from f32 values in the
  // table layout (e.g. the initial parameters), and the weights as the
  // masters' rounding.
  void init_masters(std::size_t first, const float* host, std::size_t n);
  void refresh_weights(Arena& params);
  // One update of every tensor in the table but `frozen` (a copy another rank
  // owns: pipedream's last-stage tied embedding) with the gradients times
  // grad_scale (unscaling and clipping); the step count advances by one.
  // The gradients are only read (scaled as they are read).
  void step(Arena& params, const Arena& grads, float lr, float grad_scale = 1.0f,
            const TensorInfo* frozen = nullptr);
  // Sum of squares of n gradients from element `first`, in f32.
  double grad_sum_squares(const Arena& grads, std::size_t first, std::size_t n) {
    return view_.sum_squares(grads, first, n);
  }
  double grad_sum_squares(const Arena& grads,
                          const std::vector<std::pair<std::size_t, std::size_t>>& ranges) {
    return view_.sum_squares(grads, ranges);
  }
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
  GradView view_;
  std::int64_t t_ = 0;
};

}  // namespace trident
