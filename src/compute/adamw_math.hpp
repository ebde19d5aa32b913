// One AdamW update written out so that every backend computes the same bits:
// the moments' updates and the denominator are fused multiply-adds, every
// other operation is rounded on its own (the CPU loop is compiled without FP
// contraction, the CUDA kernel uses the _rn intrinsics), and the step's
// constants are computed once on the host, here. ZeRO-Offload's host-side
// update then equals the device's bit for bit.
//   p = p (1 - lr wd);  m = fma(b1, m, (1 - b1) g);  v = fma(b2, v, ((1 - b2) g) g);
//   p = p - (lr / bc1) m / fma(sqrt(v), 1 / sqrt(bc2), eps)   (g: gradient x grad_scale)
#pragma once
#include <cmath>
#include <cstddef>

namespace trident {

// A run of elements of an AdamW update (ComputeBackend::adamw_spans).
struct AdamWSpan {
  std::size_t offset, n;
  bool decay;  // weight decay applies (matrices), or not (biases, norms)
};

struct AdamWScalars {
  float decay, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, step, inv_sqrt_bc2,
      grad_scale;
};

// lr * wd is exact in double, so the decay has one rounding whether or not a
// compiler fuses it.
inline AdamWScalars adamw_scalars(float lr, float beta1, float beta2, float eps, float wd,
                                  float bc1, float bc2, float grad_scale) {
  return {float(1.0 - double(lr) * double(wd)),
          beta1,
          float(1.0 - double(beta1)),
          beta2,
          float(1.0 - double(beta2)),
          eps,
          lr / bc1,
          float(1.0 / std::sqrt(double(bc2))),
          grad_scale};
}

}  // namespace trident
