// Byte accounting by category, current and peak, so every byte a rank holds is
// attributable (parameters, gradients, optimizer state, activations, buffers).
// The first three are model state as the ZeRO paper counts it (the resident
// copies or this rank's shards); buffers are working memory held only while a
// unit is in flight: gather and reduce slots, f32 working copies, chunks.
#pragma once
#include <array>
#include <cstddef>
#include <string>

namespace trident {

enum class MemCategory : int { parameters, gradients, optimizer, activations, buffers, count };
const char* mem_category_name(MemCategory c);
constexpr int kMemCategories = static_cast<int>(MemCategory::count);

class MemoryLedger {
 public:
  void allocate(MemCategory c, std::size_t bytes);
  void release(MemCategory c, std::size_t bytes);
  std::size_t current(MemCategory c) const { return current_[idx(c)]; }
  std::size_t peak(MemCategory c) const { return peak_[idx(c)]; }
  std::size_t peak_total() const { return peak_total_; }
  std::string summary() const;  // one line, MiB per category

 private:
  static int idx(MemCategory c) { return static_cast<int>(c); }
  std::array<std::size_t, kMemCategories> current_{}, peak_{};
  std::size_t total_ = 0, peak_total_ = 0;
};

std::string format_bytes(double bytes);

}  // namespace trident
