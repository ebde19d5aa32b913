// Element types that cross the seams (collectives, arenas, files).
#pragma once
#include <cstddef>
#include <cstdint>

namespace trident {

// u64 carries checksums (sums modulo 2^64) through the collectives.
enum class DType : std::uint8_t { f32, f64, i32, i64, u8, u16, bf16, f16, u64 };

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64: case DType::i64: case DType::u64: return 8;
    case DType::f32: case DType::i32: return 4;
    case DType::u16: case DType::bf16: case DType::f16: return 2;
    case DType::u8: return 1;
  }
  return 0;
}

constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";   case DType::f64: return "f64";
    case DType::i32: return "i32";   case DType::i64: return "i64";
    case DType::u8: return "u8";     case DType::u16: return "u16";
    case DType::bf16: return "bf16"; case DType::f16: return "f16";
    case DType::u64: return "u64";
  }
  return "?";
}

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<std::int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<std::int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<std::uint8_t>() { return DType::u8; }
template <> constexpr DType dtype_of<std::uint16_t>() { return DType::u16; }
template <> constexpr DType dtype_of<std::uint64_t>() { return DType::u64; }

}  // namespace trident
