#include "train/async_save.hpp"

#include <cstring>
#include <exception>

#include "core/timer.hpp"

namespace trident {

AsyncSave::AsyncSave(Grid& grid, const std::string& dir, const CheckpointMeta& meta,
                     const TensorTable& global, const std::vector<TensorSet>& sets,
                     double timeout_s)
    : grid_(grid), dir_(dir), step_(meta.step), started_(now_seconds()), timeout_s_(timeout_s) {
  writer_ = begin_checkpoint(grid, dir, meta, global, sets);
  std::vector<DrainPiece> pieces;
  std::size_t index = 0;
  for (const TensorSet& set : sets) {
    const bool in_place = set.in_place && !set.staged_through;
    if (set.open) set.open();
    for (const TensorInfo& g : global.tensors()) {
      TensorSlice slice = saved_slice(set, g, grid);
      if (!in_place && slice.counted && !slice.empty()) {
        const std::size_t bytes = (slice.hi - slice.lo) * dtype_size(set.dtype);
        std::vector<char>& copy = copies_.emplace_back(bytes);
        if (set.staged_through) set.staged_through->copy_to_host(copy.data(), slice.data, bytes);
        else std::memcpy(copy.data(), slice.data, bytes);
        slice.data = copy.data();
        copied_ += bytes;
      }
      writer_->plan(index++, slice, in_place, pieces);
    }
    if (set.close) set.close(false);  // in place: resident state, its arenas stay
  }
  drain_ = std::make_unique<CheckpointDrain>(writer_->path(), writer_->direct(), std::move(pieces),
                                             writer_->dataset_paths(), index, step_);
}

AsyncSave::~AsyncSave() {
  drain_.reset();
  // Leaving on an error: closing the file is collective, and the other ranks
  // may be elsewhere. The process is about to end; the file stays a temporary.
  if (writer_ && std::uncaught_exceptions() > 0) writer_->abandon();
}

CheckpointIo AsyncSave::complete(int keep, std::vector<std::string>& prunable) {
  std::unique_ptr<CheckpointWriter> w = std::move(writer_);
  w->add_drained(drain_->sums(), drain_->error());
  drain_.reset();  // joined; the writer's queue is idle again
  return end_checkpoint(grid_, dir_, keep, step_, std::move(w), started_, &prunable);
}

}  // namespace trident
