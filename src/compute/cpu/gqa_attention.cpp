// Grouped-query causal attention (llama_kernels.hpp) without the T x T matrix,
// as FlashAttention-2 (Dao 2023): forward walks key tiles with an online
// softmax (algorithm 1) and saves each query's log-sum-exp; backward
// recomputes a tile's probabilities from q, k and it (algorithm 2). Tile
// products are GEMMs on strided views of qkv (rows (NH + 2 KVH) hs apart).
// Forward: one thread owns a (batch, query head, query tile). Backward: one
// thread owns a (batch, key/value head) and walks its group's query heads in
// order, so dK and dV sum over the group in a fixed order with no atomics and
// no per-head copies; the bits do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "compute/cpu/blas.hpp"
#include "compute/cpu/fast_math.hpp"
#include "compute/cpu/kernel_scratch.hpp"
#include "compute/cpu/llama_kernels.hpp"
#include "compute/cpu/vector_clones.hpp"

namespace trident::cpu {
namespace {

// Where one batch's heads start in qkv, and how far apart its rows are.
struct QkvLayout {
  int NH, KVH, hs, group;
  std::size_t row;  // (NH + 2 KVH) hs
  QkvLayout(int nh, int kvh, int head_size)
      : NH(nh), KVH(kvh), hs(head_size), group(0), row(std::size_t(nh + 2 * kvh) * hs) {
    if (kvh <= 0 || nh % kvh != 0)
      throw std::invalid_argument("gqa attention: kv heads " + std::to_string(kvh) +
                                  " must divide the heads " + std::to_string(nh));
    group = nh / kvh;
  }
  std::size_t q(int h) const { return std::size_t(h) * hs; }
  std::size_t k(int h) const { return std::size_t(NH + h / group) * hs; }
  std::size_t v(int h) const { return std::size_t(NH + KVH + h / group) * hs; }
};

// The probabilities of query rows [i0, i0 + nq) against keys [j0, j0 + nk)
// from the saved log-sum-exp: P = exp(s q k^T - L), zero above the diagonal.
template <class T>
void recompute_probabilities(T* P, int ldp, const T* q, const T* k, std::size_t ld, const T* L,
                             int i0, int nq, int j0, int nk, int hs, T scale) {
  gemm(false, true, nq, nk, hs, scale, q + std::size_t(i0) * ld, int(ld),
       k + std::size_t(j0) * ld, int(ld), T(0), P, ldp);
  for (int r = 0; r < nq; ++r) {
    T* row = P + std::size_t(r) * ldp;
    const int n = std::clamp(i0 + r + 1 - j0, 0, nk);  // keys <= the query's position
    const T lt = L[i0 + r];
#pragma omp simd
    for (int c = 0; c < n; ++c) row[c] = exp_k(row[c] - lt);
    for (int c = n; c < nk; ++c) row[c] = 0;
  }
}

}  // namespace

template <class T>
TRIDENT_VECTOR_CLONES
void gqa_attention_forward(T* out, T* lse, const T* qkv, int B, int T_, int NH, int KVH, int hs) {
  const QkvLayout at(NH, KVH, hs);
  const T scale = T(1) / std::sqrt(T(hs));
  const int tile = kGqaTile, tiles = (T_ + tile - 1) / tile, C = NH * hs;
#pragma omp parallel
  {
    ScratchVector<T> S(tile * tile), acc(std::size_t(tile) * hs), m(tile), l(tile);
    // Later query tiles see more keys: hand them out dynamically.
#pragma omp for collapse(3) schedule(dynamic)
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < NH; ++h) {
        for (int it = 0; it < tiles; ++it) {
          const T* base = qkv + std::size_t(b) * T_ * at.row;
          const T *q = base + at.q(h), *k = base + at.k(h), *v = base + at.v(h);
          const int i0 = it * tile, nq = std::min(tile, T_ - i0);
          std::fill(acc.begin(), acc.end(), T(0));
          std::fill(m.begin(), m.end(), -std::numeric_limits<T>::infinity());
          std::fill(l.begin(), l.end(), T(0));
          for (int j0 = 0; j0 < i0 + nq; j0 += tile) {  // key tiles up to the diagonal
            const int nk = std::min(tile, i0 + nq - j0);
            gemm(false, true, nq, nk, hs, scale, q + std::size_t(i0) * at.row, int(at.row),
                 k + std::size_t(j0) * at.row, int(at.row), T(0), S.data(), tile);
            for (int r = 0; r < nq; ++r) {
              T* row = S.data() + std::size_t(r) * tile;
              const int n = std::min(nk, i0 + r + 1 - j0);  // >= 1: tiles align, j0 <= i0
              const T mx = max_of(row, n, m[r]);
              const T corr = exp_k(m[r] - mx);  // rescales what earlier tiles summed
              T sum = 0;
#pragma omp simd reduction(+ : sum)
              for (int c = 0; c < n; ++c) {
                row[c] = exp_k(row[c] - mx);
                sum += row[c];
              }
              for (int c = n; c < nk; ++c) row[c] = 0;
              l[r] = l[r] * corr + sum;
              m[r] = mx;
              T* a = acc.data() + std::size_t(r) * hs;
              for (int d = 0; d < hs; ++d) a[d] *= corr;
            }
            gemm(false, false, nq, hs, nk, T(1), S.data(), tile, v + std::size_t(j0) * at.row,
                 int(at.row), T(1), acc.data(), hs);  // acc += P V_j
          }
          for (int r = 0; r < nq; ++r) {
            const int t = i0 + r;
            const T inv = T(1) / l[r];
            T* o = out + (std::size_t(b) * T_ + t) * C + at.q(h);
            const T* a = acc.data() + std::size_t(r) * hs;
            for (int d = 0; d < hs; ++d) o[d] = a[d] * inv;
            lse[(std::size_t(b) * NH + h) * T_ + t] = m[r] + std::log(l[r]);
          }
        }
      }
    }
  }
}

