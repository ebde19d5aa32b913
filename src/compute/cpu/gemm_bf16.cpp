#include "compute/cpu/gemm_bf16.hpp"

#include <omp.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>

#include "compute/cpu/blas.hpp"
#include "compute/cpu/half_convert.hpp"
#include "compute/cpu/vector_clones.hpp"

namespace trident::cpu {
namespace {

using dnnl::memory;

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

bool cpu_has_bf16() {
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  return (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
}

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// One tile's matmul on bf16 operands: A is m x K (ta: stored K x m) with
// leading dimension lda, B is K x n (tb: stored n x K) with ldb.
struct TileShape {
  int m, n, K, lda, ldb, ldc;
  bool ta, tb, accumulate;
  auto key() const { return std::tie(m, n, K, lda, ldb, ldc, ta, tb, accumulate); }
  bool operator<(const TileShape& o) const { return key() < o.key(); }
};

struct TileMatmul {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul run;
};

// Made on the calling thread with one OpenMP thread, so the primitive plans a
// single thread's work (it runs inside gemm's parallel region); cached, since
// a training run repeats a handful of shapes. Throws dnnl::error when oneDNN
// has no implementation.
const TileMatmul& tile_matmul(const TileShape& s) {
  static std::mutex mutex;
  static std::map<TileShape, std::unique_ptr<TileMatmul>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = cache[s];
  if (slot) return *slot;
  const memory::desc a({s.m, s.K}, memory::data_type::bf16,
                       s.ta ? memory::dims{1, s.lda} : memory::dims{s.lda, 1});
  const memory::desc b({s.K, s.n}, memory::data_type::bf16,
                       s.tb ? memory::dims{1, s.ldb} : memory::dims{s.ldb, 1});
  const memory::desc c({s.m, s.n}, memory::data_type::f32, memory::dims{s.ldc, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // one per thread: tiles run at once
  if (s.accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  try {
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, cpu_engine());
    slot = std::make_unique<TileMatmul>(TileMatmul{pd, dnnl::matmul(pd)});
  } catch (...) {
    omp_set_num_threads(threads);
    cache.erase(s);
    throw;
  }
  omp_set_num_threads(threads);
  return *slot;
}

// The rows x cols matrix x as bf16 bits, rows contiguous: the high half of
// each f32. False when a low half is not zero (a value bf16 cannot hold).
TRIDENT_VECTOR_CLONES bool pack_bf16(std::vector<std::uint16_t>& out, const float* x, int rows,
                                     int cols, int ld) {
  out.resize(std::size_t(rows) * cols);
  std::uint16_t* o = out.data();
  std::uint32_t low = 0;
#pragma omp parallel for schedule(static) reduction(| : low) if (std::size_t(rows) * cols > 65536)
  for (int r = 0; r < rows; ++r) {
    const float* in = x + std::size_t(r) * ld;
    std::uint16_t* dst = o + std::size_t(r) * cols;
#pragma omp simd reduction(| : low)
    for (int c = 0; c < cols; ++c) {
      const std::uint32_t u = bits_of(in[c]);
      low |= u & 0xffffu;
      dst[c] = std::uint16_t(u >> 16);
    }
  }
  return low == 0;
}

// C = op(a) op(b) (+ C) for one cached tile matmul, on the calling thread:
// each thread keeps its own stream and scratchpad.
void run_tile(const TileMatmul& op, const std::uint16_t* a, const std::uint16_t* b, float* c) {
  thread_local dnnl::stream stream(cpu_engine());
  thread_local std::vector<std::uint8_t> scratch;
  const dnnl::engine& eng = cpu_engine();
  memory am(op.pd.src_desc(), eng, const_cast<std::uint16_t*>(a));
  memory bm(op.pd.weights_desc(), eng, const_cast<std::uint16_t*>(b));
  memory cm(op.pd.dst_desc(), eng, c);
  const memory::desc sd = op.pd.scratchpad_desc();
  if (scratch.size() < sd.get_size()) scratch.resize(sd.get_size());
  memory sm(sd, eng, scratch.data());
  op.run.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm},
                          {DNNL_ARG_SCRATCHPAD, sm}});
}

}  // namespace

bool cpu_has_bf16_kernels() {
  static const bool supported = cpu_has_bf16();
  return supported;
}

TRIDENT_VECTOR_CLONES bool holds_bf16_values(const float* x, int rows, int cols, int ld) {
  for (int r = 0; r < rows; ++r) {
    const float* row = x + std::size_t(r) * ld;
    std::uint32_t low = 0;
#pragma omp simd reduction(| : low)
    for (int c = 0; c < cols; ++c) low |= bits_of(row[c]) & 0xffffu;
    if (low) return false;
  }
  return true;
}

bool pack_bf16_values(std::vector<std::uint16_t>& out, const float* x, int rows, int cols, int ld) {
  return holds_bf16_values(x, 1, cols, ld) && pack_bf16(out, x, rows, cols, ld);
}

bool gemm_bf16(bool ta, bool tb, int M, int N, int K, Bf16Operand A, int lda, Bf16Operand B,
               int ldb, bool accumulate, float* C, int ldc) {
  if (!cpu_has_bf16_kernels() || M <= 0 || N <= 0 || K <= 0) return false;
  // Stored layouts: A is M x K (ta: K x M), B is K x N (tb: N x K). Values
  // are packed contiguously, so their leading dimension becomes the row
  // length; an f32 run's values fail on the first row, before any packing.
  const int a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
  if (!A.bits && !holds_bf16_values(A.values, 1, a_cols, lda)) return false;
  if (!B.bits && !holds_bf16_values(B.values, 1, b_cols, ldb)) return false;
  const int a_ld = A.bits ? lda : a_cols, b_ld = B.bits ? ldb : b_cols;
  GemmTiles g = gemm_tiles(M, N);
  g.tm = std::min(g.tm, M), g.tn = std::min(g.tn, N);  // one tile may be smaller than a tile
  const int last_m = M - (g.rows - 1) * g.tm, last_n = N - (g.cols - 1) * g.tn;
  const TileMatmul* ops[2][2];  // [last row of tiles][last column]
  try {
    for (int lr = 0; lr < 2; ++lr)
      for (int lc = 0; lc < 2; ++lc)
        ops[lr][lc] = &tile_matmul(TileShape{lr ? last_m : g.tm, lc ? last_n : g.tn, K, a_ld, b_ld,
                                             ldc, ta, tb, accumulate});
  } catch (const dnnl::error&) {
    return false;
  }
  thread_local std::vector<std::uint16_t> a16, b16;
  if (!A.bits && !pack_bf16(a16, A.values, a_rows, a_cols, lda)) return false;
  if (!B.bits && !pack_bf16(b16, B.values, b_rows, b_cols, ldb)) return false;
  const std::uint16_t *a = A.bits ? A.bits : a16.data(), *b = B.bits ? B.bits : b16.data();
  const int tiles = g.rows * g.cols;
#pragma omp parallel if (omp_get_level() == 0 && tiles > 1)
  {
    omp_set_num_threads(1);  // as in gemm(): each tile on its own thread
#pragma omp for schedule(static)
    for (int t = 0; t < tiles; ++t) {
      const int tr = t / g.cols, tc = t % g.cols;
      const std::int64_t i = std::int64_t(tr) * g.tm, j = std::int64_t(tc) * g.tn;
      run_tile(*ops[tr == g.rows - 1][tc == g.cols - 1], ta ? a + i : a + i * a_ld,
               tb ? b + j * b_ld : b + j, C + i * ldc + j);
    }
  }
  return true;
}

bool gemm_bf16_valued(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                      const float* B, int ldb, float beta, float* C, int ldc) {
  if (alpha != 1.0f || (beta != 0.0f && beta != 1.0f)) return false;
  return gemm_bf16(ta, tb, M, N, K, {A, nullptr}, lda, {B, nullptr}, ldb, beta != 0.0f, C, ldc);
}

void gemm_bf16_bits(bool ta, bool tb, int M, int N, int K, const std::uint16_t* A, int lda,
                    const std::uint16_t* B, int ldb, bool accumulate, float* C, int ldc) {
  const TileMatmul* op = nullptr;
  if (cpu_has_bf16_kernels()) try {
      op = &tile_matmul(TileShape{M, N, K, lda, ldb, ldc, ta, tb, accumulate});
    } catch (const dnnl::error&) {
    }
  if (!op) {  // the same products and f32 sums on the f32 GEMM
    thread_local std::vector<float> a, b;
    auto widen = [](std::vector<float>& out, const std::uint16_t* x, int rows, int cols, int ld) {
      out.resize(std::size_t(rows) * cols);
      for (int r = 0; r < rows; ++r)
        from_16bit(out.data() + std::size_t(r) * cols, x + std::size_t(r) * ld, cols, DType::bf16);
    };
    widen(a, A, ta ? K : M, ta ? M : K, lda);
    widen(b, B, tb ? N : K, tb ? K : N, ldb);
    gemm(ta, tb, M, N, K, 1.0f, a.data(), ta ? M : K, b.data(), tb ? K : N,
         accumulate ? 1.0f : 0.0f, C, ldc);
    return;
  }
  run_tile(*op, A, B, C);
}

}  // namespace trident::cpu
