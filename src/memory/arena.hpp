// One contiguous allocation on the compute backend's device, charged to a
// memory category of the ledger for its whole life.
#pragma once
#include <cstddef>

#include "compute/backend.hpp"
#include "core/dtype.hpp"
#include "memory/ledger.hpp"
#include "memory/tensor_table.hpp"

namespace trident {

class Arena {
 public:
  Arena() = default;
  Arena(ComputeBackend& backend, MemoryLedger& ledger, MemCategory category, std::size_t numel,
        DType dtype = DType::f32);
  ~Arena();
  Arena(Arena&& o) noexcept;
  Arena& operator=(Arena&& o) noexcept;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  float* f32() { return static_cast<float*>(data_); }
  const float* f32() const { return static_cast<const float*>(data_); }
  float* f32(const TensorInfo& t) { return f32() + t.offset; }
  const float* f32(const TensorInfo& t) const { return f32() + t.offset; }
  std::size_t numel() const { return numel_; }
  std::size_t bytes() const { return numel_ * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  void zero();

 private:
  void free_all();
  ComputeBackend* backend_ = nullptr;
  MemoryLedger* ledger_ = nullptr;
  MemCategory category_ = MemCategory::buffers;
  DType dtype_ = DType::f32;
  std::size_t numel_ = 0;
  void* data_ = nullptr;
};

}  // namespace trident
