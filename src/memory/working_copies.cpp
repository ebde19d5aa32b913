#include "memory/working_copies.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace trident {

bool WorkingCopies::can_window_table(const TensorTable& table) {
  const TensorInfo* w = table.find("wte");
  return w && w->units == 1;
}

std::size_t WorkingCopies::window_elements(const TensorTable& table) {
  const TensorInfo& w = table.at("wte");
  const std::size_t C = std::size_t(w.shape[1]);
  return std::min(w.numel, C * C);
}

std::vector<std::size_t> WorkingCopies::slot_sizes(const TensorTable& table, bool table_window) {
  const std::vector<UnitRange> units = unit_ranges(table);
  std::size_t embedding = 0, block = 0, other = 0;
  if (table_window) embedding = window_elements(table);
  for (const TensorInfo& t : table.tensors()) {
    if (table_window && t.name == "wte") continue;
    const std::size_t n = units[t.unit].size();
    std::size_t& cls = t.name == "wte" ? embedding : t.layer >= 0 ? block : other;
    cls = std::max(cls, n);
  }
  std::vector<std::size_t> sizes;
  for (std::size_t n : {embedding, block, other, other})
    if (n > 0) sizes.push_back(n);
  return sizes;
}

WorkingCopies::WorkingCopies(ComputeBackend& backend, MemoryLedger& ledger,
                             const TensorTable& table, bool table_window)
    : backend_(&backend) {
  const std::vector<std::size_t> sizes = slot_sizes(table, table_window);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (table_window && i == 0) {
      window_ = Arena(backend, ledger, MemCategory::buffers, sizes[i]);
      continue;
    }
    slots_.emplace_back();
    slots_.back().mem = Arena(backend, ledger, MemCategory::buffers, sizes[i]);
  }
}

float* WorkingCopies::window(const void* bits, DType type, std::size_t n) {
  if (n > window_.numel())
    throw std::logic_error("working copies: " + std::to_string(n) + " elements exceed the table's window");
  backend_->convert(window_.data(), DType::f32, bits, type, n);
  return window_.f32();
}

void WorkingCopies::window_back(void* bits, DType type, std::size_t n) {
  backend_->convert(bits, type, window_.data(), DType::f32, n);
}

float* WorkingCopies::find(int unit) {
  for (Slot& s : slots_)
    if (s.unit == unit) return s.mem.f32();
  return nullptr;
}

float* WorkingCopies::acquire(int unit, const void* bits, DType type, std::size_t n) {
  return acquire_filled(unit, n, [&](float* copy) {
    // The gaps between the skipped ranges.
    const auto* from = static_cast<const char*>(bits);
    std::size_t at = 0;
    auto convert = [&](std::size_t end) {
      if (end > at)
        backend_->convert(copy + at, DType::f32, from + at * dtype_size(type), type, end - at);
    };
    if (auto it = skipped_.find(unit); it != skipped_.end())
      for (const auto& [first, count] : it->second) {
        convert(first);
        at = first + count;
      }
    convert(n);
  });
}

void WorkingCopies::skip(int unit, std::size_t first, std::size_t n) {
  if (skipped(unit, first)) return;
  auto& ranges = skipped_[unit];
  ranges.push_back({first, n});
  std::sort(ranges.begin(), ranges.end());
}

bool WorkingCopies::skipped(int unit, std::size_t first) const {
  const auto it = skipped_.find(unit);
  if (it == skipped_.end()) return false;
  for (const auto& range : it->second)
    if (range.first == first) return true;
  return false;
}

float* WorkingCopies::acquire_filled(int unit, std::size_t n,
                                     const std::function<void(float*)>& fill) {
  Slot* best = nullptr;  // the unit's own slot, else the smallest free slot that fits
  for (Slot& s : slots_) {
    if (s.unit == unit) {
      ++s.users;
      return s.mem.f32();
    }
    if (s.unit == -1 && s.mem.numel() >= n && (!best || s.mem.numel() < best->mem.numel()))
      best = &s;
  }
  if (!best)
    throw std::logic_error("working copies: no free slot for unit " + std::to_string(unit) +
                           " (the model holds more units at once than planned)");
  fill(best->mem.f32());
  best->unit = unit;
  best->users = 1;
  return best->mem.f32();
}

void WorkingCopies::release(int unit) {
  for (Slot& s : slots_)
    if (s.unit == unit && --s.users == 0) s.unit = -1;
}

void WorkingCopies::write_back_and_release(int unit, void* bits, DType type, std::size_t n) {
  for (Slot& s : slots_)
    if (s.unit == unit) {
      backend_->convert(bits, type, s.mem.data(), DType::f32, n);
      s.unit = -1;
      s.users = 0;
    }
}

bool WorkingCopies::idle() const {
  for (const Slot& s : slots_)
    if (s.unit != -1) return false;
  return true;
}

}  // namespace trident
