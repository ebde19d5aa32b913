#include "parallel/zero/zero_storage.hpp"

#include <algorithm>
#include <stdexcept>

#include "optim/grad_view.hpp"

namespace trident {

ZeroStorage::ZeroStorage(int stage, const TensorTable& table, const ZeroPlan& plan,
                         ComputeBackend& backend, MemoryLedger& ledger, Communicator& data,
                         DType weights, DType grads, const OffloadSection& offload, int rank)
    : stage_(stage), weights_(weights), grads_(grads), table_(table), plan_(plan), backend_(backend),
      ledger_(ledger), comm_(data, plan) {
  large_slot_ = large_slot_elements(plan);
  small_slot_ = small_slot_elements(plan);
  if (stage <= 2) p_full_ = Arena(backend, ledger, MemCategory::parameters, table.size(), weights);
  const bool offloaded = stage == 3 && offload.params != OffloadTarget::none;
  if (stage == 3)
    p_shard_ = Arena(backend, ledger, MemCategory::parameters,
                     resident_param_elements(plan, offloaded), weights);
  if (offloaded) {
    for (std::size_t u = 0, at = 0; u < plan.units().size(); ++u) {
      resident_at_.push_back(at);
      if (plan.units()[u].persistent) at += plan.slice(plan.units()[u]);
    }
    const auto [large, small] = staging_slices(plan);
    home_ = std::make_unique<ParamHome>(offload, backend, ledger, plan.shard_size(), weights, large,
                                        small, rank);
  }
  if (stage == 1) g_full_ = Arena(backend, ledger, MemCategory::gradients, table.size(), grads);
  if (stage == 1 && grads != DType::f32)
    grad_working_ = WorkingCopies(backend, ledger, table, windows_table_grads(table, stage, grads));
  if (windows_table_grads(table, stage, grads)) grad_table_unit_ = table.at("wte").unit;
  if (!grads_in_place())
    g_shard_ = Arena(backend, ledger, MemCategory::gradients, plan.shard_size(), grads);
  if (const std::size_t n = accumulate_chunk_elements(plan, stage, grads))
    accumulate_chunk_ = Arena(backend, ledger, MemCategory::buffers, n);
  // Gather and reduce slots are working buffers: model state is the shards.
  auto fill = [&](std::vector<std::unique_ptr<Slot>>& pool, int n, DType t) {
    for (int i = 0; i < n; ++i) {
      pool.push_back(std::make_unique<Slot>());
      pool.back()->mem =
          Arena(backend, ledger, MemCategory::buffers, i == 0 ? large_slot_ : small_slot_, t);
    }
  };
  // Stage 3 gathers units in the weights' type (with 16-bit weights a
  // gathered unit is then unpacked into a working copy).
  if (stage == 3) fill(p_slots_, param_slots(table, plan, weights), weights);
  if (weights != DType::f32)
    working_ = WorkingCopies(backend, ledger, table, windows_table(table, stage, weights));
  if (windows_table(table, stage, weights)) table_unit_ = table.at("wte").unit;
  if (stage >= 2) {
    fill(g_slots_, kGradSlots, DType::f32);
    if (grads != DType::f32)
      for (auto& s : g_slots_)
        s->bits = Arena(backend, ledger, MemCategory::buffers, s->mem.numel(), grads);
  }
  // Summed slices land here (a reduce-scatter may not write into its own input).
  for (int i = 0; i < recv_buffers(plan.dp()); ++i)
      recv_buffers_.emplace_back(backend, ledger, MemCategory::buffers, large_slot_ / plan.dp(),
                                 grads);
}

std::size_t ZeroStorage::large_slot_elements(const ZeroPlan& plan) {
  std::size_t n = 0;
  for (const auto& u : plan.units()) n = std::max(n, u.size());
  return n;
}

std::size_t ZeroStorage::resident_param_elements(const ZeroPlan& plan, bool offloaded) {
  if (!offloaded) return plan.shard_size();
  std::size_t n = 0;
  for (const auto& u : plan.units()) n += u.persistent ? plan.slice(u) : 0;
  return n;
}

std::pair<std::size_t, std::size_t> ZeroStorage::staging_slices(const ZeroPlan& plan) {
  std::size_t large = 0, small = 0;
  for (const auto& u : plan.units()) {
    if (u.persistent) continue;
    large = std::max(large, plan.slice(u));
    if (!u.embedding_table) small = std::max(small, plan.slice(u));
  }
  return {large, small};
}

std::size_t ZeroStorage::accumulate_chunk_elements(const ZeroPlan& plan, int stage, DType grads) {
  if (stage < 2 || grads == DType::f32) return 0;
  return std::min(GradView::kChunk, plan.shard_size());
}

int ZeroStorage::param_slots(const TensorTable& table, const ZeroPlan& plan, DType weights) {
  // 16-bit weights hold unpacked working copies instead, and free the slot.
  const TensorInfo* lnf = table.find("lnf.w");
  if (!lnf || weights != DType::f32) return kParamSlots;
  // The head's table: the untied lm_head, or the tied embedding.
  const TensorInfo* head = table.find("lm_head.w");
  if (!head) head = &table.at("wte");
  const bool pinned = !plan.units()[lnf->unit].persistent && !plan.units()[head->unit].persistent;
  return kParamSlots + (pinned ? 1 : 0);
}

std::size_t ZeroStorage::small_slot_elements(const ZeroPlan& plan) {
  std::size_t n = 0;
  for (const auto& u : plan.units())
    if (!u.embedding_table) n = std::max(n, u.size());
  return n;
}

ZeroStorage::Slot* ZeroStorage::find(std::vector<std::unique_ptr<Slot>>& pool, int unit) {
  for (auto& s : pool)
    if (s->unit == unit) return s.get();
  return nullptr;
}

ZeroStorage::Slot* ZeroStorage::acquire(std::vector<std::unique_ptr<Slot>>& pool, int unit,
                                        bool may_fail) {
  const std::size_t need = plan_.units()[unit].size();
  for (;;) {
    Slot* best = nullptr;  // the smallest free slot that fits
    for (auto& s : pool)
      if (s->unit == -1 && s->mem.numel() >= need && (!best || s->mem.numel() < best->mem.numel()))
        best = s.get();
    // A unit that fits a small gradient slot waits for one rather than take
    // the large one (the table's) while reductions are still freeing slots.
    const bool wait_for_small = best && &pool == &g_slots_ && best->mem.numel() > small_slot_ &&
                                need <= small_slot_ && !reductions_.empty();
    if (best && !wait_for_small) {
      best->unit = unit;
      best->users = 0;
      return best;
    }
    if (may_fail) return nullptr;
    // Gradient slots come back when their reduction completes.
    if (&pool == &g_slots_ && !reductions_.empty()) {
      complete_oldest_reduction();
      continue;
    }
    throw std::logic_error("ZeRO: no free slot (the model holds more units than planned)");
  }
}

float* ZeroStorage::param_at(const TensorInfo& t, std::size_t element) {
  const std::size_t off = t.offset + element;
  const int u = plan_.unit_of_offset(off);
  const ZeroUnit& U = plan_.units()[u];
  const std::size_t i = U.range.packed_index(off);  // where the unit's copies hold it
  if (sixteen()) {
    if (u == table_unit_)
      throw std::logic_error("ZeRO: parameters of " + t.name + " are read through param_rows");
    float* w = working_.find(u);
    if (!w) throw std::logic_error("ZeRO: parameters of " + t.name + " used before need_params");
    if (working_.skipped(u, U.range.packed_index(t.offset)))
      throw std::logic_error("ZeRO: parameters of " + t.name + " are read as bf16 bits");
    return w + i;
  }
  if (stage_ <= 2) return p_full_.f32() + off;
  if (U.persistent) return reinterpret_cast<float*>(resident_slice(u)) + i;
  Slot* s = find(p_slots_, u);
  if (!s || s->users == 0) throw std::logic_error("ZeRO-3: parameters of " + t.name + " not gathered");
  return s->mem.f32() + i;
}

const std::uint16_t* ZeroStorage::param_bf16(const TensorInfo& t) {
  if (weights_ != DType::bf16 || stage_ > 2 || t.unit == table_unit_) return nullptr;
  return reinterpret_cast<const std::uint16_t*>(param_bytes(p_full_, t.offset));
}

const std::uint16_t* ZeroStorage::table_bf16(const TensorInfo& t) {
  if (weights_ != DType::bf16 || stage_ > 2 || t.unit != table_unit_ || grad_table_unit_ >= 0)
    return nullptr;
  return reinterpret_cast<const std::uint16_t*>(param_bytes(p_full_, t.offset));
}

void ZeroStorage::read_as_bits(const TensorInfo& t) {
  const int u = plan_.unit_of_offset(t.offset);
  if (param_bf16(t)) working_.skip(u, plan_.units()[u].range.packed_index(t.offset), t.numel);
}

const float* ZeroStorage::param_rows(const TensorInfo& t, std::size_t element, std::size_t n) {
  if (t.unit != table_unit_) return param_at(t, element);
  return working_.window(param_bytes(p_full_, t.offset + element), weights_, n);
}

void ZeroStorage::start_gather(int u, bool prefetch) {
  const ZeroUnit& U = plan_.units()[u];
  Slot* s = acquire(p_slots_, u, prefetch);
  if (!s) return;  // no free slot: this prefetch is skipped, the use will gather
  const void* slice = home_ ? offloaded_slice(u, prefetch) : param_bytes(p_shard_, U.shard_offset);
  if (!slice) {  // no free staging buffer: as without a slot
    s->unit = -1;
    return;
  }
  s->staged = home_ && !home_->in_place();
  s->pending = comm_.gather_unit(U, slice, s->mem.data(), weights_);
}

void ZeroStorage::finish_gather(Slot& s) {
  comm_.wait(s.pending);
  if (!s.staged) return;
  home_->release(s.unit);
  s.staged = false;
}

// Unit u's slice, staged from the home (null: no free staging buffer, with may_fail).
const void* ZeroStorage::offloaded_slice(int u, bool may_fail) {
  const ZeroUnit& U = plan_.units()[u];
  if (char* p = home_->in_place()) return p + U.shard_offset * dtype_size(weights_);
  if (!home_->stage(u, U.shard_offset, plan_.slice(U), true)) {
    if (may_fail) return nullptr;
    for (auto& s : p_slots_)  // staging held by gathers in flight comes back as they finish
      if (s->staged) finish_gather(*s);
    home_->stage(u, U.shard_offset, plan_.slice(U), false);
  }
  return home_->staged(u);
}

void ZeroStorage::need_params(int u, Pass pass) {
  if (sixteen()) {
    need_working_copy(u);
  } else {
    if (stage_ <= 2 || plan_.units()[u].persistent) return;
    Slot* s = find(p_slots_, u);
    if (!s) {
      start_gather(u, false);
      s = find(p_slots_, u);
    }
    finish_gather(*s);
    s->users++;
  }
  prefetch_after(u, pass);
}

void ZeroStorage::need_working_copy(int u) {
  const ZeroUnit& U = plan_.units()[u];
  if (u == table_unit_) return;  // read block by block (param_rows)
  if (working_.find(u)) {  // held already: one more user
    working_.acquire(u, nullptr, weights_, U.size());
    return;
  }
  if (stage_ <= 2 && U.cut()) {  // the table's pieces, packed as the unit's copies are
    working_.acquire_filled(u, U.size(), [&](float* copy) {
      plan_.for_each_piece(U, [&](std::size_t arena, std::size_t packed, std::size_t n) {
        backend_.convert(copy + packed, DType::f32, param_bytes(p_full_, arena), weights_, n);
      });
    });
    return;
  }
  if (stage_ <= 2 || U.persistent) {
    working_.acquire(u, stage_ <= 2 ? param_bytes(p_full_, U.begin()) : resident_slice(u), weights_,
                     U.size());
    return;
  }
  Slot* s = find(p_slots_, u);
  if (!s) {
    start_gather(u, false);
    s = find(p_slots_, u);
  }
  finish_gather(*s);
  working_.acquire(u, s->mem.data(), weights_, U.size());
  s->unit = -1;  // unpacked: the gather slot is free for the next unit
  s->users = 0;
}

int ZeroStorage::next_in_pass(int u, Pass pass) const {
  // The next block of this pass (only from blocks: the embeddings are also
  // gathered for the tied head, where a prefetch of block 0 would sit unused
  // until the next step). A cut table's units are used in order in every pass.
  const auto& units = plan_.units();
  const bool table = units[u].embedding_table;
  const int next = pass == Pass::forward || table ? u + 1 : u - 1;
  const bool follows = table ? next < int(units.size()) && units[next].embedding_table
                             : units[u].block && next >= 0 && next < int(units.size()) &&
                                   units[next].block;
  return follows && !units[next].persistent ? next : -1;
}

void ZeroStorage::prefetch_after(int u, Pass pass) {
  if (stage_ <= 2) return;
  // While a unit computes, the next one is gathered.
  const int next = next_in_pass(u, pass);
  if (next < 0) return;
  bool gathering = find(p_slots_, next) || (sixteen() && working_.find(next));
  if (!gathering) {
    start_gather(next, true);
    gathering = find(p_slots_, next);
  }
  // Offloaded: the read of the one after starts now, so the disk overlaps
  // this unit's compute and the next one's.
  const int ahead = gathering ? next_in_pass(next, pass) : next;
  if (home_ && !home_->in_place() && ahead >= 0 && !find(p_slots_, ahead)) {
    const ZeroUnit& A = plan_.units()[ahead];
    home_->stage(ahead, A.shard_offset, plan_.slice(A), true);
  }
}

void ZeroStorage::done_params(int u) {
  if (sixteen()) return u == table_unit_ ? void() : working_.release(u);
  if (stage_ <= 2 || plan_.units()[u].persistent) return;
  Slot* s = find(p_slots_, u);
  if (!s || --s->users > 0) return;
  finish_gather(*s);
  s->unit = -1;
  s->users = 0;
}

}  // namespace trident
