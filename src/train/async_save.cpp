#include "train/async_save.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "core/error.hpp"
#include "core/timer.hpp"

namespace trident {

char* SaveStaging::get(std::size_t bytes, ComputeBackend* device) {
  if (buffer_ && bytes <= bytes_ && device == pinned_by_) return (*buffer_)[0];
  release();
  // Whole huge pages where it is large (AlignedBuffers then maps them so): the
  // disk's direct transfers from it, and the swap's into it, pin one page per
  // 2 MiB, not 512.
  constexpr std::size_t kHugePage = std::size_t{2} << 20;
  const std::size_t unit = bytes >= kHugePage ? kHugePage : 4096;
  bytes_ = (bytes + unit - 1) / unit * unit;
  buffer_ = std::make_unique<AlignedBuffers>(1, bytes_, 4096);
  pinned_by_ = device;
  if (device) device->pin_host((*buffer_)[0], bytes_);
  return (*buffer_)[0];
}

void SaveStaging::release() {
  if (buffer_ && pinned_by_) pinned_by_->unpin_host((*buffer_)[0], bytes_);
  buffer_.reset();
  bytes_ = 0, pinned_by_ = nullptr;
}

AsyncSave::AsyncSave(Grid& grid, const std::string& dir, const CheckpointMeta& meta,
                     const TensorTable& global, const std::vector<TensorSet>& sets,
                     double timeout_s, std::size_t staging_bytes, SaveStaging& staging)
    : grid_(grid), dir_(dir), step_(meta.step), started_(now_seconds()), timeout_s_(timeout_s) {
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
  char* staging_area = nullptr;
  if (staged > 0) {
    // Bounded: staging_mb (checkpoint), but never less than one piece (2 MiB).
    staging_bytes_ = std::max(std::min(staging_bytes, staged), largest);
    staging_area = staging.get(staging_bytes_, device);
    if (device) device->order_background_reads();  // after the step that wrote the state
  }
  drain_ = std::make_unique<CheckpointDrain>(writer_->path(), writer_->direct(), std::move(pieces),
                                             writer_->dataset_paths(), index, step_,
                                             staging_area, staging_bytes_);
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
