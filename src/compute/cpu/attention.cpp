// Causal attention without the T x T matrix (FlashAttention-2, Dao 2023):
// forward walks key tiles with an online softmax (running max and sum,
// algorithm 1) and saves only each row's log-sum-exp; backward recomputes a
// tile's probabilities from q, k and that log-sum-exp (algorithm 2). Tile
// products are BLAS GEMMs on strided views of qkv (single-threaded inside the
// parallel region; measured faster than hand-vectorised tile loops); the
// element-wise softmax work between them runs over contiguous tile rows.
// One thread owns a (batch, head, query tile) in forward and a (batch, head)
// in backward, so every sum runs in a fixed order at any thread count. With
// bf16 the products run on bf16 kernels (q, k, v and dout hold bf16 values,
// read as the caller's bits; the probabilities and score gradients are
// rounded, while the softmax sums and dS use them unrounded); on a CPU with
// AMX, bf16 attention is the fused kernels of amx_attention.hpp instead.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "compute/cpu/amx_attention.hpp"
#include "compute/cpu/amx_gemm.hpp"
#include "compute/cpu/attention_tiles.hpp"
#include "compute/cpu/blas.hpp"
#include "compute/cpu/fast_math.hpp"
#include "compute/cpu/gemm_bf16.hpp"
#include "compute/cpu/kernels.hpp"
#include "compute/cpu/vector_clones.hpp"

