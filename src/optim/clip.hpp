// The global gradient norm and the factor that unscales and clips the
// gradients: the one place either is computed. Every rank contributes the sum
// of squares of the gradient elements it counts (each element of the model
// counted on exactly one rank of `groups`, see GradEngine::grad_sum_squares);
// one all-reduce per group of (sum, non-finite flag) gives every rank the norm.
#pragma once
#include <array>
#include <vector>

#include "comm/communicator.hpp"

namespace trident {

struct GradNorm {
  double norm = 0;     // of the true gradients: the loss scale divided out
  bool finite = true;  // no inf or NaN in any gradient of any rank in the groups
};

// `sum_squares`: this rank's counted elements; `nonfinite`: any gradient this
// rank holds, counted or not, is inf/NaN (a replica can overflow alone).
GradNorm reduce_grad_norm(double sum_squares, bool nonfinite,
                          const std::vector<Communicator*>& groups, double loss_scale = 1.0);
// The same in two halves, for a reduction left in flight: what a rank
// contributes (sum of squares, non-finite flag), and the norm from their sums.
std::array<double, 2> grad_norm_terms(double sum_squares, bool nonfinite);
GradNorm grad_norm_of(const std::array<double, 2>& summed, double loss_scale = 1.0);

// What the stored gradients are multiplied by before the update: 1/loss_scale,
// times max_norm / (norm + 1e-6) when that is below 1 (PyTorch's
// clip_grad_norm_). max_norm <= 0 turns clipping off.
float clip_coefficient(double norm, double max_norm, double loss_scale = 1.0);

}  // namespace trident
