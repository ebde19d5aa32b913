#include "engine/zero_engine.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>

#include "comm/agree.hpp"
#include "core/error.hpp"
#include "model/gpt_params.hpp"

namespace trident {

ZeroEngine::ZeroEngine(const EngineSetup& s, const UnitLayout& units, AdamWConfig adam)
    : backend_(s.backend),
      ledger_(s.ledger),
      world_(s.grid.world()),
      offload_(s.sections.offload),
      adam_(adam),
      tp_root_(s.grid.coord().tp == 0),
      table_(build_gpt_param_table(
          s.sections.model,
          TensorParallelLayout{s.grid.shape().tp, s.grid.coord().tp,
                               s.sections.parallel.sequence_parallel},
          units, s.stage)),
      plan_(table_, s.grid.shape().replicas(), s.grid.coord().replica(s.grid.shape()),
            std::size_t(s.sections.zero.persistence_threshold)) {
  // An offloaded parameter shard's swap file may fail on some nodes only: agreed.
  run_agreed(world_, [&] {
    storage_ = std::make_unique<ZeroStorage>(s.sections.zero.stage, table_, plan_, s.backend,
                                             s.ledger, s.grid.data_context(), s.weights, s.grads,
                                             offload_, world_.rank());
  });
}

void ZeroEngine::attach(GptModel& model, std::uint64_t seed) {
  model_table_ = &model.param_table();
  // A swap file may fail on some nodes only (no room, read-only): agreed, exit 2 everywhere.
  run_agreed(world_, [&] {
    optimizer_ = std::make_unique<ZeroOptimizer>(*storage_, model.param_table(), backend_, ledger_,
                                                 adam_, offload_, world_.rank());
  });
  if (adam_.weights != DType::f32)
    model.for_initial_parameters(seed, [&](std::size_t first, const float* v, std::size_t n) {
      optimizer_->init_masters(first, v, n);
    });
}

GradSpan ZeroEngine::tied_grads() {
  const TensorInfo& wte = model_table_->at("wte");
  const ZeroUnit& u = plan_.units()[wte.unit];
  // The caller adds the other copy's gradients to these.
  for (int k = 0; k < wte.units; ++k) optimizer_->grads_changed(wte.unit + k);
  // A cut table's units are adjacent, so are this rank's slices of them.
  return {storage_->owned_grads(wte.unit), plan_.slice(u) * wte.units, storage_->grads_dtype()};
}

double ZeroEngine::grad_sum_squares() { return optimizer_->grad_sum_squares(tp_root_); }

bool ZeroEngine::grads_nonfinite() { return optimizer_->grads_nonfinite(); }

void ZeroEngine::step(float lr, float grad_scale) { optimizer_->step(lr, grad_scale); }

void ZeroEngine::freeze(const TensorInfo&) {
  throw std::logic_error("ZeRO does not freeze tensors (the deck refuses pipedream with ZeRO)");
}

TensorSlice ZeroEngine::state_slice(StateKind kind, const TensorInfo& t, const GridCoord& c) {
  const std::size_t psz = dtype_size(storage_->param_dtype());
  if (kind == StateKind::params && storage_->full_params())
    return whole_shard(t, static_cast<char*>(storage_->full_params()) + t.offset * psz,
                       counts_copy(t, c, true));
  const ZeroUnit& u = plan_.units()[t.unit];
  // A cut table's slices of this rank are one range of the tensor and of the shard.
  const std::size_t lo = plan_.slice_begin(u), hi = lo + plan_.slice(u) * t.units;
  const std::size_t a = std::max(lo, t.offset), b = std::min(hi, t.offset + t.numel);
  if (a >= b) return {};
  // The moments and masters sit in the optimizer's shard layout, as does an
  // offloaded parameter shard's window.
  char* base = nullptr;
  if (kind != StateKind::params) {
    float* state = windows_[home_kind(kind)];
    if (!state) state = optimizer_->home().open(home_kind(kind));  // resident: the arena itself
    base = reinterpret_cast<char*>(state + u.shard_offset);
  } else {
    base = params_window_ ? params_window_ + u.shard_offset * psz
                          : static_cast<char*>(storage_->owned_params(t.unit));
  }
  TensorSlice s;
  s.shard = &t;
  s.lo = a - t.offset;
  s.hi = b - t.offset;
  s.data = base + (a - lo) * (kind == StateKind::params ? psz : sizeof(float));
  s.counted = counts_copy(t, c, u.persistent);
  return s;
}

int ZeroEngine::home_kind(StateKind kind) {
  return kind == StateKind::exp_avg      ? OptimizerHome::exp_avg
         : kind == StateKind::exp_avg_sq ? OptimizerHome::exp_avg_sq
                                         : OptimizerHome::masters;
}

void ZeroEngine::open_state(StateKind kind) {
  if (kind == StateKind::params) {
    params_window_ = storage_->open_params_window();
    return;
  }
  if (kind == StateKind::masters && !optimizer_->has_masters()) return;
  windows_[home_kind(kind)] = optimizer_->home().open(home_kind(kind));
}

ZeroEngine::Reservation::~Reservation() {
  if (at) ::munmap(at, bytes);
}

bool ZeroEngine::open_state_reserved(StateKind kind) {
  if (kind == StateKind::params) {
    if (!storage_->params_offloaded()) return false;
    if (!params_reserved_.at) {
      const std::size_t bytes =
          std::max<std::size_t>(plan_.shard_size(), 1) * dtype_size(storage_->param_dtype());
      void* p = ::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                       -1, 0);
      if (p == MAP_FAILED)
        throw RuntimeFailure("checkpoint: cannot reserve address space for an offloaded "
                             "parameter shard");
      params_reserved_.at = static_cast<char*>(p);
      params_reserved_.bytes = bytes;
    }
    params_window_ = params_reserved_.at;
    return true;
  }
  if (kind == StateKind::masters && !optimizer_->has_masters()) return true;
  windows_[home_kind(kind)] = optimizer_->home().reserved(home_kind(kind));
  return true;
}

bool ZeroEngine::read_state(const void* at, std::size_t bytes, void* out) {
  if (optimizer_->home().read_reserved(at, bytes, out)) return true;
  const char* p = static_cast<const char*>(at);
  if (!params_reserved_.at || p < params_reserved_.at ||
      p >= params_reserved_.at + params_reserved_.bytes)
    return false;
  const std::size_t psz = dtype_size(storage_->param_dtype());
  storage_->read_params_beside_passes(std::size_t(p - params_reserved_.at) / psz, bytes / psz, out);
  return true;
}

void ZeroEngine::close_state(StateKind kind, bool changed) {
  if (kind == StateKind::params) {
    storage_->close_params_window(changed);
    params_window_ = nullptr;
    return;
  }
  if (!windows_[home_kind(kind)]) return;
  optimizer_->home().close(home_kind(kind), changed);
  windows_[home_kind(kind)] = nullptr;
}

bool ZeroEngine::replicated_over_data(StateKind kind) const {
  return kind == StateKind::params && storage_->stage() <= 2;
}

void ZeroEngine::poison_gradient() {
  // inf in the gradients' own type (f32, bf16 or f16)
  const float inf = INFINITY;
  const DType g = storage_->grads_dtype();
  const std::uint16_t inf16 = g == DType::bf16 ? 0x7f80 : 0x7c00;
  backend_.copy_from_host(storage_->owned_grads(0), g == DType::f32 ? (const void*)&inf : &inf16,
                          dtype_size(g));
  optimizer_->grads_changed(0);
}

}  // namespace trident
