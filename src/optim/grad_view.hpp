// Gradients as the optimizer reads them: f32 arrays, whatever type they are
// stored in. f32 gradients are read in place; 16-bit ones (a 16-bit
// precision.reduce_dtype) are unpacked chunk by chunk into one f32 buffer, so
// unscaling and clipping act on f32 values (an fp16 gradient divided by the
// loss scale in place would underflow) and no f32 copy of the whole arena exists.
#pragma once
#include <algorithm>
#include <utility>
#include <vector>

#include "compute/backend.hpp"
#include "memory/arena.hpp"
#include "memory/ledger.hpp"

namespace trident {

class GradView {
 public:
  static constexpr std::size_t kChunk = std::size_t{1} << 18;  // elements (1 MiB)
  // Buffer elements for gradients of type `stored` in an arena of `numel`.
  static std::size_t buffer_elements(DType stored, std::size_t numel) {
    return stored == DType::f32 ? 0 : std::min(kChunk, numel);
  }
  GradView() = default;
  GradView(ComputeBackend& backend, MemoryLedger& ledger, DType stored, std::size_t numel)
      : backend_(&backend), stored_(stored) {
    if (const std::size_t n = buffer_elements(stored, numel))
      buf_ = Arena(backend, ledger, MemCategory::buffers, n);
  }

  // Whether the optimizer reads the gradients in place (f32), not in chunks.
  bool in_place() const { return stored_ == DType::f32; }
  // f(float* g, offset, n) over elements [0, n) of `grads` (an arena's data
  // from element `first`): one call in place for f32, else one per chunk
  // (g is then the buffer and may be modified).
  template <class F>
  void for_chunks(const Arena& grads, std::size_t first, std::size_t n, F&& f) {
    if (stored_ == DType::f32) return f(const_cast<float*>(grads.f32()) + first, std::size_t(0), n);
    const auto* bits = static_cast<const char*>(grads.data()) + first * dtype_size(stored_);
    for (std::size_t off = 0; off < n; off += buf_.numel()) {
      const std::size_t k = std::min(buf_.numel(), n - off);
      backend_->convert(buf_.data(), DType::f32, bits + off * dtype_size(stored_), stored_, k);
      f(buf_.f32(), off, k);
    }
  }
  // The sum over ranges (first, n) of sum_squares, added in range order; f32
  // gradients in one backend call (one wait).
  double sum_squares(const Arena& grads, const std::vector<std::pair<std::size_t, std::size_t>>& r) {
    double s = 0;
    if (stored_ != DType::f32) {
      for (const auto& [first, n] : r) s += sum_squares(grads, first, n);
      return s;
    }
    std::vector<const float*> xs;
    std::vector<std::size_t> ns;
    for (const auto& [first, n] : r) xs.push_back(grads.f32() + first), ns.push_back(n);
    std::vector<double> each(r.size());
    backend_->sum_squares_each(xs.data(), ns.data(), r.size(), each.data());
    for (double e : each) s += e;
    return s;
  }
  double sum_squares(const Arena& grads, std::size_t first, std::size_t n) {
    double s = 0;
    for_chunks(grads, first, n, [&](float* g, std::size_t, std::size_t k) {
      s += backend_->sum_squares(g, k);
    });
    return s;
  }

 private:
  ComputeBackend* backend_ = nullptr;
  DType stored_ = DType::f32;
  Arena buf_;
};

}  // namespace trident
