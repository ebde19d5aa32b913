#include "compute/cpu/amx_attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "compute/cpu/amx_gemm.hpp"
#include "compute/cpu/amx_tiles.hpp"
#include "compute/cpu/fast_math.hpp"

namespace trident::cpu {

#ifdef TRIDENT_AMX
namespace {

using namespace amx_tiles;

constexpr int kBlk = 32;    // queries and keys per block: two tile rows of 16
constexpr int kSpan = 4;    // key blocks per softmax step (the K of P V)
constexpr int kTask = 128;  // queries per task handed to a thread

// A thread's (batch, head): keys as the B operand of S = Q K^T (per 16 keys,
// hsp x 16 values in (d, d + 1) pairs) and values as the B operand of P V
// (per 16 columns, Tp / 2 rows of (key, key + 1) pairs); `rows` keys packed.
struct HeadTiles {
  ScratchVector<u16> k_store, v_store;
  u16 *k = nullptr, *v = nullptr;
  long head = -1;
  int rows = 0;
};

// Packs keys and values [ht.rows, upto rounded up to a block).
TRIDENT_AMX_TARGET void pack_head(HeadTiles& ht, const u16* k, const u16* v, int ld, int T,
                                  int hs, int hsp, int Tp, int upto) {
  const int r0 = ht.rows, r1 = std::min(Tp, round_up(upto, kBlk));
  if (r1 <= r0) return;
  for (int n0 = r0; n0 < r1; n0 += 16)
    pack_b_block(ht.k + std::size_t(n0) * hsp, true, n0, T, 0, hsp, hs, k, ld);
  for (int c0 = 0; c0 < hsp; c0 += 16)
    pack_b_block(ht.v + std::size_t(c0) * Tp + std::size_t(r0) * 16, false, c0, hs, r0, r1 - r0,
                 T, v, ld);
  ht.rows = r1;
}

// The online softmax step of one row (running max m and sum l) over n of
// the span's keys (n a multiple of 16 unless `masked`): its scores sr, its
// P bits at pr (rows of 32 per key block, 1024 apart), its output row orow.
// orow, which the tile unit cannot scale, is rescaled only when the row's
// max grew (the factor is exactly 1 otherwise): rarely after the first span.
template <bool masked>
TRIDENT_AMX_TARGET void row_softmax(const float* sr, int n, int width, __m512 scale, u16* pr,
                                    float* orow, float& m, float& l, int hsp) {
  __m512 vmax = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int c = 0; c < width; c += 16) {
    const __m512 x = _mm512_mul_ps(_mm512_load_ps(sr + c), scale);
    vmax = masked ? _mm512_mask_max_ps(vmax, lanes_below(n - c), vmax, x) : _mm512_max_ps(vmax, x);
  }
  const float mx = _mm512_reduce_max_ps(vmax);
  if (mx > m) {  // rescale what earlier spans summed
    if (l > 0) {
      const float corr = exp_poly(m - mx);
      l *= corr;
      const __m512 vcorr = _mm512_set1_ps(corr);
      for (int d = 0; d < hsp; d += 16)
        _mm512_store_ps(orow + d, _mm512_mul_ps(_mm512_load_ps(orow + d), vcorr));
    }
    m = mx;
  }
  const __m512 ref = _mm512_set1_ps(m);
  __m512 sum = _mm512_setzero_ps();
  for (int c = 0; c < width; c += 16) {
    __m512 e = exp16(_mm512_fmsub_ps(_mm512_load_ps(sr + c), scale, ref));
    if (masked) e = _mm512_maskz_mov_ps(lanes_below(n - c), e);
    sum = _mm512_add_ps(sum, e);
    u16* dst = pr + (c / kBlk) * 1024 + c % kBlk;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), bf16_bits16(e));
  }
  l += _mm512_reduce_add_ps(sum);
}

// The online softmax over a span of `steps` key blocks from kb, scores s
// (rows kSpan * 32 apart): row r (query q0 + r) sees keys up to itself.
// Writes P's bits as the A operand of P V (per key block, 32 rows of 32;
// rows past `rows` zero). Spans below the diagonal need no masks.
TRIDENT_AMX_TARGET void span_softmax(const float* s, u16* p, float* o, float* m, float* l,
                                     int rows, int q0, int kb, int steps, float scale, int hsp) {
  const __m512 vscale = _mm512_set1_ps(scale);
  const int width = steps * kBlk;
  const bool below = kb + width <= q0 + 1;  // every row sees every key of the span
  for (int r = 0; r < kBlk; ++r) {
    if (r >= rows) {
      for (int st = 0; st < steps; ++st) std::fill_n(p + st * 1024 + r * kBlk, kBlk, u16(0));
      continue;
    }
    const float* sr = s + r * kSpan * kBlk;
    float* orow = o + std::size_t(r) * hsp;
    if (below)
      row_softmax<false>(sr, width, width, vscale, p + r * kBlk, orow, m[r], l[r], hsp);
    else
      row_softmax<true>(sr, std::min(width, q0 + r + 1 - kb), width, vscale, p + r * kBlk, orow,
                        m[r], l[r], hsp);
  }
}

