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
  for (std::size_t i = 0; i < sources_.size(); ++i)
    backend_->copy(copies_[i].data(), sources_[i]->data(), sources_[i]->bytes());
  steps_taken_ = steps_taken;
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
