// ZeroStorage's parameters outside the passes: the optimizer's updates of the
// owned slices, stages 1-2's publication, initial values, checkpoints and
// gathers for tests. Offloaded slices (offload.params) are reached through
// the ParamHome; persistent ones stay in the arenas.
#include <algorithm>
#include <stdexcept>

#include "parallel/zero/zero_storage.hpp"

namespace trident {

void* ZeroStorage::owned_params(int u) {
  const ZeroUnit& U = plan_.units()[u];
  if (stage_ <= 2) return param_bytes(p_full_, plan_.slice_begin(U));
  if (!home_ || U.persistent) return resident_slice(u);
  if (char* p = home_->in_place()) return p + U.shard_offset * dtype_size(weights_);
  throw std::logic_error("ZeRO-3: an offloaded slice has no address; use update_owned_params");
}

void ZeroStorage::update_owned_params(std::size_t first, std::size_t count,
                                      const OwnedParamsFn& f) {
  if (!home_) return f(first, count, nullptr);
  home_->update(first, count, f);
}

void* ZeroStorage::owned_param_at(int u, std::size_t offset, std::size_t block_first, void* block) {
  const ZeroUnit& U = plan_.units()[u];
  if (!block || U.persistent) return static_cast<char*>(owned_params(u)) + offset * dtype_size(weights_);
  return static_cast<char*>(block) + (U.shard_offset + offset - block_first) * dtype_size(weights_);
}

char* ZeroStorage::open_params_window() {
  if (!home_ || home_->in_place()) return nullptr;
  window_ = Arena(backend_, window_ledger_, MemCategory::buffers, plan_.shard_size(), weights_);
  home_->load(0, plan_.shard_size(), window_.data());
  for (std::size_t u = 0; u < plan_.units().size(); ++u) {
    const ZeroUnit& U = plan_.units()[u];
    if (U.persistent)
      backend_.copy(param_bytes(window_, U.shard_offset), resident_slice(int(u)),
                    plan_.slice(U) * dtype_size(weights_));
  }
  return static_cast<char*>(window_.data());
}

void ZeroStorage::close_params_window(bool changed) {
  if (!window_.numel()) return;
  if (changed) {
    home_->store(0, plan_.shard_size(), window_.data());
    for (std::size_t u = 0; u < plan_.units().size(); ++u) {
      const ZeroUnit& U = plan_.units()[u];
      if (U.persistent)
        backend_.copy(resident_slice(int(u)), param_bytes(window_, U.shard_offset),
                      plan_.slice(U) * dtype_size(weights_));
    }
  }
  window_ = Arena();
}

void ZeroStorage::read_params_beside_passes(std::size_t first, std::size_t count, void* out) {
  const std::size_t w = dtype_size(weights_);
  for (std::size_t u = 0; u < plan_.units().size(); ++u) {
    const ZeroUnit& U = plan_.units()[u];
    const std::size_t lo = std::max(first, U.shard_offset);
    const std::size_t hi = std::min(first + count, U.shard_offset + plan_.slice(U));
    if (lo >= hi) continue;
    char* to = static_cast<char*>(out) + (lo - first) * w;
    if (U.persistent)
      backend_.copy_to_host_in_background(to, resident_slice(int(u)) + (lo - U.shard_offset) * w,
                                          (hi - lo) * w);
    else
      home_->read_beside_gathers(lo, hi - lo, to);
  }
}

void ZeroStorage::publish_params() {
  if (stage_ > 2) return;  // stage 3 gathers on use
  std::vector<Request> reqs;
  const auto& units = plan_.units();
  for (std::size_t i = 0; i < units.size(); ++i) {
    const ZeroUnit& U = units[i];
    if (U.persistent) continue;
    if (!U.cut()) {
      reqs.push_back(comm_.gather_unit(U, param_bytes(p_full_, plan_.slice_begin(U)),
                                       param_bytes(p_full_, U.begin()), weights_));
      continue;
    }
    // A cut table: each rank's pieces of all its units lie side by side (one
    // stride), so the whole table is one all-gather of strides in rank order.
    const std::size_t table_units = U.range.stride / U.range.piece;
    std::size_t k = i + 1;
    while (k < units.size() && k - i < table_units && units[k].cut()) ++k;
    reqs.push_back(comm_.group().iall_gather(param_bytes(p_full_, plan_.slice_begin(U)),
                                             param_bytes(p_full_, U.begin()), U.range.stride,
                                             weights_));
    i = k - 1;
  }
  for (auto& r : reqs) comm_.wait(r);
}

void ZeroStorage::set_params_from_host(std::size_t first, const float* in, std::size_t n) {
  if (stage_ <= 2) {
    copy_from_host_as(backend_, param_bytes(p_full_, first), weights_, in, n);
    return;
  }
  for (std::size_t u = 0; u < plan_.units().size(); ++u) {  // a slice is one range of the table
    const ZeroUnit& U = plan_.units()[u];
    const std::size_t lo = std::max(first, plan_.slice_begin(U));
    const std::size_t hi = std::min(first + n, plan_.slice_begin(U) + plan_.slice(U));
    if (lo >= hi) continue;
    const std::size_t at = lo - plan_.slice_begin(U);  // in the slice
    if (!home_ || U.persistent || home_->in_place()) {
      copy_from_host_as(backend_, static_cast<char*>(owned_params(int(u))) + at * dtype_size(weights_),
                        weights_, in + (lo - first), hi - lo);
      continue;
    }
    Arena values(backend_, window_ledger_, MemCategory::buffers, hi - lo, weights_);
    copy_from_host_as(backend_, values.data(), weights_, in + (lo - first), hi - lo);
    home_->store(U.shard_offset + at, hi - lo, values.data());
  }
}

void ZeroStorage::gather_params_to_host(std::vector<float>& out) {
  out.assign(table_.size(), 0.0f);
  if (stage_ <= 2) {
    copy_to_host_as_f32(backend_, out.data(), p_full_.data(), weights_, p_full_.numel());
    return;
  }
  Arena tmp(backend_, ledger_, MemCategory::buffers, large_slot_, weights_);
  for (std::size_t u = 0; u < plan_.units().size(); ++u) {
    const ZeroUnit& U = plan_.units()[u];
    const void* src = U.persistent ? resident_slice(int(u))
                      : home_      ? offloaded_slice(int(u), false)
                                   : param_bytes(p_shard_, U.shard_offset);
    if (!U.persistent) {
      Request r = comm_.gather_unit(U, src, tmp.data(), weights_);
      comm_.wait(r);
      if (home_) home_->release(int(u));
      src = tmp.data();
    }
    plan_.for_each_piece(U, [&](std::size_t arena, std::size_t packed, std::size_t n) {
      copy_to_host_as_f32(backend_, out.data() + arena,
                          static_cast<const char*>(src) + packed * dtype_size(weights_), weights_, n);
    });
  }
}

}  // namespace trident
