// ZeroStorage's gradients during the passes: the units' gradient slots (all
// of a 16-bit stage 1 unit's as f32 while it accumulates), their reductions
// onto the owners, each in flight until a receive buffer or slot is needed
// again, and the owners' accumulation over micro-batches.
#include <algorithm>
#include <stdexcept>

#include "parallel/zero/zero_storage.hpp"

namespace trident {

float* ZeroStorage::grad_at(const TensorInfo& t, std::size_t element) {
  const std::size_t off = t.offset + element;
  const int u = plan_.unit_of_offset(off);
  const std::size_t i = plan_.units()[u].range.packed_index(off);
  if (stage_ == 1 && sixteen_grads()) {
    if (u == grad_table_unit_)
      throw std::logic_error("ZeRO: gradients of " + t.name + " are reached through grad_rows");
    float* g = grad_working_.find(u);
    if (!g) throw std::logic_error("ZeRO: gradients of " + t.name + " used before need_grads");
    return g + i;
  }
  if (stage_ == 1) return g_full_.f32() + off;
  Slot* s = find(g_slots_, u);
  if (!s) throw std::logic_error("ZeRO: gradients of " + t.name + " have no slot");
  return s->mem.f32() + i;
}

float* ZeroStorage::grad_rows(const TensorInfo& t, std::size_t element, std::size_t n) {
  if (t.unit != grad_table_unit_) return grad_at(t, element);
  return grad_working_.window(grad_bytes(g_full_, t.offset + element), grads_, n);
}

void ZeroStorage::done_grad_rows(const TensorInfo& t, std::size_t element, std::size_t n) {
  if (t.unit == grad_table_unit_)
    grad_working_.window_back(grad_bytes(g_full_, t.offset + element), grads_, n);
}

void ZeroStorage::need_grads(int u) {
  if (stage_ == 1) {  // 16-bit: the unit's accumulated gradients as f32, until done_grads
    if (sixteen_grads() && u != grad_table_unit_ && !grad_working_.find(u))
      grad_working_.acquire(u, grad_bytes(g_full_, plan_.units()[u].begin()), grads_,
                            plan_.units()[u].size());
    return;
  }
  if (find(g_slots_, u)) return;
  Slot* s = acquire(g_slots_, u);
  backend_.zero(s->mem.data(), plan_.units()[u].size() * sizeof(float));
}

void ZeroStorage::done_grads(int u, bool last) {
  const ZeroUnit& U = plan_.units()[u];
  if (stage_ == 1) {
    if (sixteen_grads() && u != grad_table_unit_)
      grad_working_.write_back_and_release(u, grad_bytes(g_full_, U.begin()), grads_, U.size());
    if (!last) return;  // stage 1 accumulates in full gradients: one reduction per step
    void* full = grad_bytes(g_full_, U.begin());
    void* recv = U.persistent ? nullptr : recv_buffer(full);
    Reduction r{u, nullptr, recv, {}, true};
    r.req = comm_.reduce_unit(U, full, r.recv, grads_);
    reductions_.push_back(std::move(r));
    complete_finished_reductions();
    return;
  }
  Slot* s = find(g_slots_, u);
  s->unit = -2 - u;  // reducing: invisible to find(), recycled on completion
  void* full = sixteen_grads() ? s->bits.data() : s->mem.data();
  void* recv = U.persistent ? nullptr : recv_buffer(full);
  Reduction r{u, s, recv, {}, last};
  if (sixteen_grads()) backend_.convert(s->bits.data(), grads_, s->mem.data(), DType::f32, U.size());
  r.req = comm_.reduce_unit(U, full, recv, grads_);
  reductions_.push_back(std::move(r));
  complete_finished_reductions();
}

// The oldest reductions that are done are summed in now (in order, as ever):
// their slots and buffers come free, and final slices leave for a host copy
// while backward goes on. Testing the oldest also drives its progress.
void ZeroStorage::complete_finished_reductions() {
  while (!reductions_.empty() && comm_.test(reductions_.front().req)) complete_oldest_reduction();
}

void* ZeroStorage::recv_buffer(void* full) {
  if (plan_.dp() == 1) return full;  // one rank: the sum is the input (ZeroComm skips it)
  return free_recv_buffer();
}

void* ZeroStorage::free_recv_buffer() {
  for (;;) {
    for (auto& a : recv_buffers_) {
      bool used = false;
      for (const auto& r : reductions_) used = used || r.recv == a.data();
      if (!used) return a.data();
    }
    complete_oldest_reduction();  // frees the oldest reduction's buffer
  }
}

void ZeroStorage::complete_oldest_reduction() {
  Reduction r = std::move(reductions_.front());
  reductions_.pop_front();
  comm_.wait(r.req);
  sum_into_owned(r);
  if (r.last && final_grads_) final_grads_(r.unit);
}

void ZeroStorage::sum_into_owned(const Reduction& r) {
  const ZeroUnit& U = plan_.units()[r.unit];
  void* owned = owned_grads(r.unit);
  const std::size_t n = plan_.slice(U);
  if (stage_ == 1) {  // one reduction per step: the sum is the owned slice
    const void* summed = U.persistent ? grad_bytes(g_full_, U.begin()) : r.recv;
    if (summed != owned) backend_.copy(owned, summed, n * dtype_size(grads_));
    return;
  }
  // 16-bit: the sum is widened into the slot's f32 memory (idle since the
  // reduction took its 16-bit copy) before it is accumulated.
  const float* summed = U.persistent ? r.slot->mem.f32() : static_cast<const float*>(r.recv);
  if (sixteen_grads()) {
    backend_.convert(r.slot->mem.data(), DType::f32, U.persistent ? r.slot->bits.data() : r.recv,
                     grads_, n);
    accumulate(owned, r.slot->mem.f32(), n);
  } else {
    backend_.add(static_cast<float*>(owned), static_cast<float*>(owned), summed, n);
  }
  r.slot->unit = -1;
}

void ZeroStorage::accumulate(void* owned, const float* summed, std::size_t n) {
  // Over micro-batches: each sum is added in f32 and the slice rounded once.
  float* acc = accumulate_chunk_.f32();
  for (std::size_t off = 0; off < n; off += accumulate_chunk_.numel()) {
    const std::size_t k = std::min(accumulate_chunk_.numel(), n - off);
    char* slice = static_cast<char*>(owned) + off * dtype_size(grads_);
    backend_.convert(acc, DType::f32, slice, grads_, k);
    backend_.add(acc, acc, summed + off, k);
    backend_.convert(slice, grads_, acc, DType::f32, k);
  }
}


void ZeroStorage::begin_step() {
  if (stage_ == 1) g_full_.zero();
  if (!grads_in_place()) g_shard_.zero();
}

void ZeroStorage::finish_backward() {
  while (!reductions_.empty()) complete_oldest_reduction();
}

}  // namespace trident
