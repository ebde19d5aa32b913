// GELU, GPT-2's tanh approximation, and its derivative, one element at a time:
// the plain kernels and the ones fused with bf16 rounding share them, so both
// compute the same values.
#pragma once
#include "compute/cpu/fast_math.hpp"

namespace trident::cpu {

template <class T> constexpr T kGeluK = T(0.7978845608028654);  // sqrt(2/pi)

template <class T>
inline T gelu_value(T x) {
  return T(0.5) * x * (T(1) + tanh_k(kGeluK<T> * (x + T(0.044715) * x * x * x)));
}

template <class T>
inline T gelu_slope(T x) {
  const T th = tanh_k(kGeluK<T> * (x + T(0.044715) * x * x * x));
  const T sech2 = T(1) - th * th;
  return T(0.5) * (T(1) + th) + T(0.5) * x * sech2 * kGeluK<T> * (T(1) + T(3 * 0.044715) * x * x);
}

}  // namespace trident::cpu
