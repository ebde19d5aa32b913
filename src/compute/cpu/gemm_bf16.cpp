#include "compute/cpu/gemm_bf16.hpp"

#include <omp.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>

#include "compute/cpu/amx_gemm.hpp"
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
  bool ta, tb, accumulate, bias = false;  // bias: C = op(A) op(B) + a row of n
  auto key() const { return std::tie(m, n, K, lda, ldb, ldc, ta, tb, accumulate, bias); }
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
    const dnnl::matmul::desc d =
        s.bias ? dnnl::matmul::desc(a, b, memory::desc({1, s.n}, memory::data_type::f32, {s.n, 1}), c)
               : dnnl::matmul::desc(a, b, c);
    dnnl::matmul::primitive_desc pd(d, attr, cpu_engine());
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
TRIDENT_VECTOR_CLONES bool pack_bf16(ScratchVector<std::uint16_t>& out, const float* x, int rows,
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

// oneDNN 2.6 runs its AMX (brgemm) matmul only when every operand of a call
// is dense; a tile of C inside a wider C, or a tile read across a wider
// leading dimension, falls to its gemm:jit kernels, which measured at half
// the speed on this AMX Xeon (a 4096 x 2304 x 768 product on one thread: 376
// GFLOP/s in 512 x 384 tiles, 773 in row tiles of 256). So the bf16 GEMM
// tiles C by rows only, each tile spanning all columns; like gemm()'s tiles,
// they depend on the shape alone.
struct RowTiles {
  int tm, rows, last;  // rows per tile, tiles, rows of the last one
};

RowTiles row_tiles(int M) {
  constexpr int kRows = 256, kSmallRows = 128, kFewTiles = 4;  // measured, as above
  RowTiles g;
  g.tm = std::min(M, M < kFewTiles * kRows ? kSmallRows : kRows);
  g.rows = (M + g.tm - 1) / g.tm;
  g.last = M - (g.rows - 1) * g.tm;
  return g;
}

// rows x cols of x (leading dimension ld) into out with leading dimension
// out_ld.
template <class T>
void copy_rows(T* out, const T* x, int rows, int cols, int ld, int out_ld) {
  for (int r = 0; r < rows; ++r)
    std::memcpy(out + std::size_t(r) * out_ld, x + std::size_t(r) * ld, sizeof(T) * cols);
}

// rows x cols of x, contiguous, in `out`.
const std::uint16_t* copy_rows(ScratchVector<std::uint16_t>& out, const std::uint16_t* x, int rows,
                               int cols, int ld) {
  out.resize(std::size_t(rows) * cols);
  copy_rows(out.data(), x, rows, cols, ld, cols);
  return out.data();
}

// C = op(a) op(b) (+ C) for one cached tile matmul, on the calling thread:
// each thread keeps its own stream and scratchpad.
void run_tile(const TileMatmul& op, const std::uint16_t* a, const std::uint16_t* b, float* c,
              const float* bias = nullptr) {
  thread_local dnnl::stream stream(cpu_engine());
  thread_local ScratchVector<std::uint8_t> scratch;
  const dnnl::engine& eng = cpu_engine();
  memory am(op.pd.src_desc(), eng, const_cast<std::uint16_t*>(a));
  memory bm(op.pd.weights_desc(), eng, const_cast<std::uint16_t*>(b));
  memory cm(op.pd.dst_desc(), eng, c);
  const memory::desc sd = op.pd.scratchpad_desc();
  if (scratch.size() < sd.get_size()) scratch.resize(sd.get_size());
  memory sm(sd, eng, scratch.data());
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm},
                                       {DNNL_ARG_DST, cm}, {DNNL_ARG_SCRATCHPAD, sm}};
  if (bias) args.emplace(DNNL_ARG_BIAS, memory(op.pd.bias_desc(), eng, const_cast<float*>(bias)));
  op.run.execute(stream, args);
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

bool pack_bf16_values(ScratchVector<std::uint16_t>& out, const float* x, int rows, int cols, int ld) {
  return holds_bf16_values(x, 1, cols, ld) && pack_bf16(out, x, rows, cols, ld);
}

