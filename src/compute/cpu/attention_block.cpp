// Ring attention's block kernels on the CPU, FlashAttention-2's algorithms
// (Dao 2023) on strided views, with the whole-sequence kernels' machinery
// (compute/cpu/attention.cpp): their tile, the vectorised exp and row
// maximum of fast_math.hpp, loops compiled for the widest vector unit
// (vector_clones.hpp), and a causal row's exp only over the keys it sees.
// Forward walks key tiles with an online softmax and merges the block's
// normalised output into the running one by log-sum-exp; backward recomputes
// each tile's probabilities from the final lse, key tiles outermost so a key
// tile's dK and dV stay in cache while the query tiles pass. Forward: one
// thread owns a (batch, head, query tile); backward: one owns a (batch,
// head), so dK and dV sum in a fixed order without atomics and the bits do
// not depend on the thread count. Computes in T (f32 for bf16 runs too: the
// probabilities are not rounded).
#include "compute/cpu/attention_block.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "compute/cpu/blas.hpp"
#include "compute/cpu/fast_math.hpp"
#include "compute/cpu/kernel_scratch.hpp"
#include "compute/cpu/kernels.hpp"
#include "compute/cpu/vector_clones.hpp"

// The helpers' loops run inside the callers' vector clones only if inlined
// there (a call would run the baseline build of them).
#define TRIDENT_TILE_LOOP [[gnu::always_inline]] inline

