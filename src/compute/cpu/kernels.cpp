#include "compute/cpu/kernels.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "compute/cpu/blas.hpp"
#include "compute/cpu/fast_math.hpp"
#include "compute/cpu/gelu.hpp"
#include "compute/cpu/gemm_bf16.hpp"
#include "compute/cpu/vector_clones.hpp"
#include "core/half.hpp"

namespace trident::cpu {
namespace {
constexpr int kColBlock = 64;  // columns a thread owns in column-split reductions
constexpr double kLnEps = 1e-5;

// A linear layer's GEMM, on bf16 kernels where both operands hold bf16 values
// (a bf16 run's weights and rounded activations), else in f32.
void linear_gemm(bool ta, bool tb, int M, int N, int K, const float* A, int lda, const float* B,
                 int ldb, float beta, float* C, int ldc) {
  if (!gemm_bf16_valued(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc))
    gemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}
void linear_gemm(bool ta, bool tb, int M, int N, int K, const double* A, int lda, const double* B,
                 int ldb, double beta, double* C, int ldc) {
  gemm(ta, tb, M, N, K, 1.0, A, lda, B, ldb, beta, C, ldc);
}
}  // namespace

namespace {
// A table element's value: as stored, or widened from bf16 bits.
template <class T>
T table_value(T x) { return x; }
float table_value(std::uint16_t bits) { return bf16_to_f32(bits); }

template <class T, class W>
void lookup_rows(T* out, const std::int32_t* tok, const W* wte, int lo, int count, int N, int C) {
#pragma omp parallel for schedule(static) if (N * C > 16384)
  for (int n = 0; n < N; ++n) {
    T* o = out + static_cast<std::size_t>(n) * C;
    const int row = tok[n] - lo;
    if (row < 0 || row >= count) {
      for (int c = 0; c < C; ++c) o[c] = 0;
      continue;
    }
    const W* we = wte + static_cast<std::size_t>(row) * C;
    for (int c = 0; c < C; ++c) o[c] = table_value(we[c]);
  }
}
}  // namespace

template <class T>
void embedding_forward(T* out, const std::int32_t* tok, const T* wte, int lo, int count, int N,
                       int C) {
  lookup_rows(out, tok, wte, lo, count, N, C);
}

void embedding_forward_bits(float* out, const std::int32_t* tok, const std::uint16_t* wte, int lo,
                            int count, int N, int C) {
  lookup_rows(out, tok, wte, lo, count, N, C);
}

template <class T>
void embedding_backward(T* dwte, const T* dout, const std::int32_t* tok, int lo, int count, int N,
                        int C) {
  // Tokens repeat, so split by columns: each thread owns whole columns of dwte.
#pragma omp parallel for schedule(static) if (N * C > 16384)
  for (int c0 = 0; c0 < C; c0 += kColBlock) {
    const int c1 = std::min(C, c0 + kColBlock);
    for (int n = 0; n < N; ++n) {
      const int row = tok[n] - lo;
      if (row < 0 || row >= count) continue;
      const T* d = dout + static_cast<std::size_t>(n) * C;
      T* we = dwte + static_cast<std::size_t>(row) * C;
      for (int c = c0; c < c1; ++c) we[c] += d[c];
    }
  }
}

template <class T>
void position_forward(T* out, const T* wpe, int N, int T_, int first, int C) {
#pragma omp parallel for schedule(static) if (N * C > 16384)
  for (int n = 0; n < N; ++n) {
    const T* pe = wpe + static_cast<std::size_t>((first + n) % T_) * C;
    T* o = out + static_cast<std::size_t>(n) * C;
    for (int c = 0; c < C; ++c) o[c] += pe[c];
  }
}

template <class T>
void position_backward(T* dwpe, const T* dout, int N, int T_, int first, int C) {
#pragma omp parallel for schedule(static) if (N * C > 16384)
  for (int c0 = 0; c0 < C; c0 += kColBlock) {
    const int c1 = std::min(C, c0 + kColBlock);
    for (int n = 0; n < N; ++n) {
      const T* d = dout + static_cast<std::size_t>(n) * C;
      T* pe = dwpe + static_cast<std::size_t>((first + n) % T_) * C;
      for (int c = c0; c < c1; ++c) pe[c] += d[c];
    }
  }
}

template <class T>
TRIDENT_VECTOR_CLONES
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int N,
                       int C) {
#pragma omp parallel for schedule(static) if (N * C > 16384)
  for (int i = 0; i < N; ++i) {
    const T* x = inp + static_cast<std::size_t>(i) * C;
    T m = 0;
#pragma omp simd reduction(+ : m)
    for (int c = 0; c < C; ++c) m += x[c];
    m /= C;
    T v = 0;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; ++c) v += (x[c] - m) * (x[c] - m);
    v /= C;
    const T s = T(1) / std::sqrt(v + T(kLnEps));
    T* o = out + static_cast<std::size_t>(i) * C;
    for (int c = 0; c < C; ++c) o[c] = (x[c] - m) * s * w[c] + b[c];
    mean[i] = m;
    rstd[i] = s;
  }
}

