#include "compute/cpu/amx_gemm.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// GCC 12 flags the deliberately undefined registers inside its AVX-512
// intrinsics (_mm512_undefined_*) as maybe uninitialised.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define TRIDENT_AMX 1
#define TRIDENT_AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl")))
#endif

namespace trident::cpu {

#ifdef TRIDENT_AMX
namespace {

using u16 = std::uint16_t;

// Tile geometry: a tile is 16 rows of 64 bytes (32 bf16 or 16 f32). C is
// computed in 32 x 32 blocks: tiles 0-3 accumulate, 4-5 hold A's two 16-row
// halves for a step of 32 along K, 6-7 B's two 16-column halves.
constexpr int kRows = 16, kStep = 32, kBlock = 32;
// Cache blocks, measured on the decks' linears (perf/RESULTS.md): B's chunk
// takes half the core's 2 MiB L2; K is blocked only past 768 (a 48 KiB panel
// of A, the L1), in blocks of 256, C's partial sums going back to memory.
constexpr std::size_t kL2Bytes = 1u << 20;
constexpr int kMaxKc = 768, kLongKc = 256;

struct alignas(64) TileConfig {
  std::uint8_t palette = 1, start_row = 0, reserved[14] = {};
  std::uint16_t bytes_per_row[16] = {};
  std::uint8_t rows[16] = {};
};

TRIDENT_AMX_TARGET void configure_tiles() {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.rows[t] = kRows;
    config.bytes_per_row[t] = 64;
  }
  _tile_loadconfig(&config);
}

// TRIDENT_AMX=0 leaves the bf16 GEMMs to oneDNN (a comparison, or the tests
// of the path CPUs without AMX take).
bool amx_switched_off() {
  const char* v = std::getenv("TRIDENT_AMX");
  return v && std::strcmp(v, "0") == 0;
}

bool request_tile_state() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool amx_bf16 = d & (1u << 22), amx_tile = d & (1u << 24);
  const bool avx512 = (b & (1u << 16)) && (b & (1u << 30)) && (b & (1u << 31));  // F, BW, VL
  constexpr long kReqXcompPerm = 0x1023, kXfeatureTileData = 18;  // linux/arch/x86
  return amx_bf16 && amx_tile && avx512 &&
         syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureTileData) == 0;
}

int round_up(int x, int to) { return (x + to - 1) / to * to; }

// K padded to whole steps; K = 0 takes one step of zeros, so C is its start value.
int padded_k(int K) { return round_up(std::max(K, 1), kStep); }

// Of 32 values from k on, those below K.
TRIDENT_AMX_TARGET __mmask32 k_mask(int left) {
  return left >= 32 ? ~__mmask32(0) : __mmask32((1u << std::max(0, left)) - 1);
}

// 16 values of lo and hi as 16 words (lo[i], hi[i]): a (k, k + 1) pair each.
TRIDENT_AMX_TARGET __m512i interleave_words(__m256i lo, __m256i hi) {
  const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24,
                                         8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(order, _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
}

// 16 x 16 32-bit words, transposed in registers.
TRIDENT_AMX_TARGET void transpose_16x16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // r[4i + j], lane L: column 4L + j of rows 4i..4i+3
    r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512i ab_lo = _mm512_shuffle_i32x4(r[j], r[4 + j], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i ab_hi = _mm512_shuffle_i32x4(r[j], r[4 + j], _MM_SHUFFLE(3, 2, 3, 2));
    const __m512i cd_lo = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i cd_hi = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], _MM_SHUFFLE(3, 2, 3, 2));
    t[j] = _mm512_shuffle_i32x4(ab_lo, cd_lo, _MM_SHUFFLE(2, 0, 2, 0));
    t[4 + j] = _mm512_shuffle_i32x4(ab_lo, cd_lo, _MM_SHUFFLE(3, 1, 3, 1));
    t[8 + j] = _mm512_shuffle_i32x4(ab_hi, cd_hi, _MM_SHUFFLE(2, 0, 2, 0));
    t[12 + j] = _mm512_shuffle_i32x4(ab_hi, cd_hi, _MM_SHUFFLE(3, 1, 3, 1));
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// Columns [n0, n0 + 16) of op(B), K range [k0, k0 + kc), as the tile unit
// reads B: kc / 2 rows of 16 (k, k + 1) pairs. Padding past K and N is zero.
TRIDENT_AMX_TARGET void pack_b_block(u16* out, bool tb, int n0, int N, int k0, int kc, int K,
                                     const u16* B, int ldb) {
  const int cols = std::clamp(N - n0, 0, 16);
  const __mmask16 valid = __mmask16((1u << cols) - 1);  // cols <= 16: no overflow in 32 bits
  if (tb) {  // B stored N x K: a column's (k, k + 1) pairs are adjacent; transpose the words
    for (int k = k0; k < k0 + kc; k += kStep) {
      const __mmask32 kvalid = k_mask(K - k);
      __m512i w[16];
      for (int c = 0; c < 16; ++c)
        w[c] = c < cols ? _mm512_maskz_loadu_epi16(kvalid, B + std::size_t(n0 + c) * ldb + k)
                        : _mm512_setzero_si512();
      transpose_16x16(w);
      for (int kk = 0; kk < 16; ++kk)
        _mm512_storeu_si512(out + std::size_t(k - k0 + 2 * kk) * 16, w[kk]);
    }
    return;
  }
  // B stored K x N: interleave rows k and k + 1.
  const int kend = std::min(K, k0 + kc);
  for (int kk = 0; kk < kc / 2; ++kk) {
    const int k = k0 + 2 * kk;
    const __m256i lo = k < kend ? _mm256_maskz_loadu_epi16(valid, B + std::size_t(k) * ldb + n0)
                                : _mm256_setzero_si256();
    const __m256i hi = k + 1 < kend
                           ? _mm256_maskz_loadu_epi16(valid, B + std::size_t(k + 1) * ldb + n0)
                           : _mm256_setzero_si256();
    _mm512_storeu_si512(out + std::size_t(kk) * 32, interleave_words(lo, hi));
  }
}