namespace trident::cpu {
namespace {

constexpr int kTile = kAttentionTile;

// (b, h)'s first row of a view.
template <class V>
auto head_rows(const V& rows, int b, int h, int hs) {
  return rows.data + b * rows.seq + std::size_t(h) * hs;
}

// How many keys of the tile at j0 (nk of them) query i0 + r sees: on the
// diagonal block, those up to its own position.
template <class T>
TRIDENT_TILE_LOOP int seen_keys(const AttentionBlockOf<T>& a, int i0, int r, int j0, int nk) {
  return a.causal ? std::min(nk, i0 + r + 1 - j0) : nk;
}

template <class T>
struct ForwardTiles {  // one thread's scores, output rows, running max and sum
  ScratchVector<T> S, acc, m, l;
  explicit ForwardTiles(int hs)
      : S(kTile * kTile), acc(std::size_t(kTile) * hs), m(kTile), l(kTile) {}
};

// The scores S become P = exp(S - m) under the updated running max m (zero
// past a row's keys); the running sums and output rows follow that max.
template <class T>
TRIDENT_TILE_LOOP void online_softmax(const AttentionBlockOf<T>& a, ForwardTiles<T>& t, int i0,
                                      int nq, int j0, int nk, int hs) {
  for (int r = 0; r < nq; ++r) {
    T* row = t.S.data() + std::size_t(r) * kTile;
    const int n = seen_keys(a, i0, r, j0, nk);
    const T mx = max_of(row, n, t.m[r]);
    const T corr = exp_k(t.m[r] - mx);  // rescales what earlier tiles summed
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int c = 0; c < n; ++c) {
      row[c] = exp_k(row[c] - mx);
      sum += row[c];
    }
    std::fill(row + n, row + nk, T(0));
    t.l[r] = t.l[r] * corr + sum;
    t.m[r] = mx;
    T* o = t.acc.data() + std::size_t(r) * hs;
#pragma omp simd
    for (int d = 0; d < hs; ++d) o[d] *= corr;
  }
}

// out, lse <- the log-sum-exp merge of (out, lse) and the block's rows
// (acc / l, m + log l); a row nothing was merged into yet (lse -inf, out
// zero) takes the block's.
template <class T>
TRIDENT_TILE_LOOP void merge_rows(const AttentionBlockOf<T>& a, const ForwardTiles<T>& t, int b,
                                  int h, int i0, int nq, int hs) {
  T* out = head_rows(a.out, b, h, hs) + std::size_t(i0) * a.out.row;
  T* lse = a.lse + b * a.lse_seq + h * a.lse_head + i0;
  for (int r = 0; r < nq; ++r) {
    const T block = t.m[r] + std::log(t.l[r]);
    T keep = 0, add = 1, merged = block;
    if (lse[r] != -std::numeric_limits<T>::infinity()) {
      const T hi = std::max(lse[r], block);
      merged = hi + std::log(std::exp(lse[r] - hi) + std::exp(block - hi));
      keep = std::exp(lse[r] - merged), add = std::exp(block - merged);
    }
    const T w = add / t.l[r];
    const T* o = t.acc.data() + std::size_t(r) * hs;
    T* dst = out + std::size_t(r) * a.out.row;
#pragma omp simd
    for (int d = 0; d < hs; ++d) dst[d] = dst[d] * keep + o[d] * w;
    lse[r] = merged;
  }
}

template <class T>
TRIDENT_TILE_LOOP void forward_tile(const AttentionBlockOf<T>& a, int b, int h, int i0,
                                    ForwardTiles<T>& t) {
  const int hs = a.width / a.heads, nq = std::min(kTile, a.queries - i0);
  const T scale = T(1) / std::sqrt(T(hs));
  const T* q = head_rows(a.q, b, h, hs) + std::size_t(i0) * a.q.row;
  const T *k = head_rows(a.k, b, h, hs), *v = head_rows(a.v, b, h, hs);
  std::fill(t.m.begin(), t.m.end(), -std::numeric_limits<T>::infinity());
  std::fill(t.l.begin(), t.l.end(), T(0));
  std::fill(t.acc.begin(), t.acc.end(), T(0));
  const int keys = a.causal ? std::min(a.keys, i0 + nq) : a.keys;
  for (int j0 = 0; j0 < keys; j0 += kTile) {
    const int nk = std::min(kTile, keys - j0);
    gemm(false, true, nq, nk, hs, scale, q, int(a.q.row), k + std::size_t(j0) * a.k.row,
         int(a.k.row), T(0), t.S.data(), kTile);  // S = s Q_i K_j^T
    online_softmax(a, t, i0, nq, j0, nk, hs);
    gemm(false, false, nq, hs, nk, T(1), t.S.data(), kTile, v + std::size_t(j0) * a.v.row,
         int(a.v.row), T(1), t.acc.data(), hs);  // acc += P V_j
  }
  merge_rows(a, t, b, h, i0, nq, hs);
}

template <class T>
struct BackwardTiles {  // one thread's probabilities, score gradients, D of the queries
  ScratchVector<T> P, dS, D;
  explicit BackwardTiles(int queries) : P(kTile * kTile), dS(kTile * kTile), D(queries) {}
};

// D_t = dO_t . O_t over a head's columns (FA2 algorithm 2, line 4).
template <class T>
TRIDENT_TILE_LOOP void row_dots(T* D, const T* dO, std::size_t ld_dO, const T* o,
                                std::size_t ld_o, int rows, int hs) {
  for (int t = 0; t < rows; ++t) {
    const T *g = dO + t * ld_dO, *x = o + t * ld_o;
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int d = 0; d < hs; ++d) sum += g[d] * x[d];
    D[t] = sum;
  }
}

// The scores P of query rows [i0, i0 + nq) become exp(S - lse), zero past a
// row's keys.
template <class T>
TRIDENT_TILE_LOOP void probabilities(const AttentionBlockOf<T>& a, T* P, const T* lse, int i0,
                                     int nq, int j0, int nk) {
  for (int r = 0; r < nq; ++r) {
    T* row = P + std::size_t(r) * kTile;
    const int n = seen_keys(a, i0, r, j0, nk);
    const T lt = lse[i0 + r];
#pragma omp simd
    for (int c = 0; c < n; ++c) row[c] = exp_k(row[c] - lt);
    std::fill(row + n, row + nk, T(0));
  }
}

// dS = s P (dP - D), the scale folded in; dS holds dP on entry.
template <class T>
TRIDENT_TILE_LOOP void score_grads(T* dS, const T* P, const T* D, int nq, int nk, T scale) {
  for (int r = 0; r < nq; ++r) {
    const T* p = P + std::size_t(r) * kTile;
    T* ds = dS + std::size_t(r) * kTile;
    const T Dt = D[r];
#pragma omp simd
    for (int c = 0; c < nk; ++c) ds[c] = scale * p[c] * (ds[c] - Dt);
  }
}

