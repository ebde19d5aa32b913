// Learning-rate schedule: linear warm-up to lr, then cosine decay to min_lr at
// the last step.
#pragma once
#include <cmath>

namespace trident {

inline double lr_at(int step, int steps, int warmup, double lr, double min_lr) {
  if (step < warmup) return lr * (step + 1) / warmup;
  if (step >= steps) return min_lr;
  const double ratio = double(step - warmup) / double(steps - warmup);
  return min_lr + 0.5 * (1.0 + std::cos(3.141592653589793 * ratio)) * (lr - min_lr);
}

}  // namespace trident
