#include "comm/block_reduce.hpp"

#include <algorithm>
#include <cstdint>

#include "core/error.hpp"
#include "core/half.hpp"

namespace trident {
namespace {

template <class T>
void combine(T* acc, const T* in, std::size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      for (std::size_t i = 0; i < n; ++i) acc[i] += in[i];
      return;
    case ReduceOp::max:
      for (std::size_t i = 0; i < n; ++i) acc[i] = std::max(acc[i], in[i]);
      return;
    case ReduceOp::min:
      for (std::size_t i = 0; i < n; ++i) acc[i] = std::min(acc[i], in[i]);
      return;
  }
}

template <bool Bf16>
void sum_16bit(std::uint16_t* acc, const std::uint16_t* in, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const float s = Bf16 ? bf16_to_f32(acc[i]) + bf16_to_f32(in[i])
                         : f16_to_f32(acc[i]) + f16_to_f32(in[i]);
    acc[i] = Bf16 ? f32_to_bf16(s) : f32_to_f16(s);
  }
}

}  // namespace

void reduce_into(void* acc, const void* in, std::size_t n, DType t, ReduceOp op) {
  switch (t) {
    case DType::f32: return combine(static_cast<float*>(acc), static_cast<const float*>(in), n, op);
    case DType::f64: return combine(static_cast<double*>(acc), static_cast<const double*>(in), n, op);
    case DType::i32:
      return combine(static_cast<std::int32_t*>(acc), static_cast<const std::int32_t*>(in), n, op);
    case DType::i64:
      return combine(static_cast<std::int64_t*>(acc), static_cast<const std::int64_t*>(in), n, op);
    case DType::u8:
      return combine(static_cast<std::uint8_t*>(acc), static_cast<const std::uint8_t*>(in), n, op);
    case DType::u16:
      return combine(static_cast<std::uint16_t*>(acc), static_cast<const std::uint16_t*>(in), n, op);
    case DType::u64:  // sums wrap modulo 2^64 (checksums)
      return combine(static_cast<std::uint64_t*>(acc), static_cast<const std::uint64_t*>(in), n, op);
    case DType::bf16: case DType::f16: {
      if (op != ReduceOp::sum)
        throw RuntimeFailure("16-bit float reductions support only sums");
      auto* a = static_cast<std::uint16_t*>(acc);
      const auto* b = static_cast<const std::uint16_t*>(in);
      return t == DType::bf16 ? sum_16bit<true>(a, b, n) : sum_16bit<false>(a, b, n);
    }
  }
}

}  // namespace trident
