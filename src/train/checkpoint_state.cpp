#include "train/checkpoint_state.hpp"

#include <fmt/format.h>

#include <filesystem>

#include "comm/agree.hpp"
#include "core/error.hpp"
#include "core/fault_inject.hpp"
#include "core/timer.hpp"
#include "checkpoint/checkpoint_dir.hpp"
#include "checkpoint/checkpoint_writer.hpp"

namespace trident {

TensorSlice replica_part(const TensorSlice& whole, const GridCoord& c, int dp, std::size_t esz,
                         int cp) {
  const std::size_t parts = std::size_t(dp) * cp, i = std::size_t(c.cp) + std::size_t(cp) * c.dp;
  if (whole.empty() || parts == 1) return whole;
  const std::size_t n = whole.hi - whole.lo;
  TensorSlice part = sub_slice(whole, whole.lo + n * i / parts, whole.lo + n * (i + 1) / parts, esz);
  part.counted = counts_copy(*whole.shard, c, false);
  return part;
}

TensorSet dense_set(std::string group, const TensorTable& table, Arena* arena,
                    const GridCoord& coord, bool replicated_over_data) {
  TensorSet set;
  set.group = std::move(group);
  set.dtype = arena ? arena->dtype() : DType::f32;
  set.replicated_over_data = replicated_over_data;
  set.slice_of = [&table, arena, coord, replicated_over_data](const TensorInfo& global) {
    const TensorInfo* t = table.find(global.name);
    if (!arena || !t) return TensorSlice{};
    auto* data = static_cast<char*>(arena->data()) + t->offset * dtype_size(arena->dtype());
    return whole_shard(*t, data, counts_copy(*t, coord, replicated_over_data));
  };
  return set;
}

namespace {

void set_close_all(Trainer& trainer, StateKind kind) {
  for (ModelChunk& ch : trainer.chunks()) ch.engine->close_state(kind, false);
}

// The engines' slices of one kind of state. The last stage's copy of the tied
// embedding is read, never saved (it is not primary); where it is on the
// same rank as the first stage's (zb-v), it is read as a further slice.
TensorSet chunked_set(std::string group, Trainer& trainer, const GridCoord& coord, StateKind kind) {
  TensorSet set;
  set.group = std::move(group);
  set.dtype = kind == StateKind::params ? trainer.weight_dtype() : DType::f32;
  set.replicated_over_data = trainer.engine().replicated_over_data(kind);
  set.slice_of = [&trainer, coord, kind](const TensorInfo& global) -> TensorSlice {
    for (ModelChunk& ch : trainer.chunks())
      if (const TensorInfo* t = ch.model->param_table().find(global.name))
        return ch.engine->state_slice(kind, *t, coord);
    return {};
  };
  set.more_slices_of = [&trainer, coord, kind](const TensorInfo& global) {
    std::vector<TensorSlice> more;
    bool first = true;
    for (ModelChunk& ch : trainer.chunks())
      if (const TensorInfo* t = ch.model->param_table().find(global.name)) {
        if (!first) more.push_back(ch.engine->state_slice(kind, *t, coord));
        first = false;
      }
    return more;
  };
  set.open = [&trainer, kind] {
    for (ModelChunk& ch : trainer.chunks()) ch.engine->open_state(kind);
  };
  set.close = [&trainer, kind](bool changed) {
    for (ModelChunk& ch : trainer.chunks()) ch.engine->close_state(kind, changed);
  };
  set.open_reserved = [&trainer, kind] {
    bool all = true;
    for (ModelChunk& ch : trainer.chunks()) all = ch.engine->open_state_reserved(kind) && all;
    if (!all) set_close_all(trainer, kind);  // fall back to open_state for every chunk
    return all;
  };
  set.read_reserved = [&trainer](const void* at, std::size_t bytes, void* out) {
    for (ModelChunk& ch : trainer.chunks())
      if (ch.engine->read_state(at, bytes, out)) return;
    throw RuntimeFailure("checkpoint: a piece of offloaded state belongs to no engine");
  };
  return set;
}

}  // namespace

std::vector<TensorSet> training_sets(Trainer& trainer, const GridCoord& coord) {
  std::vector<TensorSet> sets = {chunked_set(kParamsGroup, trainer, coord, StateKind::params),
                                 chunked_set(kExpAvgGroup, trainer, coord, StateKind::exp_avg),
                                 chunked_set(kExpAvgSqGroup, trainer, coord, StateKind::exp_avg_sq)};
  if (trainer.weight_dtype() != DType::f32)
    sets.push_back(chunked_set(kMasterGroup, trainer, coord, StateKind::masters));
  const StateKind kinds[] = {StateKind::params, StateKind::exp_avg, StateKind::exp_avg_sq,
                             StateKind::masters};
  for (std::size_t i = 0; i < sets.size(); ++i) {
    if (!trainer.backend().memory_is_host()) sets[i].staged_through = &trainer.backend();
    for (ModelChunk& ch : trainer.chunks())
      if (ch.engine->state_offloaded(kinds[i])) sets[i].in_place = false;
    // PipeDream's stash swaps other versions into the live arena for each
    // backward, but swaps the arenas, not their bytes: the memory the slices
    // point at is the newest version until the update, as elsewhere.
  }
  return sets;
}

bool has_masters(const CheckpointMeta& meta) { return meta.state.count("master_weights") > 0; }

std::vector<TensorSet> resume_sets(Trainer& trainer, const GridCoord& coord,
                                   const CheckpointMeta& file) {
  std::vector<TensorSet> sets = training_sets(trainer, coord);
  if (trainer.weight_dtype() != DType::f32) {
    // The weights are the masters' rounding: read the masters (an fp32 file's
    // parameters are its masters) and let the trainer round them.
    sets.erase(sets.begin());
    if (!has_masters(file)) sets.back().group = kParamsGroup;
  } else if (has_masters(file)) {
    sets.front().group = kMasterGroup;
  }
  return sets;
}

void save_scaler_state(const Trainer& trainer, CheckpointMeta& meta) {
  if (trainer.weight_dtype() != DType::f32) meta.state["master_weights"] = 1;
  const LossScaler* ls = const_cast<Trainer&>(trainer).loss_scaler();
  if (!ls) return;
  meta.state["loss_scale"] = ls->state().scale;
  meta.state["loss_scale_growth_tracker"] = double(ls->state().growth_tracker);
  meta.state["loss_scale_hysteresis_tracker"] = double(ls->state().hysteresis_tracker);
}

void restore_scaler_state(Trainer& trainer, const CheckpointMeta& meta) {
  LossScaler* ls = trainer.loss_scaler();
  if (!ls || !meta.state.count("loss_scale")) return;  // fresh scaler from the deck
  ls->set_state({meta.state.at("loss_scale"),
                 std::int64_t(meta.state.at("loss_scale_growth_tracker")),
                 std::int64_t(meta.state.at("loss_scale_hysteresis_tracker"))});
}

CheckpointMeta training_meta(const Deck& deck, Grid& grid, Trainer& trainer, int step,
                             std::int64_t tokens_seen) {
  CheckpointMeta m;
  m.step = step;
  m.tokens_seen = tokens_seen;
  // Ranks without an optimizer (gather mode) learn its step count from the others.
  const std::int64_t own = trainer.optimizer_steps();
  m.optimizer_steps = grid.host().all_reduce_value(own, ReduceOp::max);
  m.train_window = std::int64_t(step) * deck.train.batch;
  m.val_window = 0;  // every evaluation reads the first eval_sequences windows
  m.deck_path = deck.path;
  m.deck_text = deck.text;
  m.layout = grid.shape();
  m.dp_mode = choice_name(deck.parallel.dp_mode);
  m.model = deck.model;
  m.train = deck.train;
  save_scaler_state(trainer, m);
  return m;
}

std::unique_ptr<CheckpointWriter> begin_checkpoint(Grid& grid, const std::string& dir,
                                                   const CheckpointMeta& meta,
                                                   const TensorTable& global,
                                                   const std::vector<TensorSet>& sets) {
  Communicator& world = grid.host();
  run_agreed(world, [&] {
    std::error_code ec;
    if (grid.is_root()) std::filesystem::create_directories(dir, ec);
    if (ec)
      throw InputError(fmt::format("checkpoint.dir = \"{}\": cannot create the directory: {}",
                                   dir, ec.message()));
  });
  auto w = std::make_unique<CheckpointWriter>(
      world, (std::filesystem::path(dir) / checkpoint_temp_name(meta.step)).string());
  fault_point("ckpt", "after_create", meta.step);
  w->write_meta(meta);
  std::vector<DatasetSpec> specs;
  for (const TensorSet& set : sets)
    for (const TensorInfo& g : global.tensors())
      specs.push_back({dataset_path(set.group, g.name), g.global_shape, set.dtype});
  w->create(specs);  // then each rank writes its slices as one stream, at its own pace
  return w;
}

TensorSlice saved_slice(const TensorSet& set, const TensorInfo& g, const Grid& grid) {
  return set.replicated_over_data
             ? replica_part(set.slice_of(g), grid.coord(), grid.shape().dp, dtype_size(set.dtype),
                            grid.shape().cp)
             : set.slice_of(g);
}

CheckpointIo end_checkpoint(Grid& grid, const std::string& dir, int keep, long step,
                            std::unique_ptr<CheckpointWriter> w, double started,
                            std::vector<std::string>* prunable) {
  Communicator& world = grid.host();
  fault_point("ckpt", "before_complete", step);
  CheckpointIo io;
  io.path = (std::filesystem::path(dir) / checkpoint_name(step)).string();
  w->finish();
  io.bytes = w->bytes();
  io.phases = w->phases();
  w.reset();
  const std::string name = checkpoint_name(step), temp = checkpoint_temp_name(step);
  const double renamed_from = now_seconds();
  fault_point("ckpt", "before_rename", step);
  // Every rank has closed (and synced) the file: only now may it get its name.
  run_agreed(world, [&] {
    if (!grid.is_root()) return;
    fsync_path((std::filesystem::path(dir) / temp).string());
    durable_rename(dir, temp, name);
  });
  fault_point("ckpt", "before_latest", step);
  run_agreed(world, [&] {
    if (!grid.is_root()) return;
    write_latest(dir, name);
    if (prunable) *prunable = prunable_files(dir, keep);
    else prune_checkpoints(dir, keep);
  });
  io.phases.add("rename", now_seconds() - renamed_from);
  io.seconds = now_seconds() - started;
  return io;
}

CheckpointIo save_checkpoint(Grid& grid, const std::string& dir, int keep,
                             const CheckpointMeta& meta, const TensorTable& global,
                             const std::vector<TensorSet>& sets) {
  const double t0 = now_seconds();
  std::unique_ptr<CheckpointWriter> w = begin_checkpoint(grid, dir, meta, global, sets);
  const std::size_t total = sets.size() * global.tensors().size();
  std::size_t done = 0;
  std::vector<char> staging;  // a device slice's host copy
  for (const TensorSet& set : sets) {
    if (set.open) set.open();
    for (const TensorInfo& g : global.tensors()) {
      TensorSlice slice = saved_slice(set, g, grid);
      if (set.staged_through && !slice.empty()) {
        staging.resize((slice.hi - slice.lo) * dtype_size(set.dtype));
        set.staged_through->copy_to_host(staging.data(), slice.data, staging.size());
        slice.data = staging.data();  // the writer has copied it when write() returns
      }
      w->write(done, slice);
      if (++done == total / 2) fault_point("ckpt", "mid_datasets", meta.step);
    }
    if (set.close) set.close(false);
  }
  return end_checkpoint(grid, dir, keep, meta.step, std::move(w), t0);
}

}  // namespace trident
