// A pipeline runner's activation storage for one model chunk: a slot per
// micro-batch in flight between its forward and its last backward pass, the
// W buffers of the zero-bubble schedules (one per micro-batch between its B
// and its W: a B fused with its W needs none), which micro-batch holds which,
// and the forward sends still reading each slot. The model only sees the
// MicroBatchActs a slot hands it.
#pragma once
#include <utility>
#include <vector>

#include "model/gpt.hpp"
#include "model/micro_batch.hpp"
#include "parallel/pipeline/pipeline_comm.hpp"

namespace trident {

class ActivationSlots {
 public:
  ActivationSlots() = default;
  ActivationSlots(const GptModel& model, ComputeBackend& backend, MemoryLedger& ledger,
                  int slots, int weight_buffers, int micro_batches);

  int size() const { return int(slots_.size()); }
  int weight_buffer_count() const { return int(buffer_busy_.size()); }  // arenas only where needed
  // Slot `slot`'s storage, with W buffer `weight_buffer` (-1: none).
  MicroBatchActs acts(int slot, int weight_buffer = -1);
  // The storage micro-batch `mb` holds now (its slot and W buffer).
  MicroBatchActs acts_of(int mb) { return acts(slot_of(mb), buffer_of_[std::size_t(mb)]); }
  int slot_of(int mb) const { return slot_of_[std::size_t(mb)]; }

  // The slot the list assigned (>= 0), else a free slot whose sends are done,
  // else the first free one, once its sends are done (the neighbour's receive
  // is scheduled; once this rank has run the slot's B, it has been received).
  int acquire(int mb, int assigned, PipelineComm& pcomm);
  int acquire_weight_buffer(int mb);
  void release(int mb);  // its slot and W buffer

  // Forward sends still reading a slot (its output, until the next stage takes it).
  void add_send(int slot, Request r) { sends_[std::size_t(slot)].push_back(std::move(r)); }
  void wait_sends(int slot, PipelineComm& pcomm);
  void wait_all_sends(PipelineComm& pcomm);

 private:
  std::vector<MicroBatchStorage> slots_;
  std::vector<Arena> weight_buffers_;
  std::vector<int> slot_of_;                 // micro-batch -> slot, -1 none
  std::vector<std::vector<Request>> sends_;  // per slot
  std::vector<bool> busy_;                   // per slot
  std::vector<int> buffer_of_;               // micro-batch -> W buffer, -1 none
  std::vector<bool> buffer_busy_;            // per W buffer
};

}  // namespace trident
