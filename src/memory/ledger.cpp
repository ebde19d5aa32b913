#include "memory/ledger.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace trident {

const char* mem_category_name(MemCategory c) {
  switch (c) {
    case MemCategory::parameters: return "params";
    case MemCategory::gradients: return "grads";
    case MemCategory::optimizer: return "optimizer";
    case MemCategory::activations: return "activations";
    case MemCategory::buffers: return "buffers";
    case MemCategory::count: break;
  }
  return "?";
}

void MemoryLedger::allocate(MemCategory c, std::size_t bytes) {
  current_[idx(c)] += bytes;
  peak_[idx(c)] = std::max(peak_[idx(c)], current_[idx(c)]);
  total_ += bytes;
  peak_total_ = std::max(peak_total_, total_);
}

void MemoryLedger::release(MemCategory c, std::size_t bytes) {
  current_[idx(c)] -= std::min(bytes, current_[idx(c)]);
  total_ -= std::min(bytes, total_);
}

std::string format_bytes(double b) {
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return fmt::format("{:.1f} MiB", b / (1024.0 * 1024));
  if (b >= 1024.0) return fmt::format("{:.1f} KiB", b / 1024.0);
  return fmt::format("{:.0f} B", b);
}

std::string MemoryLedger::summary() const {
  std::string s;
  for (int i = 0; i < kMemCategories; ++i) {
    auto c = static_cast<MemCategory>(i);
    s += fmt::format("{}{} {}", i ? ", " : "", mem_category_name(c), format_bytes(peak(c)));
  }
  return s + fmt::format("; peak total {}", format_bytes(peak_total_));
}

}  // namespace trident
