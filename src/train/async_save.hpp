// One asynchronous checkpoint in flight (checkpoint.async): the file and its
// datasets are created collectively at a step boundary; this rank's data is
// written by a CheckpointDrain thread while the next steps compute; and at a
// later step boundary, once every rank's drain is done, the main thread
// completes it as a synchronous save does (checksums, `complete`, sync,
// rename, `latest`). Every MPI and HDF5 call stays on the main thread.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_drain.hpp"
#include "checkpoint/direct_queues.hpp"
#include "checkpoint/checkpoint_writer.hpp"
#include "train/checkpoint_state.hpp"

namespace trident {

// The drain's staging, kept from one asynchronous save to the next: its pages
// are faulted in (and on a device backend page-locked) once a run, not once
// a save; a fresh 2 MiB-paged region costs more to fault in than the drain
// spends reading through it.
class SaveStaging {
 public:
  SaveStaging() = default;
  ~SaveStaging() { release(); }
  SaveStaging(const SaveStaging&) = delete;
  SaveStaging& operator=(const SaveStaging&) = delete;
  // At least `bytes`, page-locked through `device` where set; reused while
  // it is large enough. Throws RuntimeFailure when out of host memory.
  char* get(std::size_t bytes, ComputeBackend* device);

 private:
  void release();
  std::unique_ptr<AlignedBuffers> buffer_;  // one buffer of bytes_
  std::size_t bytes_ = 0;
  ComputeBackend* pinned_by_ = nullptr;
};

class AsyncSave {
 public:
  // Collective. Host state is read in place; device memory and offloaded
  // state the engines can read piece by piece (TensorSet::open_reserved) are
  // read by the drain in waves through a staging buffer of staging_bytes (at
  // least one piece); what neither (an engine without that path) is copied
  // to host memory here, and counted by copied_at_save(). `staging` is the
  // caller's, kept until this save is gone.
  AsyncSave(Grid& grid, const std::string& dir, const CheckpointMeta& meta,
            const TensorTable& global, const std::vector<TensorSet>& sets, double timeout_s,
            std::size_t staging_bytes, SaveStaging& staging);
  ~AsyncSave();  // unfinished: the file stays under its temporary name
  AsyncSave(const AsyncSave&) = delete;
  AsyncSave& operator=(const AsyncSave&) = delete;

  long step() const { return step_; }
  std::size_t bytes() const { return drain_->bytes(); }  // this rank's
  // Copied at the save (not in place): host memory held until completion.
  std::size_t copied_at_save() const { return copied_; }
  // The drain's staging for device and offloaded state (0 without any).
  std::size_t staging_bytes() const { return staging_bytes_; }
  // Once drained(): what passed through the staging, in how many waves.
  std::size_t staged_bytes() const { return drain_->staged_bytes(); }
  std::size_t waves() const { return drain_->waves(); }
  double drain_cpu_seconds() const { return drain_->cpu_seconds(); }
  double writer_cpu_seconds() const { return drain_->write_cpu_seconds(); }
  std::size_t written_in_place() const { return drain_->written_in_place(); }
  // This rank's data are written and synced (or its drain failed).
  bool drained() { return drain_->finished(); }
  // Waits for drained(); seconds waited. Throws RuntimeFailure when the drain
  // makes no progress for system.comm_timeout_s.
  double wait() { return drain_->wait(timeout_s_); }
  // Before the optimizer step changes the state: see CheckpointDrain.
  double release_sources(std::size_t keep_bytes) {
    return drain_->release_sources(keep_bytes, timeout_s_);
  }
  std::size_t copied_at_release() const { return drain_->copied_bytes(); }
  void pause_writes() { drain_->pause(); }
  void resume_writes() { drain_->resume(); }
  // Once every rank's drain is done: completes the file, renames it and
  // moves `latest`. Collective; a failure anywhere (a drain's write
  // included) is an AgreedError everywhere, and the file is left incomplete.
  // What `keep` prunes is listed in `prunable` (rank 0), not yet deleted.
  CheckpointIo complete(int keep, std::vector<std::string>& prunable);

 private:
  Grid& grid_;
  std::string dir_;
  long step_;
  double started_, timeout_s_;
  std::size_t copied_ = 0;
  std::unique_ptr<CheckpointWriter> writer_;
  std::vector<std::vector<char>> copies_;  // state that is not read in place
  std::vector<std::unique_ptr<PieceReader>> readers_;  // one per set read through one
  std::size_t staging_bytes_ = 0;  // of the caller's SaveStaging this save uses
  std::unique_ptr<CheckpointDrain> drain_;  // last: stopped before the rest goes
};

}  // namespace trident
