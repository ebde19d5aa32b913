// When training checkpoints, and resuming. Saves every checkpoint.every steps,
// every checkpoint.minutes (rank 0's clock decides), on SIGUSR1 or SIGTERM,
// and after the last step, whenever checkpoint.dir is set. The stop signal,
// the clock and whether a background save is still writing (checkpoint.async)
// are agreed with one small all-reduce per step (train/step_agreement.hpp), so
// every rank saves, completes a background save and stops at the same step
// boundary.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "grid/grid.hpp"
#include "checkpoint/checkpoint_schema.hpp"
#include "io/deck.hpp"
#include "train/async_save.hpp"
#include "train/step_agreement.hpp"
#include "train/stop_signal.hpp"
#include "train/trainer.hpp"

namespace trident {

class Checkpointer {
 public:
  Checkpointer(const Deck& deck, Grid& grid, Trainer& trainer);
  ~Checkpointer() { join_pruning(); }
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  bool enabled() const { return !deck_.checkpoint.dir.empty(); }

  // Loads `what` (a checkpoint file, or "latest": the one checkpoint.dir/latest
  // names) into the trainer. Returns the step to continue from. Collective;
  // errors are agreed (exit 2 for a missing or bad checkpoint).
  int resume(const std::string& what);

  // Whether a save comes due after `steps_done` steps (the trainer settles a
  // post-validated step before it). Collective: the boundary's agreement.
  bool save_due(int steps_done);

  // Call after every step with the number of steps done. Saves when one is
  // due. Returns true when training must stop here (a stop signal arrived; a
  // checkpoint has been written). Collective.
  bool after_step(int steps_done);

  // Rank 0's closing message after a stop: why, and how to continue.
  std::string stop_message() const;

  // Host memory the background saves held at most (checkpoint.async): the
  // drain's staging, and what was copied at a save or an optimizer step.
  std::size_t staging_peak() const { return staging_peak_; }

 private:
  void save(int steps_done);
  void start_async(int steps_done);
  // The save in flight: wait for this rank's drain when `wait` (saying so),
  // then complete it everywhere. A failed background save is a warning; a
  // second in a row stops the run.
  void complete_pending(bool wait);
  StepFlags local_flags() const;
  const StepFlags& agreed(int steps_done);

  const Deck& deck_;
  Grid& grid_;
  Trainer& trainer_;
  std::unique_ptr<StopSignalGuard> signals_;  // only while checkpointing is on
  StepAgreement agreement_;
  double last_save_s_;
  int resumed_step_ = 0;
  std::int64_t resumed_tokens_ = 0;
  int stop_signal_ = 0;
  int stopped_at_ = 0;
  std::string last_path_;
  SaveStaging staging_;                 // before pending_: outlives the save using it
  std::unique_ptr<AsyncSave> pending_;  // checkpoint.async: the save in flight
  // Training's time held up by it: starting it, at optimizer steps (waiting
  // for or copying what it had not read), waiting for it when the next save
  // came due.
  double held_start_s_ = 0, held_update_s_ = 0, held_wait_s_ = 0;
  int failed_in_row_ = 0;               // background saves
  std::size_t staging_peak_ = 0;
  std::size_t staging_bytes() const {
    return std::size_t(deck_.checkpoint.staging_mb * double(1 << 20));
  }
  void note_staging() {
    if (pending_)
      staging_peak_ = std::max(staging_peak_, pending_->staging_bytes() +
                                                  pending_->copied_at_save() +
                                                  pending_->copied_at_release());
  }
  // Rank 0: deletes what a completed background save pruned while training
  // goes on; joined before the next save touches the directory.
  std::thread pruning_;
  void join_pruning() {
    if (pruning_.joinable()) pruning_.join();
  }
};

// "train.lr = 0.001 in the deck, 0.01 in the checkpoint", one per changed key.
std::vector<std::string> changed_hyperparameters(const CheckpointMeta& meta, const Deck& deck);

}  // namespace trident
