#include "checkpoint/checksum.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace trident {
namespace {

// The hot loop of every checkpoint write and read, built for each vector unit
// and picked at run time (64-bit multiplies are single instructions with
// AVX-512DQ; AVX2 emulates them): on the benchmark VM (AVX2) one core sums
// 4.6 GB/s, the scalar loop 2.3. It is checksum_element with the index's
// spread strength-reduced to an add (consecutive indices): two 64-bit
// multiplies per element, not three.
template <class Bits>
inline std::uint64_t sum_loop(const Bits* p, std::uint64_t first, std::size_t n) {
  std::uint64_t sum = 0, spread = first * kChecksumIndexSpread;
  for (std::size_t i = 0; i < n; ++i, spread += kChecksumIndexSpread)
    sum += checksum_mix(spread ^ p[i]);
  return sum;
}

// sum_loop that also copies each element to `out`: one pass over the source
// where a copy and then a sum read it twice.
template <class Bits>
inline std::uint64_t copy_sum_loop(Bits* __restrict out, const Bits* __restrict p,
                                   std::uint64_t first, std::size_t n) {
  std::uint64_t sum = 0, spread = first * kChecksumIndexSpread;
  for (std::size_t i = 0; i < n; ++i, spread += kChecksumIndexSpread) {
    const Bits x = p[i];
    out[i] = x;
    sum += checksum_mix(spread ^ x);
  }
  return sum;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
template <class Bits>
__attribute__((target("avx2,avx512f,avx512dq,avx512vl"), flatten))
std::uint64_t copy_sum_avx512(Bits* out, const Bits* p, std::uint64_t first, std::size_t n) {
  return copy_sum_loop(out, p, first, n);
}
template <class Bits>
__attribute__((target("avx2"), flatten))
std::uint64_t copy_sum_avx2(Bits* out, const Bits* p, std::uint64_t first, std::size_t n) {
  return copy_sum_loop(out, p, first, n);
}
template <class Bits>
__attribute__((target("avx2,avx512f,avx512dq,avx512vl"), flatten))
std::uint64_t sum_avx512(const Bits* p, std::uint64_t first, std::size_t n) {
  return sum_loop(p, first, n);
}
template <class Bits>
__attribute__((target("avx2"), flatten))
std::uint64_t sum_avx2(const Bits* p, std::uint64_t first, std::size_t n) {
  return sum_loop(p, first, n);
}
// __builtin_cpu_supports answers a feature's bit, not 1: tested as a bool.
ChecksumIsa detect_isa() {
  __builtin_cpu_init();  // callable before the constructors that would run it
  if (__builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return ChecksumIsa::avx512;
  return __builtin_cpu_supports("avx2") ? ChecksumIsa::avx2 : ChecksumIsa::scalar;
}
ChecksumIsa isa() {
  static const ChecksumIsa picked = detect_isa();
  return picked;
}

template <class Bits>
std::uint64_t sum_run(const Bits* p, std::uint64_t first, std::size_t n) {
  if (isa() == ChecksumIsa::avx512) return sum_avx512(p, first, n);
  if (isa() == ChecksumIsa::avx2) return sum_avx2(p, first, n);
  return sum_loop(p, first, n);
}
template <class Bits>
std::uint64_t copy_sum_run(Bits* out, const Bits* p, std::uint64_t first, std::size_t n) {
  if (isa() == ChecksumIsa::avx512) return copy_sum_avx512(out, p, first, n);
  if (isa() == ChecksumIsa::avx2) return copy_sum_avx2(out, p, first, n);
  return copy_sum_loop(out, p, first, n);
}
#else
ChecksumIsa isa() { return ChecksumIsa::scalar; }
template <class Bits>
std::uint64_t sum_run(const Bits* p, std::uint64_t first, std::size_t n) {
  return sum_loop(p, first, n);
}
template <class Bits>
std::uint64_t copy_sum_run(Bits* out, const Bits* p, std::uint64_t first, std::size_t n) {
  return copy_sum_loop(out, p, first, n);
}
#endif

// Element bits as an integer array, whatever the buffer's alignment.
template <class Bits>
std::uint64_t sum_unaligned(const void* data, std::uint64_t first, std::size_t n) {
  if (reinterpret_cast<std::uintptr_t>(data) % alignof(Bits) == 0)
    return sum_run(static_cast<const Bits*>(data), first, n);
  std::vector<Bits> copy(n);
  std::memcpy(copy.data(), data, n * sizeof(Bits));
  return sum_run(copy.data(), first, n);
}

template <class Bits>
std::uint64_t copy_sum_unaligned(void* out, const void* data, std::uint64_t first, std::size_t n) {
  const auto aligned = [](const void* q) {
    return reinterpret_cast<std::uintptr_t>(q) % alignof(Bits) == 0;
  };
  if (aligned(out) && aligned(data))
    return copy_sum_run(static_cast<Bits*>(out), static_cast<const Bits*>(data), first, n);
  std::memcpy(out, data, n * sizeof(Bits));
  return sum_unaligned<Bits>(out, first, n);
}

}  // namespace

std::uint64_t checksum_copy(void* out, const void* data, std::size_t elem_bytes,
                            std::uint64_t first, std::size_t n) {
  if (elem_bytes == 4) return copy_sum_unaligned<std::uint32_t>(out, data, first, n);
  if (elem_bytes == 2) return copy_sum_unaligned<std::uint16_t>(out, data, first, n);
  throw std::logic_error("checksum_copy: unsupported element size");
}

ChecksumIsa checksum_isa() { return isa(); }

const char* checksum_isa_name(ChecksumIsa isa) {
  switch (isa) {
    case ChecksumIsa::avx512: return "avx512";
    case ChecksumIsa::avx2: return "avx2";
    case ChecksumIsa::scalar: break;
  }
  return "scalar";
}

std::uint64_t checksum_run(const void* data, std::size_t elem_bytes, std::uint64_t first,
                           std::size_t n, bool all_threads) {
  if (elem_bytes != 4 && elem_bytes != 2)
    throw std::logic_error("checksum_run: unsupported element size");
  auto run = [elem_bytes](const void* p, std::uint64_t f, std::size_t k) {
    return elem_bytes == 4 ? sum_unaligned<std::uint32_t>(p, f, k)
                           : sum_unaligned<std::uint16_t>(p, f, k);
  };
  // A rank with cores to spare (one rank writing for a node) sums a large
  // run on all of them: the sum modulo 2^64 does not depend on the split.
  constexpr std::size_t kPart = std::size_t{1} << 16;
  const int threads = !all_threads || omp_in_parallel() ? 1 : omp_get_max_threads();
  if (threads < 2 || n < 2 * kPart) return run(data, first, n);
  const auto* bytes = static_cast<const char*>(data);
  const std::int64_t parts = std::int64_t((n + kPart - 1) / kPart);
  std::uint64_t sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(static)
  for (std::int64_t i = 0; i < parts; ++i) {
    const std::size_t lo = std::size_t(i) * kPart, k = std::min(kPart, n - lo);
    sum += run(bytes + lo * elem_bytes, first + lo, k);
  }
  return sum;
}

std::uint64_t checksum_slice(const TensorSlice& s, const std::vector<SliceBox>& boxes,
                             std::size_t esz) {
  const auto* p = static_cast<const unsigned char*>(s.data);
  std::uint64_t sum = 0;
  for (const SliceBox& b : boxes)
    for_each_run(*s.shard, b, [&](std::size_t l, std::uint64_t g, std::size_t len) {
      sum += checksum_run(p + (l - s.lo) * esz, esz, g, len);
    });
  return sum;
}

}  // namespace trident
