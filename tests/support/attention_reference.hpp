// The straightforward causal attention the flash kernels replaced, kept as
// the reference they are tested (tests/unit/test_attention.cpp) and timed
// (perf/bench_attention.cpp) against: per (batch, head), S = scale Q K^T into
// a (T, T) matrix, causal softmax in place, O = P V, as GEMMs on strided views
// of qkv. Backward reads the saved probabilities P and needs a second (T, T)
// buffer for their gradient.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>

#include "compute/cpu/blas.hpp"
#include "compute/cpu/fast_math.hpp"

namespace trident::reference {

// att: (B, NH, T, T) probabilities, kept for backward.
template <class T>
void attention_forward(T* out, T* att, const T* qkv, int B, int T_, int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const T scale = T(1) / std::sqrt(T(hs));
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const T* q = qkv + static_cast<std::size_t>(b) * T_ * C3 + h * hs;
      const T* k = q + C;
      const T* v = q + 2 * C;
      T* P = att + (static_cast<std::size_t>(b) * NH + h) * T_ * T_;
      cpu::gemm(false, true, T_, T_, hs, scale, q, C3, k, C3, T(0), P, T_);
      for (int t = 0; t < T_; ++t) {
        T* row = P + static_cast<std::size_t>(t) * T_;
        T mx = row[0];
        for (int j = 1; j <= t; ++j) mx = std::max(mx, row[j]);
        T sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j <= t; ++j) {
          row[j] = cpu::exp_k(row[j] - mx);
          sum += row[j];
        }
        const T inv = T(1) / sum;
        for (int j = 0; j <= t; ++j) row[j] *= inv;
        for (int j = t + 1; j < T_; ++j) row[j] = 0;
      }
      T* o = out + static_cast<std::size_t>(b) * T_ * C + h * hs;
      cpu::gemm(false, false, T_, hs, T_, T(1), P, T_, v, C3, T(0), o, C);
    }
  }
}

// Adds into dqkv; datt is scratch of att's size.
template <class T>
void attention_backward(T* dqkv, T* datt, const T* dout, const T* qkv, const T* att, int B, int T_,
                        int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const T scale = T(1) / std::sqrt(T(hs));
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const std::size_t qo = static_cast<std::size_t>(b) * T_ * C3 + h * hs;
      const T *q = qkv + qo, *k = q + C, *v = q + 2 * C;
      T *dq = dqkv + qo, *dk = dq + C, *dv = dq + 2 * C;
      const T* P = att + (static_cast<std::size_t>(b) * NH + h) * T_ * T_;
      T* dP = datt + (static_cast<std::size_t>(b) * NH + h) * T_ * T_;
      const T* dO = dout + static_cast<std::size_t>(b) * T_ * C + h * hs;
      cpu::gemm(false, true, T_, T_, hs, T(1), dO, C, v, C3, T(0), dP, T_);  // dP = dO V^T
      cpu::gemm(true, false, T_, hs, T_, T(1), P, T_, dO, C, T(1), dv, C3);  // dV += P^T dO
      for (int t = 0; t < T_; ++t) {  // softmax backward, in place: dP -> dS
        const T* p = P + static_cast<std::size_t>(t) * T_;
        T* d = dP + static_cast<std::size_t>(t) * T_;
        T dot = 0;
        for (int j = 0; j <= t; ++j) dot += p[j] * d[j];
        for (int j = 0; j <= t; ++j) d[j] = p[j] * (d[j] - dot);
        for (int j = t + 1; j < T_; ++j) d[j] = 0;
      }
      cpu::gemm(false, false, T_, hs, T_, scale, dP, T_, k, C3, T(1), dq, C3);  // dQ += s dS K
      cpu::gemm(true, false, T_, hs, T_, scale, dP, T_, q, C3, T(1), dk, C3);   // dK += s dS^T Q
    }
  }
}

}  // namespace trident::reference