template <class T>
TRIDENT_VECTOR_CLONES
void layernorm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w,
                        const T* mean, const T* rstd, int N, int C) {
  if (dinp) {
#pragma omp parallel for schedule(static) if (N * C > 16384)
    for (int i = 0; i < N; ++i) {
      const T* x = inp + static_cast<std::size_t>(i) * C;
      const T* d = dout + static_cast<std::size_t>(i) * C;
      T* dx = dinp + static_cast<std::size_t>(i) * C;
      const T m = mean[i], s = rstd[i];
      T dnorm_mean = 0, dnorm_norm_mean = 0;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
      for (int c = 0; c < C; ++c) {
        const T dnorm = w[c] * d[c];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * (x[c] - m) * s;
      }
      dnorm_mean /= C;
      dnorm_norm_mean /= C;
      for (int c = 0; c < C; ++c) {
        const T norm = (x[c] - m) * s;
        dx[c] += (w[c] * d[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
      }
    }
  }
  if (!dw) return;
#pragma omp parallel for schedule(static) if (N * C > 16384)
  for (int c0 = 0; c0 < C; c0 += kColBlock) {
    const int c1 = std::min(C, c0 + kColBlock);
    for (int i = 0; i < N; ++i) {
      const T* x = inp + static_cast<std::size_t>(i) * C;
      const T* d = dout + static_cast<std::size_t>(i) * C;
      for (int c = c0; c < c1; ++c) {
        dw[c] += (x[c] - mean[i]) * rstd[i] * d[c];
        db[c] += d[c];
      }
    }
  }
}

template <class T>
TRIDENT_VECTOR_CLONES
void add_bias(T* out, const T* bias, int N, int OC) {
#pragma omp parallel for schedule(static) if (N * OC > 16384)
  for (int i = 0; i < N; ++i) {
    T* o = out + static_cast<std::size_t>(i) * OC;
    for (int j = 0; j < OC; ++j) o[j] += bias[j];
  }
}

template <class T>
TRIDENT_VECTOR_CLONES
void bias_backward(T* dbias, const T* dout, int N, int OC) {
#pragma omp parallel for schedule(static) if (N * OC > 16384)
  for (int j0 = 0; j0 < OC; j0 += kColBlock) {
    const int j1 = std::min(OC, j0 + kColBlock);
    for (int i = 0; i < N; ++i) {
      const T* d = dout + static_cast<std::size_t>(i) * OC;
      for (int j = j0; j < j1; ++j) dbias[j] += d[j];
    }
  }
}

template <class T>
void matmul_forward(T* out, const T* inp, const T* w, const T* bias, int N, int IC, int OC) {
  linear_gemm(false, true, N, OC, IC, inp, IC, w, IC, T(0), out, OC);
  if (bias) add_bias(out, bias, N, OC);
}

template <class T>
void matmul_backward(T* dinp, T* dw, T* dbias, const T* dout, const T* inp, const T* w, int N,
                     int IC, int OC) {
  if (dinp) linear_gemm(false, false, N, IC, OC, dout, OC, w, IC, T(1), dinp, IC);
  if (dw) linear_gemm(true, false, OC, IC, N, dout, OC, inp, IC, T(1), dw, IC);
  if (dbias) bias_backward(dbias, dout, N, OC);
}

template <class T>
TRIDENT_VECTOR_CLONES
void gelu_forward(T* out, const T* inp, std::size_t n) {
#pragma omp parallel for simd schedule(static) if (n > 16384)
  for (std::size_t i = 0; i < n; ++i) out[i] = gelu_value(inp[i]);
}

template <class T>
TRIDENT_VECTOR_CLONES
void gelu_backward(T* dinp, const T* inp, const T* dout, std::size_t n) {
#pragma omp parallel for simd schedule(static) if (n > 16384)
  for (std::size_t i = 0; i < n; ++i) dinp[i] += gelu_slope(inp[i]) * dout[i];
}

template <class T>
TRIDENT_VECTOR_CLONES
void xent_max(T* row_max, const T* logits, int N, int V, int valid) {
#pragma omp parallel for schedule(static) if (std::size_t(N) * V > 16384)
  for (int i = 0; i < N; ++i) {
    const T* z = logits + static_cast<std::size_t>(i) * V;
    row_max[i] = max_of(z, valid, -std::numeric_limits<T>::infinity());
  }
}

template <class T>
TRIDENT_VECTOR_CLONES
void xent_sums(T* packed, const T* logits, const T* row_max, const std::int32_t* targets, int lo,
               int N, int V, int valid) {
#pragma omp parallel for schedule(static) if (std::size_t(N) * V > 16384)
  for (int i = 0; i < N; ++i) {
    const T* z = logits + static_cast<std::size_t>(i) * V;
    const T mx = row_max[i];
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < valid; ++j) sum += exp_k(z[j] - mx);
    packed[i] = sum;
    const int t = targets[i] - lo;
    packed[N + i] = (t >= 0 && t < valid) ? z[t] : T(0);
  }
}

template <class T>
TRIDENT_VECTOR_CLONES
void xent_finish(T* losses, T* dlogits, const T* logits, const T* row_max, const T* packed,
                 const std::int32_t* targets, int lo, int N, int V, int valid, T dloss) {
#pragma omp parallel for schedule(static) if (std::size_t(N) * V > 16384)
  for (int i = 0; i < N; ++i) {
    const T lse = row_max[i] + std::log(packed[i]);
    losses[i] = lse - packed[N + i];
    if (!dlogits) continue;
    const T* z = logits + static_cast<std::size_t>(i) * V;
    T* d = dlogits + static_cast<std::size_t>(i) * V;  // may alias z: read before write
    for (int j = 0; j < valid; ++j) d[j] = exp_k(z[j] - lse) * dloss;
    for (int j = valid; j < V; ++j) d[j] = 0;  // padding takes no part in the loss
    const int t = targets[i] - lo;
    if (t >= 0 && t < valid) d[t] -= dloss;
  }
}

#define TRIDENT_INSTANTIATE(T)                                                                   \
  template void embedding_forward<T>(T*, const std::int32_t*, const T*, int, int, int, int);      \
  template void embedding_backward<T>(T*, const T*, const std::int32_t*, int, int, int, int);     \
  template void position_forward<T>(T*, const T*, int, int, int, int);                            \
  template void position_backward<T>(T*, const T*, int, int, int, int);                           \
  template void layernorm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int, int);         \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*,         \
                                      const T*, int, int);                                        \
  template void add_bias<T>(T*, const T*, int, int);                                              \
  template void bias_backward<T>(T*, const T*, int, int);                                         \
  template void matmul_forward<T>(T*, const T*, const T*, const T*, int, int, int);               \
  template void matmul_backward<T>(T*, T*, T*, const T*, const T*, const T*, int, int, int);      \
  template void gelu_forward<T>(T*, const T*, std::size_t);                                       \
  template void gelu_backward<T>(T*, const T*, const T*, std::size_t);                            \
  template void xent_max<T>(T*, const T*, int, int, int);                                         \
  template void xent_sums<T>(T*, const T*, const T*, const std::int32_t*, int, int, int, int);    \
  template void xent_finish<T>(T*, T*, const T*, const T*, const T*, const std::int32_t*, int,    \
                               int, int, int, T);

TRIDENT_INSTANTIATE(float)
TRIDENT_INSTANTIATE(double)
#undef TRIDENT_INSTANTIATE

}  // namespace trident::cpu