// Rows [m0, m0 + 32) of op(A), K range [k0, k0 + kc), as tiles: per step of
// 32 along K, two 16 x 32 tiles (rows 0-15, 16-31). Padding is zero.
TRIDENT_AMX_TARGET void pack_a_panel(u16* out, bool ta, int m0, int M, int k0, int kc, int K,
                                     const u16* A, int lda) {
  const int rows = std::min(kBlock, M - m0);
  for (int s = 0; s < kc / kStep; ++s) {
    const int k = k0 + s * kStep;
    const __mmask32 kvalid = k_mask(K - k);
    for (int h = 0; h < 2; ++h) {
      u16* tile = out + std::size_t(s) * 1024 + h * 512;
      if (!ta) {
        for (int r = 0; r < 16; ++r) {
          const int m = m0 + h * 16 + r;
          const __m512i v = m < M ? _mm512_maskz_loadu_epi16(kvalid, A + std::size_t(m) * lda + k)
                                  : _mm512_setzero_si512();
          _mm512_storeu_si512(tile + r * 32, v);
        }
        continue;
      }
      // A stored K x M: pair rows k, k + 1 into words, then transpose.
      const int hrows = std::clamp(rows - h * 16, 0, 16);
      const __mmask16 mvalid = __mmask16((1u << hrows) - 1);
      __m512i w[16];
      for (int kk = 0; kk < 16; ++kk) {
        const int ka = k + 2 * kk;
        const u16* src = A + std::size_t(ka) * lda + m0 + h * 16;
        const __m256i lo = ka < K ? _mm256_maskz_loadu_epi16(mvalid, src) : _mm256_setzero_si256();
        const __m256i hi =
            ka + 1 < K ? _mm256_maskz_loadu_epi16(mvalid, src + lda) : _mm256_setzero_si256();
        w[kk] = interleave_words(lo, hi);
      }
      transpose_16x16(w);
      for (int r = 0; r < 16; ++r) _mm512_storeu_si512(tile + r * 32, w[r]);
    }
  }
}

