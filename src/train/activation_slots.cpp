#include "train/activation_slots.hpp"

#include <algorithm>
#include <stdexcept>

namespace trident {

ActivationSlots::ActivationSlots(const GptModel& model, ComputeBackend& backend,
                                 MemoryLedger& ledger, int slots, int weight_buffers,
                                 int micro_batches) {
  for (int k = 0; k < slots; ++k) slots_.emplace_back(model, backend, ledger);
  const std::size_t w = model.micro_batch_sizes().weight_inputs;
  for (int k = 0; w > 0 && k < weight_buffers; ++k)
    weight_buffers_.emplace_back(backend, ledger, MemCategory::activations, w);
  sends_.resize(std::size_t(slots));
  busy_.assign(std::size_t(slots), false);
  slot_of_.assign(std::size_t(std::max(micro_batches, 1)), -1);
  buffer_busy_.assign(std::size_t(weight_buffers), false);
  buffer_of_.assign(std::size_t(std::max(micro_batches, 1)), -1);
}

MicroBatchActs ActivationSlots::acts(int slot, int weight_buffer) {
  MicroBatchActs a = slots_.at(std::size_t(slot)).acts();
  if (weight_buffer >= 0 && !weight_buffers_.empty())
    a.weight_inputs = weight_buffers_.at(std::size_t(weight_buffer)).f32();
  return a;
}

int ActivationSlots::acquire(int mb, int assigned, PipelineComm& pcomm) {
  int pick = assigned;
  if (pick >= 0 && busy_[std::size_t(pick)])
    throw std::logic_error("pipeline: the list assigns a slot still in use");
  for (std::size_t s = 0; pick < 0 && s < busy_.size(); ++s) {
    if (busy_[s]) continue;
    bool sent = true;
    for (Request& r : sends_[s]) sent = pcomm.test(r) && sent;
    if (sent) pick = int(s);
  }
  for (std::size_t s = 0; pick < 0 && s < busy_.size(); ++s)
    if (!busy_[s]) pick = int(s);
  if (pick < 0) throw std::logic_error("pipeline: more micro-batches in flight than activation slots");
  wait_sends(pick, pcomm);
  busy_[std::size_t(pick)] = true;
  slot_of_[std::size_t(mb)] = pick;
  return pick;
}

int ActivationSlots::acquire_weight_buffer(int mb) {
  for (std::size_t b = 0; b < buffer_busy_.size(); ++b) {
    if (buffer_busy_[b]) continue;
    buffer_busy_[b] = true;
    buffer_of_[std::size_t(mb)] = int(b);
    return int(b);
  }
  throw std::logic_error("pipeline: more pending weight passes than W buffers");
}

void ActivationSlots::release(int mb) {
  busy_[std::size_t(slot_of_[std::size_t(mb)])] = false;
  slot_of_[std::size_t(mb)] = -1;
  if (buffer_of_[std::size_t(mb)] >= 0) buffer_busy_[std::size_t(buffer_of_[std::size_t(mb)])] = false;
  buffer_of_[std::size_t(mb)] = -1;
}

void ActivationSlots::wait_sends(int slot, PipelineComm& pcomm) {
  for (Request& r : sends_[std::size_t(slot)]) pcomm.wait(r);
  sends_[std::size_t(slot)].clear();
}

void ActivationSlots::wait_all_sends(PipelineComm& pcomm) {
  for (int s = 0; s < size(); ++s) wait_sends(s, pcomm);
}

}  // namespace trident
