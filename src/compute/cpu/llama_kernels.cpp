// RMSNorm, RoPE and SwiGLU of the Llama block (llama_kernels.hpp); the
// grouped-query attention is in gqa_attention.cpp.
#include "compute/cpu/llama_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "compute/cpu/fast_math.hpp"
#include "compute/cpu/vector_clones.hpp"

namespace trident::cpu {
namespace {
constexpr int kColBlock = 64;  // columns a thread owns in column-split reductions

template <class T>
T sigmoid(T x) { return T(1) / (T(1) + exp_k(-x)); }

void check_rope_range(const RopeTable& table, int T_, int hs, int pos0) {
  if (hs != 2 * table.half)
    throw std::invalid_argument("rope: head size " + std::to_string(hs) +
                                " but the table was built for " + std::to_string(2 * table.half));
  if (pos0 < 0 || pos0 + T_ > table.positions)
    throw std::out_of_range("rope: positions [" + std::to_string(pos0) + ", " +
                            std::to_string(pos0 + T_) + ") outside the table's " +
                            std::to_string(table.positions));
}

// Rotates each (x[i], x[i + half]) pair of `heads` heads of one row by the
// angles of one position; sign -1 rotates back (the transpose).
template <class T>
void rotate_row(T* x, const float* cs, const float* sn, int heads, int hs, T sign) {
  const int half = hs / 2;
  for (int h = 0; h < heads; ++h) {
    T* lo = x + std::size_t(h) * hs;
    T* hi = lo + half;
#pragma omp simd
    for (int i = 0; i < half; ++i) {
      const T c = cs[i], s = sign * T(sn[i]);
      const T x0 = lo[i], x1 = hi[i];
      lo[i] = x0 * c - x1 * s;  // rotate_half: (x0, x1) -> (-x1, x0)
      hi[i] = x1 * c + x0 * s;
    }
  }
}

template <class T>
void rope_apply(T* x, const RopeTable& table, int B, int T_, int heads, int hs, std::size_t ld,
                int pos0, T sign) {
  check_rope_range(table, T_, hs, pos0);
  const int half = table.half;
#pragma omp parallel for collapse(2) schedule(static) if (std::size_t(B) * T_ * heads * hs > 16384)
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T_; ++t) {
      const std::size_t p = std::size_t(pos0 + t) * half;
      rotate_row(x + (std::size_t(b) * T_ + t) * ld, table.cos.data() + p, table.sin.data() + p,
                 heads, hs, sign);
    }
}
}  // namespace

template <class T>
TRIDENT_VECTOR_CLONES
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int N, int C, T eps) {
#pragma omp parallel for schedule(static) if (std::size_t(N) * C > 16384)
  for (int i = 0; i < N; ++i) {
    const T* x = inp + std::size_t(i) * C;
    T ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; ++c) ss += x[c] * x[c];
    const T r = T(1) / std::sqrt(ss / C + eps);
    T* o = out + std::size_t(i) * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = x[c] * r * weight[c];
    rstd[i] = r;
  }
}

template <class T>
TRIDENT_VECTOR_CLONES
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                      const T* rstd, int N, int C) {
  if (dinp) {
    // With n = x r: dx = r (w g - n mean(w g n)), the mean term from r's dependence on x.
#pragma omp parallel for schedule(static) if (std::size_t(N) * C > 16384)
    for (int i = 0; i < N; ++i) {
      const std::size_t off = std::size_t(i) * C;
      const T *x = inp + off, *g = dout + off;
      const T r = rstd[i];
      T dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int c = 0; c < C; ++c) dot += weight[c] * g[c] * x[c] * r;
      dot /= C;
      T* dx = dinp + off;
#pragma omp simd
      for (int c = 0; c < C; ++c) dx[c] += r * (weight[c] * g[c] - x[c] * r * dot);
    }
  }
  if (!dweight) return;
#pragma omp parallel for schedule(static) if (std::size_t(N) * C > 16384)
  for (int c0 = 0; c0 < C; c0 += kColBlock) {
    const int c1 = std::min(C, c0 + kColBlock);
    for (int i = 0; i < N; ++i) {
      const std::size_t off = std::size_t(i) * C;
      const T r = rstd[i];
      for (int c = c0; c < c1; ++c) dweight[c] += inp[off + c] * r * dout[off + c];
    }
  }
}

// RoPE reads and writes each element once: memory-bound, no clones.
template <class T>
void rope_forward(T* x, const RopeTable& table, int B, int T_, int heads, int hs, std::size_t ld,
                  int pos0) {
  rope_apply(x, table, B, T_, heads, hs, ld, pos0, T(1));
}

template <class T>
void rope_backward(T* dx, const RopeTable& table, int B, int T_, int heads, int hs,
                   std::size_t ld, int pos0) {
  rope_apply(dx, table, B, T_, heads, hs, ld, pos0, T(-1));
}

template <class T>
TRIDENT_VECTOR_CLONES
void swiglu_forward(T* out, const T* inp, int N, int F) {
#pragma omp parallel for schedule(static) if (std::size_t(N) * F > 16384)
  for (int i = 0; i < N; ++i) {
    const T *a = inp + std::size_t(i) * 2 * F, *b = a + F;
    T* o = out + std::size_t(i) * F;
#pragma omp simd
    for (int j = 0; j < F; ++j) o[j] = a[j] * sigmoid(a[j]) * b[j];
  }
}

template <class T>
TRIDENT_VECTOR_CLONES
void swiglu_backward(T* dinp, const T* dout, const T* inp, int N, int F) {
#pragma omp parallel for schedule(static) if (std::size_t(N) * F > 16384)
  for (int i = 0; i < N; ++i) {
    const T *a = inp + std::size_t(i) * 2 * F, *b = a + F, *g = dout + std::size_t(i) * F;
    T *da = dinp + std::size_t(i) * 2 * F, *db = da + F;
#pragma omp simd
    for (int j = 0; j < F; ++j) {
      const T s = sigmoid(a[j]);
      da[j] += g[j] * b[j] * s * (T(1) + a[j] * (T(1) - s));  // silu'(a) = s (1 + a (1 - s))
      db[j] += g[j] * a[j] * s;
    }
  }
}

#define TRIDENT_INSTANTIATE(T)                                                                   \
  template void rmsnorm_forward<T>(T*, T*, const T*, const T*, int, int, T);                      \
  template void rmsnorm_backward<T>(T*, T*, const T*, const T*, const T*, const T*, int, int);    \
  template void rope_forward<T>(T*, const RopeTable&, int, int, int, int, std::size_t, int);      \
  template void rope_backward<T>(T*, const RopeTable&, int, int, int, int, std::size_t, int);     \
  template void swiglu_forward<T>(T*, const T*, int, int);                                        \
  template void swiglu_backward<T>(T*, const T*, const T*, int, int);

TRIDENT_INSTANTIATE(float)
TRIDENT_INSTANTIATE(double)
#undef TRIDENT_INSTANTIATE

}  // namespace trident::cpu