// One 32 x 32 block of C at (m0, n0) over a K block: tiles 0-3 start from
// zero or from C, take the block's steps, and go back to C. Blocks at C's
// edges go through a dense buffer.
TRIDENT_AMX_TARGET void block_kernel(const u16* a_panel, const u16* b_pair, int steps, float* C,
                                     int ldc, int rows, int cols, bool from_c) {
  alignas(64) float edge[kBlock * kBlock];
  const bool full = rows == kBlock && cols == kBlock;
  float* c = full ? C : edge;
  const int stride = (full ? ldc : kBlock) * int(sizeof(float));
  const int ld = full ? ldc : kBlock;
  if (from_c) {
    if (!full)
      for (int r = 0; r < kBlock; ++r)
        for (int j = 0; j < kBlock; ++j)
          edge[r * kBlock + j] = r < rows && j < cols ? C[std::size_t(r) * ldc + j] : 0.0f;
    _tile_loadd(0, c, stride);
    _tile_loadd(1, c + 16, stride);
    _tile_loadd(2, c + std::size_t(16) * ld, stride);
    _tile_loadd(3, c + std::size_t(16) * ld + 16, stride);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  const u16* b0 = b_pair;  // two packed 16-column blocks
  const u16* b1 = b_pair + std::size_t(steps) * 512;
  for (int s = 0; s < steps; ++s) {
    const u16* a = a_panel + std::size_t(s) * 1024;
    _tile_loadd(4, a, 64);
    _tile_loadd(6, b0 + std::size_t(s) * 512, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_loadd(7, b1 + std::size_t(s) * 512, 64);
    _tile_dpbf16ps(1, 4, 7);
    _tile_loadd(5, a + 512, 64);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, stride);
  _tile_stored(1, c + 16, stride);
  _tile_stored(2, c + std::size_t(16) * ld, stride);
  _tile_stored(3, c + std::size_t(16) * ld + 16, stride);
  if (!full)
    for (int r = 0; r < rows; ++r)
      std::memcpy(C + std::size_t(r) * ldc, edge + r * kBlock, sizeof(float) * cols);
}

// 64-byte aligned storage of n values in `v`.
u16* aligned(std::vector<u16>& v, std::size_t n) {
  v.resize(n + 32);
  return reinterpret_cast<u16*>((reinterpret_cast<std::uintptr_t>(v.data()) + 63) &
                                ~std::uintptr_t(63));
}

// Panels [p0, p1) of C on this thread, by K block, then column chunk: the
// chunk of B is packed once per thread and stays in L2 while the panels, each
// packed into L1, pass over it.
TRIDENT_AMX_TARGET void run_panels(int p0, int p1, bool ta, bool tb, int M, int N, int K, int kc,
                                   int nc, const u16* A, int lda, const u16* B, int ldb,
                                   bool accumulate, float* C, int ldc, const float* bias) {
  if (p0 >= p1) return;
  thread_local std::vector<u16> panel_storage, chunk_storage;
  u16* panel = aligned(panel_storage, std::size_t(kBlock) * kc);
  u16* chunk = aligned(chunk_storage, std::size_t(kc) * nc);
  const int Kp = padded_k(K), Np = round_up(N, kBlock);
  configure_tiles();
  for (int k0 = 0; k0 < Kp; k0 += kc) {
    const int kcs = std::min(kc, Kp - k0), steps = kcs / kStep;
    const bool last = k0 + kcs >= Kp;
    for (int j0 = 0; j0 < Np; j0 += nc) {
      const int ncs = std::min(nc, Np - j0);
      for (int blk = 0; blk < ncs / 16; ++blk)
        pack_b_block(chunk + std::size_t(blk) * kcs * 16, tb, j0 + blk * 16, N, k0, kcs, K, B, ldb);
      for (int p = p0; p < p1; ++p) {
        const int m0 = p * kBlock, rows = std::min(kBlock, M - m0);
        pack_a_panel(panel, ta, m0, M, k0, kcs, K, A, lda);
        for (int n0 = j0; n0 < std::min(N, j0 + ncs); n0 += kBlock) {
          float* c = C + std::size_t(m0) * ldc + n0;
          const int cols = std::min(kBlock, N - n0);
          block_kernel(panel, chunk + std::size_t(n0 - j0) * kcs, steps, c, ldc, rows, cols,
                       accumulate || k0 > 0);
          if (last && bias)
            for (int r = 0; r < rows; ++r)
              for (int j = 0; j < cols; ++j) c[std::size_t(r) * ldc + j] += bias[n0 + j];
        }
      }
    }
  }
  _tile_release();
}

// Seconds for `rounds` x 4 tile products on zeroed tiles (every product
// 16 x 16 x 32 multiply-adds).
TRIDENT_AMX_TARGET double time_tile_products(long rounds) {
  configure_tiles();
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_zero(4);
  _tile_zero(5);
  _tile_zero(6);
  _tile_zero(7);
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < rounds; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  alignas(64) float last[16 * 16];
  _tile_stored(0, last, 64);  // waits for the products
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - t0;
  _tile_release();
  return took.count();
}

}  // namespace

bool amx_available() {
  static const bool available = !amx_switched_off() && request_tile_state();
  return available;
}

double amx_tile_flops() {
  if (!amx_available()) return 0;
  constexpr long kRounds = 1 << 18;  // ~17 M cycles at 64 a round
  double best = 1e30;
  for (int r = 0; r < 3; ++r) best = std::min(best, time_tile_products(kRounds));
  return kRounds * 4.0 * (16 * 16 * 32) * 2 / best;
}

void amx_gemm(bool ta, bool tb, int M, int N, int K, const std::uint16_t* A, int lda,
              const std::uint16_t* B, int ldb, bool accumulate, float* C, int ldc,
              const float* bias, bool parallel) {
  if (M <= 0 || N <= 0) return;
  const int Kp = padded_k(K), Np = round_up(N, kBlock);
  const int kc = Kp <= kMaxKc ? Kp : kLongKc;
  const int nc = std::clamp(int(kL2Bytes / (std::size_t(kc) * 2)) / kBlock * kBlock, kBlock, Np);
  const int panels = (M + kBlock - 1) / kBlock;
  const bool spread = parallel && omp_get_level() == 0 && omp_get_max_threads() > 1 && panels > 1;
#pragma omp parallel if (spread)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    run_panels(panels * t / nt, panels * (t + 1) / nt, ta, tb, M, N, K, kc, nc, A, lda, B, ldb,
               accumulate, C, ldc, bias);
  }
}

#else

bool amx_available() { return false; }

double amx_tile_flops() { return 0; }

void amx_gemm(bool, bool, int, int, int, const std::uint16_t*, int, const std::uint16_t*, int, bool,
              float*, int, const float*, bool) {}

#endif

}  // namespace trident::cpu
