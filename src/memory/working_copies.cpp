#include "memory/working_copies.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace trident {

std::vector<std::size_t> WorkingCopies::slot_sizes(const TensorTable& table) {
  const std::vector<UnitRange> units = unit_ranges(table);
  std::size_t embedding = 0, block = 0, other = 0;
  for (const TensorInfo& t : table.tensors()) {
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
                             const TensorTable& table)
    : backend_(&backend) {
  for (std::size_t n : slot_sizes(table)) {
    slots_.emplace_back();
    slots_.back().mem = Arena(backend, ledger, MemCategory::buffers, n);
  }
}

float* WorkingCopies::find(int unit) {
  for (Slot& s : slots_)
    if (s.unit == unit) return s.mem.f32();
  return nullptr;
}

float* WorkingCopies::acquire(int unit, const void* bits, DType type, std::size_t n) {
  return acquire_filled(unit, n, [&](float* copy) {
    backend_->convert(copy, DType::f32, bits, type, n);
  });
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
