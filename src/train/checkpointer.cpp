#include "train/checkpointer.hpp"

#include "checkpoint/checkpoint_reader.hpp"

#include <fmt/format.h>

#include <cstdio>

#include "comm/agree.hpp"
#include "core/error.hpp"
#include "core/timer.hpp"
#include "checkpoint/checkpoint_dir.hpp"
#include "memory/ledger.hpp"
#include "model/gpt_params.hpp"
#include "train/checkpoint_state.hpp"

namespace trident {
namespace {

std::string rate(std::uint64_t bytes, double seconds) {
  return fmt::format("{} in {:.2f} s, {:.2f} GB/s", format_bytes(double(bytes)), seconds,
                     seconds > 0 ? double(bytes) / seconds / 1e9 : 0.0);
}

}  // namespace

Checkpointer::Checkpointer(const Deck& deck, Grid& grid, Trainer& trainer)
    : deck_(deck), grid_(grid), trainer_(trainer),
      agreement_(grid.host(), trainer.defers_stats()), last_save_s_(now_seconds()) {
  if (enabled()) signals_ = std::make_unique<StopSignalGuard>();
  if (!deck_.checkpoint.async) return;
  // The step about to change what the save reads: let the drain finish
  // reading it, or copy up to staging_mb of what it has not read.
  // An update that reads and writes a swap file has the disk to itself, so
  // its transfers do not queue behind the checkpoint's: the drain resumes at
  // the step boundary.
  const bool update_on_disk = deck_.offload.optimizer == OffloadTarget::nvme;
  trainer_.set_before_update([this, update_on_disk] {
    if (!pending_) return;
    held_update_s_ += pending_->release_sources(staging_bytes());
    if (update_on_disk) pending_->pause_writes();
    note_staging();
  });
}

int Checkpointer::resume(const std::string& what) {
  std::string path = what;
  run_agreed(grid_.host(), [&] {
    if (what != "latest") return;
    const std::string& dir = deck_.checkpoint.dir;
    if (dir.empty())
      throw InputError(fmt::format("--resume latest: {} sets no checkpoint.dir to look in; set "
                                   "[checkpoint] dir or give the checkpoint file", deck_.path));
    const auto latest = read_latest(dir);
    if (!latest)
      throw InputError(fmt::format("--resume latest: no checkpoint in {} ({}/latest does not "
                                   "exist); run without --resume to start from scratch",
                                   dir, dir));
    path = *latest;
  });
  // Which sets to read depends on the precision that wrote the file.
  CheckpointMeta meta = CheckpointReader(grid_.host(), path).meta();
  const std::vector<TensorSet> sets = resume_sets(trainer_, grid_.coord(), meta);
  const CheckpointIo io =
      load_checkpoint(grid_, path, deck_.model, build_gpt_param_table(deck_.model), sets, meta);
  trainer_.refresh_weights_from_masters();
  restore_scaler_state(trainer_, meta);
  run_agreed(grid_.host(), [&] {
    if (meta.step > deck_.train.steps)
      throw InputError(fmt::format("{}: the checkpoint is at step {}, past train.steps = {} of "
                                   "{}; raise train.steps to continue", path, meta.step,
                                   deck_.train.steps, deck_.path));
  });
  trainer_.set_optimizer_steps(meta.optimizer_steps);
  resumed_step_ = int(meta.step);
  resumed_tokens_ = meta.tokens_seen;
  last_path_ = path;
  if (grid_.is_root()) {
    fmt::print("resumed from {}: step {}, {} tokens seen, written by {} ranks TP({})-PP({})-DP({}) "
               "(dp mode {}); read {}\n", path, meta.step, meta.tokens_seen,
               meta.layout.size(), meta.layout.tp, meta.layout.pp, meta.layout.dp, meta.dp_mode,
               rate(io.bytes, io.seconds));
    for (const std::string& change : changed_hyperparameters(meta, deck_))
      fmt::print("warning: {}; continuing with the deck's value\n", change);
    std::fflush(stdout);
  }
  return resumed_step_;
}

// This rank's flags: its stop signal, rank 0's clock, its save still writing.
StepFlags Checkpointer::local_flags() const {
  StepFlags flags = {StopSignalGuard::received(), 0, pending_ && !pending_->drained()};
  const double minutes = deck_.checkpoint.minutes;
  if (grid_.is_root() && minutes > 0 && now_seconds() - last_save_s_ >= 60 * minutes) flags[1] = 1;
  return flags;
}

const StepFlags& Checkpointer::agreed(int done) {
  return agreement_.at(done, done == deck_.train.steps, local_flags());
}

bool Checkpointer::save_due(int done) {
  if (!enabled()) return false;
  const StepFlags& flags = agreed(done);
  const int every = deck_.checkpoint.every;
  return done == deck_.train.steps || flags[0] || flags[1] || (every > 0 && done % every == 0);
}

bool Checkpointer::after_step(int done) {
  if (!enabled()) return false;
  if (pending_) pending_->resume_writes();
  const StepFlags flags = agreed(done);
  const bool last = done == deck_.train.steps;
  if (pending_ && !flags[2]) complete_pending(false);
  if (save_due(done)) {
    trainer_.settle();  // a post-validated step: the state it saves is the checked one
    if (pending_) complete_pending(true);  // one save in flight at most
    // A signal and the end of the run save as ever: the job is about to end.
    if (deck_.checkpoint.async && !last && !flags[0]) start_async(done);
    else save(done);
  }
  // Lagged: this boundary's flags, read at the next (after any save started,
  // so they tell whether it still writes).
  if (agreement_.lagged() && !last && !flags[0]) agreement_.post(local_flags());
  if (!flags[0] || last) return false;
  stop_signal_ = flags[0];
  stopped_at_ = done;
  return true;
}

void Checkpointer::save(int done) {
  join_pruning();
  const std::int64_t tokens =
      resumed_tokens_ + std::int64_t(done - resumed_step_) * trainer_.tokens_per_step();
  const CheckpointMeta meta = training_meta(deck_, grid_, trainer_, done, tokens);
  const CheckpointIo io =
      save_checkpoint(grid_, deck_.checkpoint.dir, deck_.checkpoint.keep, meta,
                      build_gpt_param_table(deck_.model), training_sets(trainer_, grid_.coord()));
  last_save_s_ = now_seconds();
  last_path_ = io.path;
  if (grid_.is_root()) {
    fmt::print("checkpoint: step {} -> {} ({})\n", done, io.path, rate(io.bytes, io.seconds));
    std::fflush(stdout);
  }
}

void Checkpointer::start_async(int done) {
  const double t0 = now_seconds();
  join_pruning();
  const std::int64_t tokens =
      resumed_tokens_ + std::int64_t(done - resumed_step_) * trainer_.tokens_per_step();
  const CheckpointMeta meta = training_meta(deck_, grid_, trainer_, done, tokens);
  pending_ = std::make_unique<AsyncSave>(grid_, deck_.checkpoint.dir, meta,
                                         build_gpt_param_table(deck_.model),
                                         training_sets(trainer_, grid_.coord()),
                                         deck_.system.comm_timeout_s, staging_bytes(), staging_);
  note_staging();
  last_save_s_ = now_seconds();
  held_start_s_ = last_save_s_ - t0;
  held_update_s_ = held_wait_s_ = 0;
}

void Checkpointer::complete_pending(bool wait) {
  if (wait) {
    const double waited = pending_->wait();
    held_wait_s_ = waited;
    if (grid_.is_root())
      fmt::print("checkpoint: waited {:.2f} s for step {}'s save\n", waited, pending_->step());
  }
  const std::unique_ptr<AsyncSave> save = std::move(pending_);
  // Read before complete() joins the drain (its counts go with it).
  const std::string drain_cpu =
      fmt::format("; {} written in place; the drain's thread used {:.3f} s of CPU, its "
                  "writer's {:.3f}",
                  format_bytes(double(save->written_in_place())), save->drain_cpu_seconds(),
                  save->writer_cpu_seconds());
  const std::string staged =
      save->waves() == 0 ? std::string()
                         : fmt::format("; {} staged through {} in {} wave{}",
                                       format_bytes(double(save->staged_bytes())),
                                       format_bytes(double(save->staging_bytes())), save->waves(),
                                       save->waves() == 1 ? "" : "s");
  try {
    const double t0 = now_seconds();
    std::vector<std::string> prunable;
    const CheckpointIo io = save->complete(deck_.checkpoint.keep, prunable);
    join_pruning();
    pruning_ = std::thread([prunable] { remove_files(prunable); });
    failed_in_row_ = 0;
    last_path_ = io.path;
    const double completing = now_seconds() - t0;
    if (grid_.is_root())
      fmt::print("checkpoint: step {} -> {} ({}; in the background, training held up {:.3f} s: "
                 "{:.3f} starting, {:.3f} at optimizer steps, {:.3f} waiting, {:.3f} completing{}{})\n",
                 save->step(), io.path, rate(io.bytes, io.seconds),
                 held_start_s_ + held_update_s_ + held_wait_s_ + completing, held_start_s_,
                 held_update_s_, held_wait_s_, completing, drain_cpu, staged);
  } catch (const AgreedError& e) {
    if (++failed_in_row_ > 1)
      throw AgreedError(kExitRuntime, fmt::format("{}; the second background checkpoint in a row "
                                                  "failed: stopping (latest names {})",
                                                  e.what(), last_path_.empty() ? "nothing" : last_path_));
    if (grid_.is_root())
      fmt::print("warning: {}; the checkpoint of step {} is dropped (latest names {}) and "
                 "training goes on\n", e.what(), save->step(),
                 last_path_.empty() ? "nothing yet" : last_path_);
  }
  if (grid_.is_root()) std::fflush(stdout);
}

std::string Checkpointer::stop_message() const {
  return fmt::format("stopped by {} after step {} of {}; checkpoint {} written. Continue with: "
                     "trident train {} --resume latest (and the same --set options)",
                     signal_name(stop_signal_), stopped_at_, deck_.train.steps, last_path_,
                     deck_.path);
}

std::vector<std::string> changed_hyperparameters(const CheckpointMeta& meta, const Deck& deck) {
  std::vector<std::string> out;
  const TrainSection &was = meta.train, &now = deck.train;
  auto check = [&](const char* key, auto before, auto after) {
    if (before != after)
      out.push_back(fmt::format("train.{} = {} in the deck, {} in the checkpoint", key, after,
                                before));
  };
  check("steps", was.steps, now.steps);
  check("batch", was.batch, now.batch);
  check("warmup", was.warmup, now.warmup);
  check("lr", was.lr, now.lr);
  check("min_lr", was.min_lr, now.min_lr);
  check("weight_decay", was.weight_decay, now.weight_decay);
  check("grad_clip", was.grad_clip, now.grad_clip);
  check("beta1", was.beta1, now.beta1);
  check("beta2", was.beta2, now.beta2);
  check("eps", was.eps, now.eps);
  check("seed", was.seed, now.seed);
  return out;
}

}  // namespace trident
