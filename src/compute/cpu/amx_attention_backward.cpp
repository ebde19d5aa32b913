// Causal attention backward fused on AMX tiles: FlashAttention-2's backward
// (Dao 2023, algorithm 2) on blocks of 32 keys x 32 queries. A thread owns a
// (batch, head): it packs the head's q, k, v and dO once into the layouts the
// five block products read, then walks key blocks (dK, dV accumulate in L1,
// as their transposes, so every product's operands come packed) and, within
// each, the query blocks from the diagonal on (dQ accumulates in the thread's
// f32 copy of the head, added to dqkv at the end). P is recomputed from the
// saved log-sum-exp; P and dS enter the products rounded to bf16, while dS
// is made from the unrounded P, as the tile-GEMM path (attention.cpp) does.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "compute/cpu/amx_attention.hpp"
#include "compute/cpu/amx_gemm.hpp"
#include "compute/cpu/amx_tiles.hpp"

namespace trident::cpu {

#ifdef TRIDENT_AMX
namespace {

using namespace amx_tiles;

constexpr int kBlk = 32;  // queries and keys per block
constexpr int kSpan = 4;  // blocks per span: the K of the products that sum over keys or queries

// A head's operands as the products read them, each Tp x hsp values.
struct HeadOperands {
  ScratchVector<u16> store[7];
  // A panels: rows of queries (q, dO; 32-row panels of hsp), rows of head
  // dimensions (q^T, dO^T; 32-row panels of Tp).
  u16 *q_a, *do_a, *qt_a, *dot_a;
  // B operands: over the head dimensions per 16 keys (k, v: S = Q K^T and
  // dP = dO V^T), over keys per 16 head dimensions (k: dQ = dS K).
  u16 *k_bt, *v_bt, *k_b;
};

TRIDENT_AMX_TARGET void pack_operands(HeadOperands& h, const u16* qkv, int ld, const u16* dO,
                                      int ldo, int T, int hs, int hsp, int Tp) {
  const u16 *q = qkv, *k = qkv + ld / 3, *v = qkv + 2 * (ld / 3);
  for (int m0 = 0; m0 < Tp; m0 += kBlk) {
    pack_a_panel(h.q_a + std::size_t(m0) * hsp, false, m0, T, 0, hsp, hs, q, ld);
    pack_a_panel(h.do_a + std::size_t(m0) * hsp, false, m0, T, 0, hsp, hs, dO, ldo);
  }
  for (int d0 = 0; d0 < hsp; d0 += kBlk) {
    pack_a_panel(h.qt_a + std::size_t(d0) * Tp, true, d0, hs, 0, Tp, T, q, ld);
    pack_a_panel(h.dot_a + std::size_t(d0) * Tp, true, d0, hs, 0, Tp, T, dO, ldo);
  }
  for (int n0 = 0; n0 < Tp; n0 += 16) {
    pack_b_block(h.k_bt + std::size_t(n0) * hsp, true, n0, T, 0, hsp, hs, k, ld);
    pack_b_block(h.v_bt + std::size_t(n0) * hsp, true, n0, T, 0, hsp, hs, v, ld);
  }
  for (int c0 = 0; c0 < hsp; c0 += 16)
    pack_b_block(h.k_b + std::size_t(c0) * Tp, false, c0, hs, 0, Tp, T, k, ld);
}

// P = exp(s S - L) and dS = s P (dP - D) for query block qi of the span (32
// queries from q0) and `steps` blocks of keys from k0 (S, dP rows kSpan * 32
// apart; query q sees keys up to itself, and none past T), as bits: dS as
// the A operand of dQ (per key block, 32 rows of 32), P and dS as B operands
// of dV^T and dK^T (per 16 keys, per query block, 16 rows of (query,
// query + 1) pairs), paired in registers two rows at a time.
TRIDENT_AMX_TARGET void span_gradients(const float* S, const float* dP, const float* L,
                                       const float* D, int q0, int k0, int steps, int T,
                                       float scale, int qi, u16* ds_a, u16* p_b, u16* ds_b) {
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int r = 0; r < kBlk; r += 2) {
    __m256i p_bits[2][2 * kSpan], ds_bits[2][2 * kSpan];
    for (int i = 0; i < 2; ++i) {
      const int q = q0 + r + i, n = q < T ? q + 1 - k0 : 0;
      const __m512 lse = _mm512_set1_ps(q < T ? L[q] : 0.0f);
      const __m512 d = _mm512_set1_ps(q < T ? D[q] : 0.0f);
      for (int c = 0; c < steps * kBlk; c += 16) {
        const __mmask16 valid = lanes_below(n - c);
        const float *sr = S + (r + i) * kSpan * kBlk + c, *dpr = dP + (r + i) * kSpan * kBlk + c;
        const __m512 p =
            _mm512_maskz_mov_ps(valid, exp16(_mm512_fmsub_ps(_mm512_load_ps(sr), vscale, lse)));
        const __m512 ds =
            _mm512_mul_ps(_mm512_mul_ps(vscale, p), _mm512_sub_ps(_mm512_load_ps(dpr), d));
        p_bits[i][c / 16] = bf16_bits16(p);
        ds_bits[i][c / 16] = bf16_bits16(ds);
        u16* a = ds_a + (c / kBlk) * 1024 + (r + i) * kBlk + c % kBlk;
        _mm256_store_si256(reinterpret_cast<__m256i*>(a), ds_bits[i][c / 16]);
      }
    }
    for (int j = 0; j < 2 * steps; ++j) {
      const std::size_t to = (std::size_t(j) * kSpan + qi) * 512 + (r / 2) * 32;
      _mm512_store_si512(p_b + to, interleave_words(p_bits[0][j], p_bits[1][j]));
      _mm512_store_si512(ds_b + to, interleave_words(ds_bits[0][j], ds_bits[1][j]));
    }
  }
}

// dst's rows t < rows (ld apart), columns d < hs, += src^T, where src holds
// hsp rows of kSpan * 32 (row d, column t): transposed 16 x 16 at a time.
TRIDENT_AMX_TARGET void add_transposed(float* dst, std::size_t ld, const float* src, int rows,
                                       int hs, int hsp) {
  for (int t0 = 0; t0 < rows; t0 += 16)
    for (int d0 = 0; d0 < std::min(hs, hsp); d0 += 16) {
      __m512i r[16];
      for (int i = 0; i < 16; ++i) r[i] = _mm512_load_si512(src + (d0 + i) * kSpan * kBlk + t0);
      transpose_16x16(r);  // r[j]: column t0 + j, head dimensions d0..d0 + 15
      const __mmask16 m = lanes_below(hs - d0);
      for (int j = 0; j < std::min(16, rows - t0); ++j) {
        float* p = dst + std::size_t(t0 + j) * ld + d0;
        _mm512_mask_storeu_ps(p, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, p),
                                                  _mm512_castsi512_ps(r[j])));
      }
    }
}