namespace trident::cpu {
using namespace attention_tiles;

template <class T>
TRIDENT_VECTOR_CLONES
void attention_forward(T* out, T* lse, const T* qkv, int B, int T_, int C, int NH, bool bf16,
                       const std::uint16_t* qkv16) {
  const int hs = C / NH, C3 = 3 * C;
  const T scale = T(1) / std::sqrt(T(hs));
  const bool b16 = bf16_tiles<T>(bf16);
  const int tile = kAttentionTile, tiles = (T_ + tile - 1) / tile;
  if constexpr (std::is_same_v<T, float>) {
    if (b16 && amx_available()) {  // fused on the tile unit
      thread_local ScratchVector<std::uint16_t> bits;
      const std::uint16_t* q16 = bits_of(qkv16, qkv, std::size_t(B) * T_ * C3, bits);
      if (amx_attention_forward(out, lse, q16, B, T_, C, NH)) return;
    }
  }
#pragma omp parallel
  {
    ScratchVector<T> S(tile * tile), acc(std::size_t(tile) * hs), m(tile), l(tile);
    ScratchVector<std::uint16_t> q16, kv16, p16;  // bf16: Q_i, K and V up to the diagonal, P
    if (b16)
      p16.resize(tile * tile), q16.resize(std::size_t(tile) * hs),
          kv16.resize(2 * std::size_t(T_) * hs);
    int packed_head = -1, packed_rows = 0;  // the (b, h) whose K, V rows kv16 holds
    // Later query tiles see more keys: hand them out dynamically.
#pragma omp for collapse(3) schedule(dynamic)
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < NH; ++h) {
        for (int it = 0; it < tiles; ++it) {
          const std::size_t qo = static_cast<std::size_t>(b) * T_ * C3 + h * hs;
          // With q, k, v given as bits only, their values are never read (null).
          const T* q = qkv ? qkv + qo : nullptr;
          const T *k = q ? q + C : nullptr, *v = q ? q + 2 * C : nullptr;
          const int i0 = it * tile, nq = std::min(tile, T_ - i0);
          std::fill(acc.begin(), acc.end(), T(0));
          std::fill(m.begin(), m.end(), -std::numeric_limits<T>::infinity());
          std::fill(l.begin(), l.end(), T(0));
          const std::uint16_t *qi16 = q16.data(), *k16 = kv16.data();
          const std::uint16_t* v16 = k16 + std::size_t(T_) * hs;
          if (b16) {
            // A thread's next query tile is mostly the same head's next: keep its rows.
            if (packed_head != b * NH + h) packed_head = b * NH + h, packed_rows = 0;
            const int r0 = packed_rows, rows = std::max(0, i0 + nq - r0);
            head_bits(q16.data(), qkv16, qkv, qo + std::size_t(i0) * C3, nq, hs, C3);
            head_bits(kv16.data() + std::size_t(r0) * hs, qkv16, qkv,
                      qo + C + std::size_t(r0) * C3, rows, hs, C3);
            head_bits(kv16.data() + std::size_t(T_ + r0) * hs, qkv16, qkv,
                      qo + 2 * C + std::size_t(r0) * C3, rows, hs, C3);
            packed_rows = std::max(packed_rows, i0 + nq);
          }
          for (int j0 = 0; j0 <= i0; j0 += tile) {  // causal: key tiles up to the diagonal
            const int nk = std::min(tile, i0 + nq - j0);
            if (b16) {
              gemm_bf16_bits(false, true, nq, nk, hs, qi16, hs, k16 + std::size_t(j0) * hs, hs,
                             false, f32(S.data()), tile);  // scaled row by row below
            } else {
              gemm(false, true, nq, nk, hs, scale, q + std::size_t(i0) * C3, C3,
                   k + std::size_t(j0) * C3, C3, T(0), S.data(), tile);  // S = s Q_i K_j^T
            }
            for (int r = 0; r < nq; ++r) {
              T* row = S.data() + r * tile;
              const int n = std::min(nk, i0 + r + 1 - j0);  // keys <= t
              if (b16) scale_row(row, n, scale);
              const T mx = max_of(row, n, m[r]);
              const T corr = exp_k(m[r] - mx);  // rescales what earlier tiles summed
              T sum = 0;
#pragma omp simd reduction(+ : sum)
              for (int c = 0; c < n; ++c) {
                row[c] = exp_k(row[c] - mx);
                sum += row[c];
              }
              for (int c = n; c < nk; ++c) row[c] = 0;
              if (b16) round_row_bf16(p16.data() + std::size_t(r) * tile, row, nk);
              l[r] = l[r] * corr + sum;
              m[r] = mx;
              T* a = acc.data() + std::size_t(r) * hs;
              for (int d = 0; d < hs; ++d) a[d] *= corr;
            }
            if (b16) {
              gemm_bf16_bits(false, false, nq, hs, nk, p16.data(), tile, v16 + std::size_t(j0) * hs,
                             hs, true, f32(acc.data()), hs);
            } else {
              gemm(false, false, nq, hs, nk, T(1), S.data(), tile, v + std::size_t(j0) * C3, C3,
                   T(1), acc.data(), hs);  // acc += P V_j
            }
          }
          for (int r = 0; r < nq; ++r) {
            const int t = i0 + r;
            const T inv = T(1) / l[r];
            T* o = out + (static_cast<std::size_t>(b) * T_ + t) * C + h * hs;
            const T* a = acc.data() + std::size_t(r) * hs;
            for (int d = 0; d < hs; ++d) o[d] = a[d] * inv;
            lse[(static_cast<std::size_t>(b) * NH + h) * T_ + t] = m[r] + std::log(l[r]);
          }
        }
      }
    }
  }
}