template <class T>
TRIDENT_VECTOR_CLONES
void gqa_attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse,
                            int B, int T_, int NH, int KVH, int hs) {
  const QkvLayout at(NH, KVH, hs);
  const T scale = T(1) / std::sqrt(T(hs));
  const int tile = kGqaTile, C = NH * hs, ld = int(at.row);
#pragma omp parallel
  {
    ScratchVector<T> P(tile * tile), dS(tile * tile), D(T_);
#pragma omp for collapse(2) schedule(dynamic)
    for (int b = 0; b < B; ++b) {
      for (int g = 0; g < KVH; ++g) {
        for (int h = g * at.group; h < (g + 1) * at.group; ++h) {  // the group's query heads
          const std::size_t base = std::size_t(b) * T_ * at.row;
          const T *q = qkv + base + at.q(h), *k = qkv + base + at.k(h), *v = qkv + base + at.v(h);
          T *dq = dqkv + base + at.q(h), *dk = dqkv + base + at.k(h), *dv = dqkv + base + at.v(h);
          const std::size_t oo = std::size_t(b) * T_ * C + at.q(h);
          const T* dO = dout + oo;
          const T* L = lse + (std::size_t(b) * NH + h) * T_;
          // D_t = dO_t . O_t = sum_j P_tj dP_tj (FA2 algorithm 2, line 4).
          for (int t = 0; t < T_; ++t) {
            const T *o = out + oo + std::size_t(t) * C, *d = dO + std::size_t(t) * C;
            T sum = 0;
#pragma omp simd reduction(+ : sum)
            for (int c = 0; c < hs; ++c) sum += o[c] * d[c];
            D[t] = sum;
          }
          for (int j0 = 0; j0 < T_; j0 += tile) {
            const int nk = std::min(tile, T_ - j0);
            for (int i0 = j0; i0 < T_; i0 += tile) {  // causal: query tiles from the diagonal
              const int nq = std::min(tile, T_ - i0);
              const T* dOi = dO + std::size_t(i0) * C;
              recompute_probabilities(P.data(), tile, q, k, at.row, L, i0, nq, j0, nk, hs, scale);
              gemm(true, false, nk, hs, nq, T(1), P.data(), tile, dOi, C, T(1),
                   dv + std::size_t(j0) * ld, ld);  // dV_j += P^T dO_i
              gemm(false, true, nq, nk, hs, T(1), dOi, C, v + std::size_t(j0) * ld, ld, T(0),
                   dS.data(), tile);  // dP = dO_i V_j^T
              for (int r = 0; r < nq; ++r) {  // dS = s P (dP - D), scale folded in
                const T* p = P.data() + std::size_t(r) * tile;
                T* ds = dS.data() + std::size_t(r) * tile;
                const T Dt = D[i0 + r];
#pragma omp simd
                for (int c = 0; c < nk; ++c) ds[c] = scale * p[c] * (ds[c] - Dt);
              }
              gemm(false, false, nq, hs, nk, T(1), dS.data(), tile, k + std::size_t(j0) * ld, ld,
                   T(1), dq + std::size_t(i0) * ld, ld);  // dQ_i += dS K_j
              gemm(true, false, nk, hs, nq, T(1), dS.data(), tile, q + std::size_t(i0) * ld, ld,
                   T(1), dk + std::size_t(j0) * ld, ld);  // dK_j += dS^T Q_i
            }
          }
        }
      }
    }
  }
}

#define TRIDENT_INSTANTIATE(T)                                                                   \
  template void gqa_attention_forward<T>(T*, T*, const T*, int, int, int, int, int);              \
  template void gqa_attention_backward<T>(T*, const T*, const T*, const T*, const T*, int, int,   \
                                          int, int, int);

TRIDENT_INSTANTIATE(float)
TRIDENT_INSTANTIATE(double)
#undef TRIDENT_INSTANTIATE

}  // namespace trident::cpu
