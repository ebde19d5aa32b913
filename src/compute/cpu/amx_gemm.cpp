#include "compute/cpu/amx_gemm.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "compute/cpu/amx_tiles.hpp"

#ifdef TRIDENT_AMX
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace trident::cpu {

#ifdef TRIDENT_AMX
namespace {

using namespace amx_tiles;

// Cache blocks, measured on the decks' linears (perf/RESULTS.md): B's chunk
// takes half the core's 2 MiB L2; K is blocked only past 768 (a 48 KiB panel
// of A, the L1), in blocks of 256, C's partial sums going back to memory.
constexpr std::size_t kL2Bytes = 1u << 20;
constexpr int kMaxKc = 768, kLongKc = 256;

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
  unsigned a1 = 0, b1, c1, d1;
  __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1);
  const bool avx512_bf16 = a1 & (1u << 5);  // the tile kernels' f32 -> bf16 conversions
  constexpr long kReqXcompPerm = 0x1023, kXfeatureTileData = 18;  // linux/arch/x86
  return amx_bf16 && amx_tile && avx512 && avx512_bf16 &&
         syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureTileData) == 0;
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

// Panels [p0, p1) of C on this thread, by K block, then column chunk: the
// chunk of B is packed once per thread and stays in L2 while the panels of A
// pass over it.
TRIDENT_AMX_TARGET void run_panels(int p0, int p1, bool ta, bool tb, int M, int N, int K, int kc,
                                   int nc, const u16* A, int lda, const u16* B, int ldb,
                                   bool accumulate, float* C, int ldc, const float* bias) {
  if (p0 >= p1) return;
  thread_local ScratchVector<u16> panel_storage, chunk_storage;
  const int Kp = padded_k(K), Np = round_up(N, kBlock);
  // With several chunks of B, the thread's panels of A are packed once per K
  // block (at most M x kc values) and reused by every chunk.
  const bool keep_panels = Np > nc;
  const std::size_t panel_size = std::size_t(kBlock) * kc;
  u16* panels = aligned(panel_storage, panel_size * (keep_panels ? p1 - p0 : 1));
  u16* chunk = aligned(chunk_storage, std::size_t(kc) * nc);
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
        u16* panel = panels + (keep_panels ? std::size_t(p - p0) * kBlock * kcs : 0);
        if (!keep_panels || j0 == 0) pack_a_panel(panel, ta, m0, M, k0, kcs, K, A, lda);
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