// One thread's share: whole (batch, head)s, handed out dynamically.
TRIDENT_AMX_TARGET void backward_heads(float* dqkv, const float* dout, const float* out,
                                       const float* lse, const u16* qkv16, const u16* dout16,
                                       int B, int T, int C, int NH) {
  const int hs = C / NH, C3 = 3 * C, hsp = round_up(hs, kStep), Tp = round_up(T, kBlk);
  const float scale = 1.0f / std::sqrt(float(hs));
  thread_local HeadOperands h;
  thread_local ScratchVector<u16> bits_store;
  thread_local ScratchVector<float> f32_store;
  u16** homes[7] = {&h.q_a, &h.do_a, &h.qt_a, &h.dot_a, &h.k_bt, &h.v_bt, &h.k_b};
  for (int i = 0; i < 7; ++i) *homes[i] = aligned(h.store[i], std::size_t(Tp) * hsp);
  // Bits of a query block's dS (the A operand of dQ), and of the span pair's
  // P and dS (the B operands of dV^T and dK^T).
  constexpr int kSpanBits = kSpan * 1024, kPairBits = 2 * kSpan * kSpan * 512;
  u16* bits = aligned(bits_store, kSpanBits + 2 * kPairBits);
  u16 *ds_bits = bits, *p_b = ds_bits + kSpanBits, *ds_b = p_b + kPairBits;
  // f32: dQ of the head (Tp x hsp), dK^T and dV^T of a key span (hsp x 128),
  // S and dP of a query block against the span (32 x 128), D.
  const std::size_t dq_n = std::size_t(Tp) * hsp, kt_n = std::size_t(hsp) * kSpan * kBlk;
  const std::size_t s_n = std::size_t(kBlk) * kSpan * kBlk;
  float* dq_acc = aligned(f32_store, dq_n + 2 * kt_n + 2 * s_n + Tp);
  float *dkt = dq_acc + dq_n, *dvt = dkt + kt_n, *S = dvt + kt_n, *dP = S + s_n;
  float* D = dP + s_n;
  configure_tiles();
#pragma omp for collapse(2) schedule(dynamic)
  for (int b = 0; b < B; ++b) {
    for (int hh = 0; hh < NH; ++hh) {
      const std::size_t qo = std::size_t(b) * T * C3 + std::size_t(hh) * hs;
      const std::size_t oo = std::size_t(b) * T * C + std::size_t(hh) * hs;
      const float* L = lse + (std::size_t(b) * NH + hh) * T;
      for (int t = 0; t < T; ++t) {  // D_t = dO_t . O_t (FA2 algorithm 2, line 4)
        const float *o = out + oo + std::size_t(t) * C, *g = dout + oo + std::size_t(t) * C;
        float sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int d = 0; d < hs; ++d) sum += o[d] * g[d];
        D[t] = sum;
      }
      pack_operands(h, qkv16 + qo, C3, dout16 + oo, C, T, hs, hsp, Tp);
      std::fill(dq_acc, dq_acc + dq_n, 0.0f);
      constexpr int span = kSpan * kBlk, ld_s = span * 4;
      for (int k0 = 0; k0 < T; k0 += span) {  // spans of keys
        const int kblocks = std::min(kSpan, (T - k0 + kBlk - 1) / kBlk);
        std::fill(dkt, dkt + 2 * kt_n, 0.0f);
        for (int i0 = k0; i0 < T; i0 += span) {  // causal: spans of queries from the diagonal
          const int qblocks = std::min(kSpan, (T - i0 + kBlk - 1) / kBlk);
          for (int qi = 0; qi < qblocks; ++qi) {
            const int q0 = i0 + qi * kBlk;
            // S and dP against the key blocks this query block sees (k <= q).
            const int seen = std::min(kblocks, (q0 - k0) / kBlk + 1);
            for (int kj = 0; kj < seen; ++kj) {
              const std::size_t at = std::size_t(k0 + kj * kBlk) * hsp;
              const u16 *kt = h.k_bt + at, *vt = h.v_bt + at;
              tile_block(h.q_a + std::size_t(q0) * hsp, kt, kt + 16 * hsp, hsp / kStep,
                         S + kj * kBlk, ld_s, false);
              tile_block(h.do_a + std::size_t(q0) * hsp, vt, vt + 16 * hsp, hsp / kStep,
                         dP + kj * kBlk, ld_s, false);
            }
            span_gradients(S, dP, L, D, q0, k0, seen, T, scale, qi, ds_bits, p_b, ds_b);
            for (int kj = seen; kj < kblocks; ++kj) {  // keys unseen: zeros
              std::fill_n(ds_bits + kj * 1024, 1024, u16(0));
              for (int j = 2 * kj; j < 2 * kj + 2; ++j) {
                std::fill_n(p_b + (std::size_t(j) * kSpan + qi) * 512, 512, u16(0));
                std::fill_n(ds_b + (std::size_t(j) * kSpan + qi) * 512, 512, u16(0));
              }
            }
            for (int c0 = 0; c0 < hsp; c0 += kBlk) {  // dQ += dS K, K the span's keys
              const u16* kb = h.k_b + std::size_t(c0) * Tp + std::size_t(k0) * 16;
              tile_block(ds_bits, kb, kb + std::size_t(16) * Tp, kblocks,
                         dq_acc + std::size_t(q0) * hsp + c0, hsp * 4, true);
            }
          }
          // dV^T += dO^T P, dK^T += Q^T dS, K the span's queries.
          for (int d0 = 0; d0 < hsp; d0 += kBlk)
            for (int kj = 0; kj < kblocks; ++kj) {
              const std::size_t at = std::size_t(d0) * Tp + std::size_t(i0) * kBlk;
              const std::size_t b0 = std::size_t(2 * kj) * kSpan * 512, b1 = b0 + kSpan * 512;
              const std::size_t c = std::size_t(d0) * span + kj * kBlk;
              tile_block(h.dot_a + at, p_b + b0, p_b + b1, qblocks, dvt + c, ld_s, true);
              tile_block(h.qt_a + at, ds_b + b0, ds_b + b1, qblocks, dkt + c, ld_s, true);
            }
        }
        float* dk = dqkv + qo + std::size_t(k0) * C3 + C;
        add_transposed(dk, C3, dkt, std::min(span, T - k0), hs, hsp);
        add_transposed(dk + C, C3, dvt, std::min(span, T - k0), hs, hsp);
      }
      for (int t = 0; t < T; ++t) {
        float* dq = dqkv + qo + std::size_t(t) * C3;
#pragma omp simd
        for (int d = 0; d < hs; ++d) dq[d] += dq_acc[std::size_t(t) * hsp + d];
      }
    }
  }
  _tile_release();
}

}  // namespace

bool amx_attention_backward(float* dqkv, const float* dout, const float* out, const float* lse,
                            const std::uint16_t* qkv16, const std::uint16_t* dout16, int B, int T,
                            int C, int NH) {
  if (!amx_available() || !qkv16 || !dout16) return false;
#pragma omp parallel
  backward_heads(dqkv, dout, out, lse, qkv16, dout16, B, T, C, NH);
  return true;
}

#else

bool amx_attention_backward(float*, const float*, const float*, const float*, const std::uint16_t*,
                            const std::uint16_t*, int, int, int, int) {
  return false;
}

#endif

}  // namespace trident::cpu
