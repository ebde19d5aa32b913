#include "memory/arena.hpp"

#include <utility>

namespace trident {

Arena::Arena(ComputeBackend& backend, MemoryLedger& ledger, MemCategory category,
             std::size_t numel, DType dtype)
    : backend_(&backend), ledger_(&ledger), category_(category), dtype_(dtype), numel_(numel) {
  data_ = backend.allocate(bytes());
  ledger.allocate(category, bytes());
}

Arena::~Arena() { free_all(); }

void Arena::free_all() {
  if (data_) {
    backend_->release(data_, bytes());
    ledger_->release(category_, bytes());
    data_ = nullptr;
  }
}

Arena::Arena(Arena&& o) noexcept { *this = std::move(o); }

Arena& Arena::operator=(Arena&& o) noexcept {
  if (this != &o) {
    free_all();
    backend_ = o.backend_;
    ledger_ = o.ledger_;
    category_ = o.category_;
    dtype_ = o.dtype_;
    numel_ = o.numel_;
    data_ = std::exchange(o.data_, nullptr);
  }
  return *this;
}

void Arena::zero() {
  if (data_) backend_->zero(data_, bytes());
}

}  // namespace trident
