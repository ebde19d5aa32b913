#include "io/checksum.hpp"

#include <cstring>
#include <stdexcept>

namespace trident {
namespace {

template <class Bits>
std::uint64_t sum_run(const void* data, std::uint64_t first, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t sum = 0;
  // Wrapping sums are exact in any order, so threads may split the run.
#pragma omp parallel for reduction(+ : sum) schedule(static) if (n >= (std::size_t(1) << 16))
  for (std::size_t i = 0; i < n; ++i) {
    Bits b;
    std::memcpy(&b, p + i * sizeof(Bits), sizeof(Bits));
    sum += checksum_element(first + i, b);
  }
  return sum;
}

}  // namespace

std::uint64_t checksum_run(const void* data, std::size_t elem_bytes, std::uint64_t first,
                           std::size_t n) {
  switch (elem_bytes) {
    case 4: return sum_run<std::uint32_t>(data, first, n);
    case 2: return sum_run<std::uint16_t>(data, first, n);
    case 8: return sum_run<std::uint64_t>(data, first, n);
    default: throw std::logic_error("checksum_run: unsupported element size");
  }
}

std::uint64_t checksum_packed(const TensorInfo& shard, const std::vector<SliceBox>& boxes,
                              const void* packed, std::size_t esz) {
  const auto* p = static_cast<const unsigned char*>(packed);
  std::uint64_t sum = 0;
  for (const SliceBox& b : boxes)
    for_each_run(shard, b, [&](std::size_t, std::uint64_t g, std::size_t len) {
      sum += checksum_run(p, esz, g, len);
      p += len * esz;
    });
  return sum;
}

}  // namespace trident
