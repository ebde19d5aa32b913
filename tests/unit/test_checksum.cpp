// checksum_run, on whichever vector unit it picked, against the element-wise
// definition: every length around the vector widths, unaligned buffers,
// offsets into the global index space, 2- and 4-byte elements, one thread and
// all. And it picked the unit this CPU has (a scalar fallback computes the
// same sums at half the speed, which only a benchmark would notice).
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "checkpoint/checksum.hpp"

using namespace trident;

namespace {

std::uint64_t reference(const unsigned char* bytes, std::size_t esz, std::uint64_t first,
                        std::size_t n) {
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t bits = 0;
    std::memcpy(&bits, bytes + i * esz, esz);  // little-endian
    sum += checksum_element(first + i, bits);
  }
  return sum;
}

std::vector<unsigned char> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

}  // namespace

TEST(Checksum, PicksTheCpusVectorUnit) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  const bool avx2 = __builtin_cpu_supports("avx2");
  const ChecksumIsa want = avx512 ? ChecksumIsa::avx512
                           : avx2 ? ChecksumIsa::avx2
                                  : ChecksumIsa::scalar;
  EXPECT_STREQ(checksum_isa_name(checksum_isa()), checksum_isa_name(want));
#else
  EXPECT_EQ(checksum_isa(), ChecksumIsa::scalar);
#endif
}

TEST(Checksum, RunsMatchTheElementDefinition) {
  const std::vector<unsigned char> data = random_bytes(4 * 300 + 8, 7);
  for (std::size_t esz : {std::size_t{2}, std::size_t{4}})
    for (std::size_t misalign : {0, 1, 2, 3})
      for (std::size_t n = 0; n <= 300; n += (n < 40 ? 1 : 37)) {
        const unsigned char* p = data.data() + misalign;
        const std::uint64_t first = 1000003 * n + misalign;  // any global offset
        EXPECT_EQ(checksum_run(p, esz, first, n, false), reference(p, esz, first, n))
            << "esz " << esz << " n " << n << " misalign " << misalign;
      }
}

// The drain's one-pass copy and sum: the sum of the source, and a copy of it.
TEST(Checksum, CopyingRunsSumTheSourceAndCopyIt) {
  const std::vector<unsigned char> data = random_bytes(4 * 300 + 8, 11);
  for (std::size_t esz : {std::size_t{2}, std::size_t{4}})
    for (std::size_t misalign : {0, 1, 2})
      for (std::size_t n = 0; n <= 300; n += (n < 40 ? 1 : 37)) {
        const unsigned char* p = data.data() + misalign;
        std::vector<unsigned char> out(n * esz + 3, 0xAB);
        const std::uint64_t first = 77 * n + misalign;
        EXPECT_EQ(checksum_copy(out.data() + misalign, p, esz, first, n),
                  reference(p, esz, first, n))
            << "esz " << esz << " n " << n << " misalign " << misalign;
        EXPECT_EQ(std::memcmp(out.data() + misalign, p, n * esz), 0) << esz << " " << n;
        EXPECT_EQ(out[misalign + n * esz], 0xAB) << "wrote past the end";
      }
  unsigned char one[4] = {};
  EXPECT_THROW(checksum_copy(one, one, 8, 0, 0), std::logic_error);
}

TEST(Checksum, LargeRunIsTheSameOnOneThreadAndAll) {
  // Large enough to split over OpenMP threads (parts of 64 Ki elements).
  const std::size_t n = (std::size_t{1} << 18) + 12345;
  const std::vector<unsigned char> data = random_bytes(4 * n, 11);
  for (std::size_t esz : {std::size_t{2}, std::size_t{4}}) {
    const std::uint64_t want = reference(data.data(), esz, 42, n);
    EXPECT_EQ(checksum_run(data.data(), esz, 42, n, false), want) << esz;
    omp_set_num_threads(2);
    EXPECT_EQ(checksum_run(data.data(), esz, 42, n, true), want) << esz;
  }
}

TEST(Checksum, SumsAddOverSplits) {
  // The property resharding relies on: any cut of a run, summed in parts,
  // gives the whole run's sum.
  const std::size_t n = 1000;
  const std::vector<unsigned char> data = random_bytes(4 * n, 13);
  const std::uint64_t whole = checksum_run(data.data(), 4, 5, n, false);
  for (std::size_t cut : {1, 7, 333, 999}) {
    const std::uint64_t parts = checksum_run(data.data(), 4, 5, cut, false) +
                                checksum_run(data.data() + 4 * cut, 4, 5 + cut, n - cut, false);
    EXPECT_EQ(parts, whole) << cut;
  }
}
