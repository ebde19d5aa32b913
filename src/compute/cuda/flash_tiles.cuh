// Tiles of the flash-attention kernels (flash_attention.cu): shapes, the
// mma.sync fragments, shared-memory loads (direct and cp.async) and the two
// tile products. Included by that file only.
#pragma once
#include <cstdint>

#include "compute/cuda/device_math.cuh"

namespace trident::gpu::flash {

constexpr int kRows = 64;  // a block's own rows, and the rows of each inner tile
constexpr int kWarps = 4;  // warp w owns rows 16w .. 16w + 15
constexpr int kThreads = kWarps * 32;
constexpr int kTiles = kRows / 8;  // n8 fragments across an inner tile's 64 rows
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

template <int D>
struct Shape {
  static constexpr int kLD = D + 8;  // shared-memory row stride: fragment loads hit 32 banks
  static constexpr std::size_t kTile = std::size_t(kRows) * kLD * sizeof(std::uint16_t);
  // Q, and K and V twice (the next tile loads while this one is used).
  static constexpr std::size_t kForward = 5 * kTile;
  // dK/dV: K, V, and Q, dO, lse and D twice; dQ: Q, dO, and K, V twice.
  static constexpr std::size_t kBackward = 6 * kTile + 4 * kRows * sizeof(float);
};

// Fragments of mma.m16n8k16 (PTX ISA), lane = 4 g + q:
//   A (16 x 16): rows g and g + 8, columns 2q, 2q + 1 and 2q + 8, 2q + 9;
//   B (16 x 8): column g, rows 2q, 2q + 1 and 2q + 8, 2q + 9;
//   C (16 x 8, f32): rows g (c0, c1) and g + 8 (c2, c3), columns 2q, 2q + 1.
// Pairs are packed low half first.
__device__ __forceinline__ void mma(float* c, const std::uint32_t* a, std::uint32_t b0,
                                    std::uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ std::uint32_t pair_at(const std::uint16_t* p) {
  return *reinterpret_cast<const std::uint32_t*>(p);
}
__device__ __forceinline__ std::uint32_t pair_of(std::uint16_t lo, std::uint16_t hi) {
  return std::uint32_t(lo) | (std::uint32_t(hi) << 16);
}
__device__ __forceinline__ std::uint32_t bf16_pair(float lo, float hi) {
  return pair_of(bf16_bits(lo), bf16_bits(hi));
}

// bits + at, or null where bits is (outputs whose bits are not wanted).
__device__ __forceinline__ std::uint16_t* bits_at(std::uint16_t* bits, std::size_t at) {
  return bits ? bits + at : nullptr;
}

// dst[0], dst[1] = x, y; rounded: as bf16 values, and their bits to bits[0],
// bits[1] where bits is not null (the outputs a bf16 GEMM reads next).
__device__ __forceinline__ void put_pair(float* dst, std::uint16_t* bits, float x, float y,
                                         bool rounded) {
  if (rounded) {
    const __nv_bfloat16 hx = from_f32<__nv_bfloat16>(x), hy = from_f32<__nv_bfloat16>(y);
    x = to_f32(hx), y = to_f32(hy);
    if (bits) bits[0] = __bfloat16_as_ushort(hx), bits[1] = __bfloat16_as_ushort(hy);
  }
  dst[0] = x, dst[1] = y;
}

// Rows row0 .. row0 + 63 of a (T, ld) bf16 matrix into shared memory, zeros
// past T; every load issued before the first store.
template <int D>
__device__ __forceinline__ void load_rows(std::uint16_t* dst, const std::uint16_t* src,
                                          std::size_t ld, int row0, int T) {
  constexpr int kPieces = D / 8, kEach = kRows * kPieces / kThreads;  // 16-byte pieces
  uint4 v[kEach];
#pragma unroll
  for (int e = 0; e < kEach; ++e) {
    const int i = threadIdx.x + e * kThreads, r = i / kPieces, c = i % kPieces * 8;
    v[e] = row0 + r < T ? *reinterpret_cast<const uint4*>(src + std::size_t(row0 + r) * ld + c)
                        : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int e = 0; e < kEach; ++e) {
    const int i = threadIdx.x + e * kThreads, r = i / kPieces, c = i % kPieces * 8;
    *reinterpret_cast<uint4*>(dst + r * Shape<D>::kLD + c) = v[e];
  }
}

// The same rows copied by cp.async (16 bytes a piece, not through registers),
// zeros past T stored directly: visible after cp_async_wait and a barrier.
template <int D>
__device__ __forceinline__ void load_rows_async(std::uint16_t* dst, const std::uint16_t* src,
                                                std::size_t ld, int row0, int T) {
  constexpr int kPieces = D / 8, kEach = kRows * kPieces / kThreads;
#pragma unroll
  for (int e = 0; e < kEach; ++e) {
    const int i = threadIdx.x + e * kThreads, r = i / kPieces, c = i % kPieces * 8;
    std::uint16_t* to = dst + r * Shape<D>::kLD + c;
    if (row0 + r < T) {
      const auto at = static_cast<std::uint32_t>(__cvta_generic_to_shared(to));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(at),
                   "l"(src + std::size_t(row0 + r) * ld + c)
                   : "memory");
    } else {
      *reinterpret_cast<uint4*>(to) = make_uint4(0, 0, 0, 0);
    }
  }
}
// Closes the copies issued since the last commit into one group.
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most `Pending` of this thread's groups are still in flight.
template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}