bool gemm_bf16(bool ta, bool tb, int M, int N, int K, Bf16Operand A, int lda, Bf16Operand B,
               int ldb, bool accumulate, float* C, int ldc, const float* bias) {
  if (!cpu_has_bf16_kernels() || M <= 0 || N <= 0 || K <= 0 || (bias && accumulate)) return false;
  // Stored layouts: A is M x K (ta: K x M), B is K x N (tb: N x K). Values
  // are packed contiguously; an f32 run's values fail on the first row,
  // before any packing.
  const int a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
  if (!A.bits && !holds_bf16_values(A.values, 1, a_cols, lda)) return false;
  if (!B.bits && !holds_bf16_values(B.values, 1, b_cols, ldb)) return false;
  thread_local ScratchVector<std::uint16_t> a16, b16;
  const std::uint16_t *a = A.bits, *b = B.bits;
  int a_ld = lda, b_ld = ldb;
  if (!A.bits && !pack_bf16(a16, A.values, a_rows, a_cols, lda)) return false;
  if (!A.bits) a = a16.data(), a_ld = a_cols;
  if (!B.bits && !pack_bf16(b16, B.values, b_rows, b_cols, ldb)) return false;
  if (!B.bits) b = b16.data(), b_ld = b_cols;
  if (amx_available()) {  // any layout and leading dimension as it is
    amx_gemm(ta, tb, M, N, K, a, a_ld, b, b_ld, accumulate, C, ldc, bias, true);
    return true;
  }
  const RowTiles g = row_tiles(M);
  // Every call's operands dense (see row_tiles): a transposed A's tile is
  // packed per tile unless one tile spans it.
  const bool a_per_tile = ta && g.rows > 1;
  const TileMatmul* ops[2];  // [last tile]
  try {
    for (int last = 0; last < 2; ++last) {
      const int m = last ? g.last : g.tm;
      ops[last] = &tile_matmul(
          TileShape{m, N, K, ta ? m : K, b_cols, N, ta, tb, accumulate, bias != nullptr});
    }
  } catch (const dnnl::error&) {
    return false;
  }
  // Bits inside wider matrices (only given bits can be) are made dense.
  if (a_ld != a_cols && !a_per_tile) a = copy_rows(a16, a, a_rows, a_cols, a_ld), a_ld = a_cols;
  if (b_ld != b_cols) b = copy_rows(b16, b, b_rows, b_cols, b_ld);
#pragma omp parallel if (omp_get_level() == 0 && g.rows > 1)
  {
    omp_set_num_threads(1);  // as in gemm(): each tile on its own thread
    thread_local ScratchVector<std::uint16_t> a_tile;
    thread_local ScratchVector<float> c_tile;
#pragma omp for schedule(static)
    for (int t = 0; t < g.rows; ++t) {
      const std::int64_t i = std::int64_t(t) * g.tm;
      const int m = t == g.rows - 1 ? g.last : g.tm;
      const std::uint16_t* at = ta ? a + i : a + i * a_ld;
      if (a_per_tile) at = copy_rows(a_tile, at, K, m, a_ld);
      float* c = C + i * ldc;
      if (ldc != N) {  // C's tile through a dense buffer
        c_tile.resize(std::size_t(m) * N);
        if (accumulate) copy_rows(c_tile.data(), c, m, N, ldc, N);
        run_tile(*ops[t == g.rows - 1], at, b, c_tile.data(), bias);
        copy_rows(c, c_tile.data(), m, N, N, ldc);
      } else {
        run_tile(*ops[t == g.rows - 1], at, b, c, bias);
      }
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
  if (amx_available()) {
    amx_gemm(ta, tb, M, N, K, A, lda, B, ldb, accumulate, C, ldc, nullptr, false);
    return;
  }
  const TileMatmul* op = nullptr;
  if (cpu_has_bf16_kernels()) try {
      op = &tile_matmul(TileShape{M, N, K, lda, ldb, ldc, ta, tb, accumulate});
    } catch (const dnnl::error&) {
    }
  if (!op) {  // the same products and f32 sums on the f32 GEMM
    thread_local ScratchVector<float> a, b;
    auto widen = [](ScratchVector<float>& out, const std::uint16_t* x, int rows, int cols, int ld) {
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
