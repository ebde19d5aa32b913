// Layout-independent checksums of global tensors. Each element contributes a
// 64-bit mix of (its global row-major flat index, its raw bits); the checksum
// is the sum of the contributions modulo 2^64. A sum does not depend on which
// rank holds which elements or in what order they are added, so any layout
// can compute its slices' partial sums and add them over ranks (one u64
// all-reduce), and a file written by one layout verifies under another.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "checkpoint/tensor_slice.hpp"

namespace trident {

// The contribution of one element: bits are the element's bytes as an unsigned
// little-endian integer (32-bit for f32, 16-bit for 16-bit types). The index is
// spread by a golden-ratio multiply, then the murmur3 64-bit finalizer mixes.
constexpr std::uint64_t kChecksumIndexSpread = 0x9E3779B97F4A7C15ull;
constexpr std::uint64_t checksum_mix(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  x *= 0xC4CEB9FE1A85EC53ull;
  x ^= x >> 33;
  return x;
}
constexpr std::uint64_t checksum_element(std::uint64_t global_index, std::uint64_t bits) {
  return checksum_mix(global_index * kChecksumIndexSpread ^ bits);
}

// The vector unit checksum_run sums with, picked once from the CPU's features.
enum class ChecksumIsa { scalar, avx2, avx512 };
ChecksumIsa checksum_isa();
const char* checksum_isa_name(ChecksumIsa isa);

// Sum over `n` consecutive elements of `elem_bytes` (2 or 4) bytes whose global
// flat indices start at `first_index`. A large run is summed on all of the
// rank's OpenMP threads unless `all_threads` is false: the read stream sums on
// one, since idle OpenMP workers spin and starve its reader thread (1 rank on
// 2 cores reading 1.49 GB: 0.82, 1.12, 0.92, 1.13 GB/s on one thread against
// 0.72, 0.60, 0.64, 0.86 on two, in alternating pairs).
std::uint64_t checksum_run(const void* data, std::size_t elem_bytes, std::uint64_t first_index,
                           std::size_t n, bool all_threads = true);

// checksum_run(data, ...) on one thread, copying the `n` elements to `out` in
// the same pass (the background writer's copy into its direct-I/O buffers).
std::uint64_t checksum_copy(void* out, const void* data, std::size_t elem_bytes,
                            std::uint64_t first_index, std::size_t n);

// Sum over the elements of a slice that `boxes` (slice_boxes of its range)
// cover, read in place: padding is not part of any tensor and never counts.
std::uint64_t checksum_slice(const TensorSlice& slice, const std::vector<SliceBox>& boxes,
                             std::size_t elem_bytes);

}  // namespace trident
