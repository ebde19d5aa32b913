#include "optim/clip.hpp"

#include <cmath>

namespace trident {

double global_grad_norm(ComputeBackend& backend, const Arena& grads, const TensorTable& table,
                        bool count_replicated, const std::vector<Communicator*>& groups) {
  double s = 0;
  bool all = count_replicated;
  for (const TensorInfo& t : table.tensors()) all = all && t.primary;
  if (all) {
    s = backend.sum_squares(grads.f32(), grads.numel());  // one pass over the arena
  } else {
    for (const TensorInfo& t : table.tensors())
      if (t.primary && (t.split_dim >= 0 || count_replicated))
        s += backend.sum_squares(grads.f32(t), t.numel);
  }
  for (Communicator* g : groups)
    if (g->size() > 1) g->all_reduce(&s, 1, DType::f64, ReduceOp::sum);
  return std::sqrt(s);
}

float clip_gradients(ComputeBackend& backend, Arena& grads, double norm, double max_norm) {
  if (max_norm <= 0) return 1.0f;
  const double coef = max_norm / (norm + 1e-6);
  if (coef >= 1.0) return 1.0f;
  backend.scale(grads.f32(), static_cast<float>(coef), grads.numel());
  return static_cast<float>(coef);
}

}  // namespace trident