// One (batch, head): every key tile against the query tiles that see it.
template <class T>
TRIDENT_TILE_LOOP void backward_head(const AttentionBlockOf<T>& a,
                                     const AttentionBlockGradsOf<T>& g, int b, int h,
                                     BackwardTiles<T>& t) {
  const int hs = a.width / a.heads;
  const T scale = T(1) / std::sqrt(T(hs));
  const T *q = head_rows(a.q, b, h, hs), *k = head_rows(a.k, b, h, hs);
  const T *v = head_rows(a.v, b, h, hs), *dO = head_rows(g.dout, b, h, hs);
  T *dq = head_rows(g.dq, b, h, hs), *dk = head_rows(g.dk, b, h, hs);
  T* dv = head_rows(g.dv, b, h, hs);
  const T* lse = a.lse + b * a.lse_seq + h * a.lse_head;
  row_dots(t.D.data(), dO, g.dout.row, head_rows(a.out, b, h, hs), a.out.row, a.queries, hs);
  const int ldq = int(a.q.row), ldk = int(a.k.row), ldv = int(a.v.row), ldo = int(g.dout.row);
  for (int j0 = 0; j0 < a.keys; j0 += kTile) {
    const int nk = std::min(kTile, a.keys - j0);
    const T *kj = k + std::size_t(j0) * ldk, *vj = v + std::size_t(j0) * ldv;
    T *dkj = dk + std::size_t(j0) * g.dk.row, *dvj = dv + std::size_t(j0) * g.dv.row;
    for (int i0 = a.causal ? j0 : 0; i0 < a.queries; i0 += kTile) {  // diagonal: from j0
      const int nq = std::min(kTile, a.queries - i0);
      const T *qi = q + std::size_t(i0) * ldq, *dOi = dO + std::size_t(i0) * ldo;
      gemm(false, true, nq, nk, hs, scale, qi, ldq, kj, ldk, T(0), t.P.data(), kTile);
      probabilities(a, t.P.data(), lse, i0, nq, j0, nk);
      gemm(true, false, nk, hs, nq, T(1), t.P.data(), kTile, dOi, ldo, T(1), dvj,
           int(g.dv.row));  // dV_j += P^T dO_i
      gemm(false, true, nq, nk, hs, T(1), dOi, ldo, vj, ldv, T(0), t.dS.data(), kTile);  // dP
      score_grads(t.dS.data(), t.P.data(), t.D.data() + i0, nq, nk, scale);
      gemm(false, false, nq, hs, nk, T(1), t.dS.data(), kTile, kj, ldk, T(1),
           dq + std::size_t(i0) * g.dq.row, int(g.dq.row));  // dQ_i += dS K_j
      gemm(true, false, nk, hs, nq, T(1), t.dS.data(), kTile, qi, ldq, T(1), dkj,
           int(g.dk.row));  // dK_j += dS^T Q_i
    }
  }
}

}  // namespace

template <class T>
TRIDENT_VECTOR_CLONES
void attention_block_forward(const AttentionBlockOf<T>& a) {
  const int tiles = (a.queries + kTile - 1) / kTile;
#pragma omp parallel
  {
    ForwardTiles<T> t(a.width / a.heads);
    // Later query tiles of a diagonal block see more keys: hand them out dynamically.
#pragma omp for collapse(3) schedule(dynamic)
    for (int b = 0; b < a.batch; ++b)
      for (int h = 0; h < a.heads; ++h)
        for (int i = 0; i < tiles; ++i) forward_tile(a, b, h, i * kTile, t);
  }
}

template <class T>
TRIDENT_VECTOR_CLONES
void attention_block_backward(const AttentionBlockOf<T>& a, const AttentionBlockGradsOf<T>& g) {
#pragma omp parallel
  {
    BackwardTiles<T> t(a.queries);
#pragma omp for collapse(2) schedule(dynamic)
    for (int b = 0; b < a.batch; ++b)
      for (int h = 0; h < a.heads; ++h) backward_head(a, g, b, h, t);
  }
}

template void attention_block_forward(const AttentionBlockOf<float>&);
template void attention_block_forward(const AttentionBlockOf<double>&);
template void attention_block_backward(const AttentionBlockOf<float>&,
                                       const AttentionBlockGradsOf<float>&);
template void attention_block_backward(const AttentionBlockOf<double>&,
                                       const AttentionBlockGradsOf<double>&);

}  // namespace trident::cpu