// The A fragments of a warp's 16 rows of D columns (rows kLD apart).
template <int D>
__device__ __forceinline__ void load_a(std::uint32_t (*a)[4], const std::uint16_t* rows, int g,
                                       int q) {
  constexpr int LD = Shape<D>::kLD;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const std::uint16_t* p = rows + g * LD + kk * 16 + 2 * q;
    a[kk][0] = pair_at(p), a[kk][1] = pair_at(p + 8 * LD);
    a[kk][2] = pair_at(p + 8), a[kk][3] = pair_at(p + 8 * LD + 8);
  }
}

// Four 8 x 8 b16 matrices from shared memory (ldmatrix): lanes 8i .. 8i + 7
// give the row addresses of matrix i, and lane 4g + q gets its elements (g,
// 2q) and (g, 2q + 1), or with trans (2q, g) and (2q + 1, g): exactly the
// A/B fragment pairs above, one instruction instead of one load per pair.
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t* r, const std::uint16_t* row) {
  const auto at = static_cast<std::uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(at));
}
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t* r, const std::uint16_t* row) {
  const auto at = static_cast<std::uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(at));
}

// s (16 x 64) = A (16 x D) times tile^T, the tile's 64 rows of D in shared
// memory. Each ldmatrix gives the B fragments of two k steps: matrix i is
// rows j8 .. j8 + 7, columns 8i .. 8i + 7 of the 32 columns from k 32kp.
template <int D>
__device__ __forceinline__ void scores(float (*s)[4], const std::uint32_t (*a)[4],
                                       const std::uint16_t* tile) {
  constexpr int LD = Shape<D>::kLD;
  const int lane = threadIdx.x & 31;
  const std::uint16_t* base = tile + (lane & 7) * LD + (lane >> 3) * 8;
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int kp = 0; kp < D / 32; ++kp) {
      std::uint32_t b[4];
      ldmatrix_x4(b, base + j * 8 * LD + kp * 32);
      mma(s[j], a[2 * kp], b[0], b[1]);
      mma(s[j], a[2 * kp + 1], b[2], b[3]);
    }
  }
}

// acc (16 x D) += P (16 x 64, C fragments, rounded to bf16 here) times the
// tile (64 rows of D in shared memory). Each transposing ldmatrix gives the B
// fragments of two column groups: matrix i is rows 16kk + 8(i & 1) .. + 7,
// columns 8(n + (i >> 1)) .. + 7.
template <int D>
__device__ __forceinline__ void accumulate(float (*acc)[4], const float (*p)[4],
                                           const std::uint16_t* tile) {
  constexpr int LD = Shape<D>::kLD;
  const int lane = threadIdx.x & 31;
  const std::uint16_t* base = tile + ((lane >> 3 & 1) * 8 + (lane & 7)) * LD + (lane >> 4) * 8;
#pragma unroll
  for (int kk = 0; kk < kRows / 16; ++kk) {
    const std::uint32_t a[4] = {bf16_pair(p[2 * kk][0], p[2 * kk][1]),
                                bf16_pair(p[2 * kk][2], p[2 * kk][3]),
                                bf16_pair(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                                bf16_pair(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
    for (int n = 0; n < D / 8; n += 2) {
      std::uint32_t b[4];
      ldmatrix_x4_trans(b, base + kk * 16 * LD + n * 8);
      mma(acc[n], a, b[0], b[1]);
      mma(acc[n + 1], a, b[2], b[3]);
    }
  }
}

}  // namespace trident::gpu::flash
