// Ring attention's block kernels on the CPU, FlashAttention-2's algorithms
// (Dao 2023) on strided views: forward walks key tiles with an online softmax
// and merges the block's normalised output into the running one by
// log-sum-exp; backward recomputes each tile's probabilities from the final
// lse. Forward: one thread owns a (batch, head, query tile); backward: one
// owns a (batch, head), so dK and dV sum in a fixed order without atomics and
// the bits do not depend on the thread count. Computes in T (f32 for bf16
// runs too: the probabilities are not rounded).
#include "compute/cpu/attention_block.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "compute/cpu/blas.hpp"
#include "compute/cpu/kernel_scratch.hpp"

namespace trident::cpu {
namespace {

constexpr int kTile = 64;

// The keys a query tile [i0, i0 + nq) sees: all, or up to its last row.
template <class T>
int visible_keys(const AttentionBlockOf<T>& a, int i0, int nq) {
  return a.causal ? std::min(a.keys, i0 + nq) : a.keys;
}

// Sets the scores of keys after their query to -inf (a diagonal tile).
template <class T>
void mask_tile(T* S, int nq, int nk, int i0, int j0) {
  for (int i = 0; i < nq; ++i)
    for (int j = std::max(0, i0 + i - j0 + 1); j < nk; ++j)
      S[std::size_t(i) * kTile + j] = -std::numeric_limits<T>::infinity();
}

// out, lse <- the log-sum-exp merge of (out, lse) and one block's (o, l).
template <class T>
void merge_row(T* out, T& lse, const T* o, T l, int hs) {
  if (lse == -std::numeric_limits<T>::infinity()) {
    std::copy(o, o + hs, out);
    lse = l;
    return;
  }
  const T hi = std::max(lse, l);
  const T merged = hi + std::log(std::exp(lse - hi) + std::exp(l - hi));
  const T keep = std::exp(lse - merged), add = std::exp(l - merged);
  for (int c = 0; c < hs; ++c) out[c] = out[c] * keep + o[c] * add;
  lse = merged;
}

template <class T>
void forward_tile(const AttentionBlockOf<T>& a, int b, int h, int i0, ScratchVector<T>& S,
                  ScratchVector<T>& acc, ScratchVector<T>& m, ScratchVector<T>& l) {
  const int hs = a.width / a.heads, nq = std::min(kTile, a.queries - i0);
  const T scale = T(1) / std::sqrt(T(hs));
  const T* q = a.q.data + b * a.q.seq + std::size_t(i0) * a.q.row + std::size_t(h) * hs;
  const T* k = a.k.data + b * a.k.seq + std::size_t(h) * hs;
  const T* v = a.v.data + b * a.v.seq + std::size_t(h) * hs;
  std::fill(m.begin(), m.end(), -std::numeric_limits<T>::infinity());
  std::fill(l.begin(), l.end(), T(0));
  std::fill(acc.begin(), acc.end(), T(0));
  const int keys = visible_keys(a, i0, nq);
  for (int j0 = 0; j0 < keys; j0 += kTile) {
    const int nk = std::min(kTile, keys - j0);
    gemm(false, true, nq, nk, hs, scale, q, int(a.q.row), k + std::size_t(j0) * a.k.row,
         int(a.k.row), T(0), S.data(), kTile);
    if (a.causal && j0 + nk - 1 > i0) mask_tile(S.data(), nq, nk, i0, j0);
    for (int i = 0; i < nq; ++i) {
      T* s = S.data() + std::size_t(i) * kTile;
      const T hi = std::max(m[i], *std::max_element(s, s + nk));
      const T corr = std::exp(m[i] - hi);
      T sum = 0;
      for (int j = 0; j < nk; ++j) sum += (s[j] = std::exp(s[j] - hi));
      l[i] = l[i] * corr + sum;
      m[i] = hi;
      for (int c = 0; c < hs; ++c) acc[std::size_t(i) * hs + c] *= corr;
    }
    gemm(false, false, nq, hs, nk, T(1), S.data(), kTile, v + std::size_t(j0) * a.v.row,
         int(a.v.row), T(1), acc.data(), hs);
  }
  for (int i = 0; i < nq; ++i) {
    T* o = acc.data() + std::size_t(i) * hs;
    for (int c = 0; c < hs; ++c) o[c] /= l[i];
    T* out = a.out.data + b * a.out.seq + std::size_t(i0 + i) * a.out.row + std::size_t(h) * hs;
    T& lse = a.lse[b * a.lse_seq + h * a.lse_head + i0 + i];
    merge_row(out, lse, o, m[i] + std::log(l[i]), hs);
  }
}

template <class T>
struct BackwardTiles {
  ScratchVector<T> P, dP, D;
  BackwardTiles() : P(kTile * kTile), dP(kTile * kTile), D(kTile) {}
};

// One (batch, head)'s query tile [i0, i0 + nq) against every key it sees.
template <class T>
void backward_tile(const AttentionBlockOf<T>& a, const AttentionBlockGradsOf<T>& g, int b, int h,
                   int i0, BackwardTiles<T>& t) {
  const int hs = a.width / a.heads, nq = std::min(kTile, a.queries - i0);
  const T scale = T(1) / std::sqrt(T(hs));
  const std::size_t col = std::size_t(h) * hs;
  auto row = [&](auto& rows, int t0) { return rows.data + b * rows.seq + t0 * rows.row + col; };
  const T* q = row(a.q, i0);
  const T* o = row(a.out, i0);
  const T* dO = row(g.dout, i0);
  T* dq = row(g.dq, i0);
  const T* lse = a.lse + b * a.lse_seq + h * a.lse_head + i0;
  for (int i = 0; i < nq; ++i) {  // D = rowsum(dout * out), this head's columns
    T d = 0;
    for (int c = 0; c < hs; ++c) d += dO[i * g.dout.row + c] * o[i * a.out.row + c];
    t.D[i] = d;
  }
  const int keys = visible_keys(a, i0, nq);
  for (int j0 = 0; j0 < keys; j0 += kTile) {
    const int nk = std::min(kTile, keys - j0);
    const T *k = row(a.k, j0), *v = row(a.v, j0);
    T *dk = row(g.dk, j0), *dv = row(g.dv, j0);
    gemm(false, true, nq, nk, hs, scale, q, int(a.q.row), k, int(a.k.row), T(0), t.P.data(),
         kTile);
    if (a.causal && j0 + nk - 1 > i0) mask_tile(t.P.data(), nq, nk, i0, j0);
    for (int i = 0; i < nq; ++i)
      for (int j = 0; j < nk; ++j) {
        T& p = t.P[std::size_t(i) * kTile + j];
        p = std::exp(p - lse[i]);
      }
    gemm(true, false, nk, hs, nq, T(1), t.P.data(), kTile, dO, int(g.dout.row), T(1), dv,
         int(g.dv.row));
    gemm(false, true, nq, nk, hs, T(1), dO, int(g.dout.row), v, int(a.v.row), T(0), t.dP.data(),
         kTile);
    for (int i = 0; i < nq; ++i)
      for (int j = 0; j < nk; ++j) {
        const std::size_t x = std::size_t(i) * kTile + j;
        t.dP[x] = t.P[x] * (t.dP[x] - t.D[i]);  // dS
      }
    gemm(false, false, nq, hs, nk, scale, t.dP.data(), kTile, k, int(a.k.row), T(1), dq,
         int(g.dq.row));
    gemm(true, false, nk, hs, nq, scale, t.dP.data(), kTile, q, int(a.q.row), T(1), dk,
         int(g.dk.row));
  }
}

}  // namespace

template <class T>
void attention_block_forward(const AttentionBlockOf<T>& a) {
  const int tiles = (a.queries + kTile - 1) / kTile;
  const int hs = a.width / a.heads;
#pragma omp parallel
  {
    ScratchVector<T> S(kTile * kTile), acc(std::size_t(kTile) * hs), m(kTile), l(kTile);
#pragma omp for collapse(3) schedule(dynamic)
    for (int b = 0; b < a.batch; ++b)
      for (int h = 0; h < a.heads; ++h)
        for (int i = 0; i < tiles; ++i) forward_tile(a, b, h, i * kTile, S, acc, m, l);
  }
}

template <class T>
void attention_block_backward(const AttentionBlockOf<T>& a, const AttentionBlockGradsOf<T>& g) {
#pragma omp parallel
  {
    BackwardTiles<T> tiles;
#pragma omp for collapse(2) schedule(dynamic)
    for (int b = 0; b < a.batch; ++b)
      for (int h = 0; h < a.heads; ++h)
        for (int i0 = 0; i0 < a.queries; i0 += kTile) backward_tile(a, g, b, h, i0, tiles);
  }
}

template void attention_block_forward(const AttentionBlockOf<float>&);
template void attention_block_forward(const AttentionBlockOf<double>&);
template void attention_block_backward(const AttentionBlockOf<float>&,
                                       const AttentionBlockGradsOf<float>&);
template void attention_block_backward(const AttentionBlockOf<double>&,
                                       const AttentionBlockGradsOf<double>&);

}  // namespace trident::cpu
