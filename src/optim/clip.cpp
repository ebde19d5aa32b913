#include "optim/clip.hpp"

#include <cmath>

namespace trident {

GradNorm reduce_grad_norm(double sum_squares, bool nonfinite,
                          const std::vector<Communicator*>& groups, double loss_scale) {
  // The flag travels beside the sum: an inf counted nowhere must still stop the step.
  double v[2] = {sum_squares, nonfinite || !std::isfinite(sum_squares) ? 1.0 : 0.0};
  for (Communicator* g : groups)
    if (g->size() > 1) g->all_reduce(v, 2, DType::f64, ReduceOp::sum);
  return GradNorm{std::sqrt(v[0]) / loss_scale, v[1] == 0.0};
}

float clip_coefficient(double norm, double max_norm, double loss_scale) {
  const double clip = max_norm > 0 ? max_norm / (norm + 1e-6) : 1.0;
  return float((clip < 1.0 ? clip : 1.0) / loss_scale);
}

}  // namespace trident
