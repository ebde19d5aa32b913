#include "train/async_save.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "core/error.hpp"
#include "core/timer.hpp"

namespace trident {

void AsyncSave::FreeStaging::operator()(char* p) const {
  if (pinned_by) pinned_by->unpin_host(p, bytes);
  std::free(p);
}

AsyncSave::AsyncSave(Grid& grid, const std::string& dir, const CheckpointMeta& meta,
                     const TensorTable& global, const std::vector<TensorSet>& sets,
                     double timeout_s, std::size_t staging_bytes)
    : grid_(grid), dir_(dir), step_(meta.step), started_(now_seconds()), timeout_s_(timeout_s),
      staging_(nullptr, FreeStaging{}) {
  writer_ = begin_checkpoint(grid, dir, meta, global, sets);
  std::vector<DrainPiece> pieces;
  std::size_t index = 0, staged = 0, largest = 0;
  ComputeBackend* device = nullptr;
  for (const TensorSet& set : sets) {
    const PieceReader* reader = nullptr;
    if (!set.in_place && set.open_reserved && set.open_reserved()) {
      // Offloaded state: through its home's own reading path, when the drain comes to it.
      reader = readers_.emplace_back(std::make_unique<PieceReader>(
          [read = set.read_reserved](const char* at, std::size_t bytes, char* out) {
            read(at, bytes, out);
          })).get();
    } else {
      if (set.open) set.open();
      if (set.in_place && set.staged_through) {  // device memory, unchanged until the step
        ComputeBackend* backend = set.staged_through;
        reader = readers_.emplace_back(std::make_unique<PieceReader>(
            [backend](const char* dev, std::size_t bytes, char* out) {
              backend->copy_to_host_in_background(out, dev, bytes);
            })).get();
      }
    }
    if (set.staged_through) device = set.staged_through;
    const bool in_place = set.in_place && !set.staged_through;
    const bool copy_now = !in_place && !reader;  // offloaded state no engine can read in waves
    const std::size_t first_piece = pieces.size();
    for (const TensorInfo& g : global.tensors()) {
      TensorSlice slice = saved_slice(set, g, grid);
      if (copy_now && slice.counted && !slice.empty()) {
        const std::size_t bytes = (slice.hi - slice.lo) * dtype_size(set.dtype);
        std::vector<char>& copy = copies_.emplace_back(bytes);
        if (set.staged_through) set.staged_through->copy_to_host(copy.data(), slice.data, bytes);
        else std::memcpy(copy.data(), slice.data, bytes);
        slice.data = copy.data();
        copied_ += bytes;
      }
      writer_->plan(index++, slice, in_place, pieces);
    }
    for (std::size_t i = first_piece; reader && i < pieces.size(); ++i) {
      pieces[i].reader = reader;
      staged += pieces[i].bytes;
      largest = std::max(largest, pieces[i].bytes);
    }
    if (set.close) set.close(false);  // resident state stays; a reservation is only addresses
  }
  if (staged > 0) {
    // Bounded: staging_mb (checkpoint), but never less than one piece (2 MiB).
    staging_bytes_ = std::max(std::min(staging_bytes, staged), largest);
    const std::size_t alloc = (staging_bytes_ + 4095) / 4096 * 4096;
    char* p = static_cast<char*>(std::aligned_alloc(4096, alloc));
    if (!p) throw RuntimeFailure("checkpoint.async: out of host memory for the staging");
    if (device) device->pin_host(p, alloc);
    staging_ = std::unique_ptr<char, FreeStaging>(p, FreeStaging{device, alloc});
    if (device) device->order_background_reads();  // after the step that wrote the state
  }
  drain_ = std::make_unique<CheckpointDrain>(writer_->path(), writer_->direct(), std::move(pieces),
                                             writer_->dataset_paths(), index, step_,
                                             staging_.get(), staging_bytes_);
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
