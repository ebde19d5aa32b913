#include "optim/clip.hpp"

#include <cmath>

namespace trident {

std::array<double, 2> grad_norm_terms(double sum_squares, bool nonfinite) {
  // The flag travels beside the sum: an inf counted nowhere must still stop the step.
  return {sum_squares, nonfinite || !std::isfinite(sum_squares) ? 1.0 : 0.0};
}

GradNorm grad_norm_of(const std::array<double, 2>& v, double loss_scale) {
  return GradNorm{std::sqrt(v[0]) / loss_scale, v[1] == 0.0};
}

GradNorm reduce_grad_norm(double sum_squares, bool nonfinite,
                          const std::vector<Communicator*>& groups, double loss_scale) {
  std::array<double, 2> v = grad_norm_terms(sum_squares, nonfinite);
  for (Communicator* g : groups)
    if (g->size() > 1) g->all_reduce(v.data(), 2, DType::f64, ReduceOp::sum);
  return grad_norm_of(v, loss_scale);
}

float clip_coefficient(double norm, double max_norm, double loss_scale) {
  const double clip = max_norm > 0 ? max_norm / (norm + 1e-6) : 1.0;
  return float((clip < 1.0 ? clip : 1.0) / loss_scale);
}

}  // namespace trident
