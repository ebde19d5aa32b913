#include "optim/step_snapshot.hpp"

namespace trident {

StepSnapshot::StepSnapshot(ComputeBackend& backend, MemoryLedger& ledger,
                           const std::vector<Arena*>& sources)
    : backend_(&backend) {
  for (Arena* a : sources) {
    if (!a || a->numel() == 0) continue;
    sources_.push_back(a);
    copies_.emplace_back(backend, ledger, MemCategory::optimizer, a->numel(), a->dtype());
  }
}

void StepSnapshot::save(std::int64_t steps_taken) {
  save_part(steps_taken, SIZE_MAX);
}

bool StepSnapshot::save_part(std::int64_t steps_taken, std::size_t bytes) {
  while (next_source_ < sources_.size() && bytes > 0) {
    const Arena& src = *sources_[next_source_];
    const std::size_t n = std::min(bytes, src.bytes() - next_byte_);
    backend_->copy(static_cast<char*>(copies_[next_source_].data()) + next_byte_,
                   static_cast<const char*>(src.data()) + next_byte_, n);
    bytes -= n;
    next_byte_ += n;
    if (next_byte_ == src.bytes()) ++next_source_, next_byte_ = 0;
  }
  steps_taken_ = steps_taken;
  if (next_source_ < sources_.size()) return false;
  next_source_ = 0;  // whole: the next save starts over
  return true;
}

std::int64_t StepSnapshot::restore() {
  for (std::size_t i = 0; i < sources_.size(); ++i)
    backend_->copy(sources_[i]->data(), copies_[i].data(), sources_[i]->bytes());
  return steps_taken_;
}

std::size_t StepSnapshot::bytes() const {
  std::size_t n = 0;
  for (const Arena& a : copies_) n += a.bytes();
  return n;
}

}  // namespace trident