template <class T>
TRIDENT_VECTOR_CLONES
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, int B,
                        int T_, int C, int NH, bool bf16, const std::uint16_t* qkv16,
                        const std::uint16_t* dout16) {
  const int hs = C / NH, C3 = 3 * C;
  const T scale = T(1) / std::sqrt(T(hs));
  const bool b16 = bf16_tiles<T>(bf16);
  const int tile = kAttentionTile;
  if constexpr (std::is_same_v<T, float>) {
    if (b16 && amx_available()) {  // fused on the tile unit
      thread_local ScratchVector<std::uint16_t> q_bits, d_bits;
      const std::uint16_t* q16 = bits_of(qkv16, qkv, std::size_t(B) * T_ * C3, q_bits);
      const std::uint16_t* d16 = bits_of(dout16, dout, std::size_t(B) * T_ * C, d_bits);
      if (amx_attention_backward(dqkv, dout, out, lse, q16, d16, B, T_, C, NH)) return;
    }
  }
#pragma omp parallel
  {
    ScratchVector<T> P(tile * tile), dS(tile * tile), D(T_);
    ScratchVector<std::uint16_t> qkvo16, p16, ds16;  // bf16: Q, K, V, dO of a head; P and dS
    ScratchVector<float> dqkv32;  // bf16: the head's dQ, dK, dV, dense
    if (b16)
      p16.resize(tile * tile), ds16.resize(tile * tile), qkvo16.resize(4 * std::size_t(T_) * hs),
          dqkv32.resize(3 * std::size_t(T_) * hs);
#pragma omp for collapse(2) schedule(dynamic)
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < NH; ++h) {
        const std::size_t qo = static_cast<std::size_t>(b) * T_ * C3 + h * hs;
        const std::size_t oo = static_cast<std::size_t>(b) * T_ * C + h * hs;
        // With q, k, v given as bits only, their values are never read (null).
        const T* q = qkv ? qkv + qo : nullptr;
        const T *k = q ? q + C : nullptr, *v = q ? q + 2 * C : nullptr, *dO = dout + oo;
        T *dq = dqkv + qo, *dk = dq + C, *dv = dq + 2 * C;
        const T* L = lse + (static_cast<std::size_t>(b) * NH + h) * T_;
        // D_t = dO_t . O_t = sum_j P_tj dP_tj (FA2 algorithm 2, line 4).
        for (int t = 0; t < T_; ++t) {
          const T *o = out + oo + std::size_t(t) * C, *g = dO + std::size_t(t) * C;
          T sum = 0;
#pragma omp simd reduction(+ : sum)
          for (int d = 0; d < hs; ++d) sum += o[d] * g[d];
          D[t] = sum;
        }
        // The head's bf16 operands and f32 gradients as dense copies (rows hs apart).
        const std::size_t Th = std::size_t(T_) * hs;
        const std::uint16_t *q16 = nullptr, *k16 = nullptr, *v16 = nullptr, *dO16 = nullptr;
        float *dq32 = nullptr, *dk32 = nullptr, *dv32 = nullptr;
        const int ld16 = hs, ldo = hs, ldg = hs;
        if (b16) {
          std::uint16_t* dense = qkvo16.data();
          q16 = dense, k16 = dense + Th, v16 = dense + 2 * Th, dO16 = dense + 3 * Th;
          dq32 = dqkv32.data(), dk32 = dq32 + Th, dv32 = dk32 + Th;
          head_bits(dense, qkv16, qkv, qo, T_, hs, C3);
          head_bits(dense + Th, qkv16, qkv, qo + C, T_, hs, C3);
          head_bits(dense + 2 * Th, qkv16, qkv, qo + 2 * C, T_, hs, C3);
          head_bits(dense + 3 * Th, dout16, dout, oo, T_, hs, C);
          for (int g = 0; g < 3; ++g) copy_rows(dq32 + g * Th, hs, f32(dq + g * C), C3, T_, hs);
        }
        for (int j0 = 0; j0 < T_; j0 += tile) {
          const int nk = std::min(tile, T_ - j0);
          const T* kj = k ? k + std::size_t(j0) * C3 : nullptr;
          const T* vj = v ? v + std::size_t(j0) * C3 : nullptr;
          for (int i0 = j0; i0 < T_; i0 += tile) {  // causal: query tiles from the diagonal
            const int nq = std::min(tile, T_ - i0);
            const T* qi = q ? q + std::size_t(i0) * C3 : nullptr;
            const T* dOi = dO + std::size_t(i0) * C;
            if (b16) {
              gemm_bf16_bits(false, true, nq, nk, hs, q16 + std::size_t(i0) * ld16, ld16,
                             k16 + std::size_t(j0) * ld16, ld16, false, f32(P.data()), tile);
            } else {
              gemm(false, true, nq, nk, hs, scale, qi, C3, kj, C3, T(0), P.data(), tile);
            }
            for (int r = 0; r < nq; ++r) {  // P from the saved log-sum-exp
              T* row = P.data() + r * tile;
              const int n = std::min(nk, i0 + r + 1 - j0);
              const T lt = L[i0 + r];
              if (b16) scale_row(row, n, scale);
#pragma omp simd
              for (int c = 0; c < n; ++c) row[c] = exp_k(row[c] - lt);
              for (int c = n; c < nk; ++c) row[c] = 0;
              if (b16) round_row_bf16(p16.data() + std::size_t(r) * tile, row, nk);
            }
            if (b16) {
              gemm_bf16_bits(true, false, nk, hs, nq, p16.data(), tile,
                             dO16 + std::size_t(i0) * ldo, ldo, true, dv32 + std::size_t(j0) * ldg,
                             ldg);
              gemm_bf16_bits(false, true, nq, nk, hs, dO16 + std::size_t(i0) * ldo, ldo,
                             v16 + std::size_t(j0) * ld16, ld16, false, f32(dS.data()), tile);
            } else {
              gemm(true, false, nk, hs, nq, T(1), P.data(), tile, dOi, C, T(1),
                   dv + std::size_t(j0) * C3, C3);  // dV_j += P^T dO_i
              gemm(false, true, nq, nk, hs, T(1), dOi, C, vj, C3, T(0), dS.data(), tile);
            }
            for (int r = 0; r < nq; ++r) {  // dS = s P (dP - D), scale folded in
              const T* p = P.data() + r * tile;
              T* ds = dS.data() + r * tile;
              const T Dt = D[i0 + r];
#pragma omp simd
              for (int c = 0; c < nk; ++c) ds[c] = scale * p[c] * (ds[c] - Dt);
              if (b16) round_row_bf16(ds16.data() + std::size_t(r) * tile, ds, nk);
            }
            if (b16) {
              gemm_bf16_bits(false, false, nq, hs, nk, ds16.data(), tile,
                             k16 + std::size_t(j0) * ld16, ld16, true, dq32 + std::size_t(i0) * ldg,
                             ldg);
              gemm_bf16_bits(true, false, nk, hs, nq, ds16.data(), tile,
                             q16 + std::size_t(i0) * ld16, ld16, true, dk32 + std::size_t(j0) * ldg,
                             ldg);
              continue;
            }
            gemm(false, false, nq, hs, nk, T(1), dS.data(), tile, kj, C3, T(1),
                 dq + std::size_t(i0) * C3, C3);  // dQ_i += dS K_j
            gemm(true, false, nk, hs, nq, T(1), dS.data(), tile, qi, C3, T(1),
                 dk + std::size_t(j0) * C3, C3);  // dK_j += dS^T Q_i
          }
        }
        if (b16)
          for (int g = 0; g < 3; ++g) copy_rows(f32(dq + g * C), C3, dq32 + g * Th, hs, T_, hs);
      }
    }
  }
}

template void attention_forward<float>(float*, float*, const float*, int, int, int, int, bool,
                                       const std::uint16_t*);
template void attention_forward<double>(double*, double*, const double*, int, int, int, int,
                                        bool, const std::uint16_t*);
template void attention_backward<float>(float*, const float*, const float*, const float*,
                                        const float*, int, int, int, int, bool,
                                        const std::uint16_t*, const std::uint16_t*);
template void attention_backward<double>(double*, const double*, const double*, const double*,
                                         const double*, int, int, int, int, bool,
                                         const std::uint16_t*, const std::uint16_t*);

}  // namespace trident::cpu