// One thread's share of the forward: (batch, head, task) triples handed out
// dynamically, later tasks seeing more keys.
TRIDENT_AMX_TARGET void forward_tasks(float* out, float* lse, const u16* qkv16, int B, int T,
                                      int C, int NH) {
  const int hs = C / NH, C3 = 3 * C, hsp = round_up(hs, kStep), Tp = round_up(T, kBlk);
  const int tasks = (T + kTask - 1) / kTask;
  const float scale = 1.0f / std::sqrt(float(hs));
  thread_local HeadTiles ht;
  thread_local ScratchVector<u16> q_store, p_store;
  thread_local ScratchVector<float> o_store;
  ht.k = aligned(ht.k_store, std::size_t(Tp) * hsp);
  ht.v = aligned(ht.v_store, std::size_t(Tp) * hsp);
  ht.head = -1;
  u16* qp = aligned(q_store, std::size_t(kBlk) * hsp);
  u16* pb = aligned(p_store, kSpan * kBlk * kBlk);
  float* o = aligned(o_store, std::size_t(kBlk) * hsp + kSpan * kBlk * kBlk);
  float* s = o + std::size_t(kBlk) * hsp;  // 32 x 128 scores, 64-byte aligned (hsp % 32 == 0)
  float m[kBlk], l[kBlk];
  configure_tiles();
#pragma omp for collapse(3) schedule(dynamic)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      for (int task = 0; task < tasks; ++task) {
        const u16* q = qkv16 + std::size_t(b) * T * C3 + std::size_t(h) * hs;
        if (ht.head != long(b) * NH + h) ht.head = long(b) * NH + h, ht.rows = 0;
        const int i0 = task * kTask, i1 = std::min(T, i0 + kTask);
        pack_head(ht, q + C, q + 2 * C, C3, T, hs, hsp, Tp, i1);
        for (int q0 = i0; q0 < i1; q0 += kBlk) {
          const int rows = std::min(kBlk, T - q0);
          pack_a_panel(qp, false, q0, T, 0, hsp, hs, q, C3);
          std::fill(o, o + std::size_t(kBlk) * hsp, 0.0f);
          std::fill(m, m + kBlk, -std::numeric_limits<float>::infinity());
          std::fill(l, l + kBlk, 0.0f);
          // Causal: spans of key blocks up to the diagonal.
          for (int kb = 0; kb < q0 + rows; kb += kSpan * kBlk) {
            const int steps = std::min(kSpan, (q0 + rows - kb + kBlk - 1) / kBlk);
            for (int st = 0; st < steps; ++st) {  // S = Q K^T
              const u16* kt = ht.k + std::size_t(kb + st * kBlk) * hsp;
              tile_block(qp, kt, kt + std::size_t(16) * hsp, hsp / kStep, s + st * kBlk,
                         kSpan * kBlk * 4, false);
            }
            span_softmax(s, pb, o, m, l, rows, q0, kb, steps, scale, hsp);
            for (int c0 = 0; c0 < hsp; c0 += 32) {  // O += P V, K the span's keys
              const u16* vt = ht.v + std::size_t(c0) * Tp + std::size_t(kb) * 16;
              tile_block(pb, vt, vt + std::size_t(16) * Tp, steps, o + c0, hsp * 4, true);
            }
          }
          for (int r = 0; r < rows; ++r) {
            const int t = q0 + r;
            const float inv = 1.0f / l[r];
            float* dst = out + (std::size_t(b) * T + t) * C + std::size_t(h) * hs;
            for (int d = 0; d < hs; ++d) dst[d] = o[std::size_t(r) * hsp + d] * inv;
            lse[(std::size_t(b) * NH + h) * T + t] = m[r] + std::log(l[r]);
          }
        }
      }
    }
  }
  _tile_release();
}

}  // namespace

bool amx_attention_forward(float* out, float* lse, const std::uint16_t* qkv16, int B, int T,
                           int C, int NH) {
  if (!amx_available() || !qkv16) return false;
#pragma omp parallel
  forward_tasks(out, lse, qkv16, B, T, C, NH);
  return true;
}

#else

bool amx_attention_forward(float*, float*, const std::uint16_t*, int, int, int, int) {
  return false;
}

#endif

}  // namespace trident::cpu
