#include "checkpoint/checkpoint_drain.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>

#include "checkpoint/checksum.hpp"
#include "checkpoint/direct_queues.hpp"
#include "core/error.hpp"
#include "core/fault_inject.hpp"
#include "core/progress_wait.hpp"
#include "core/timer.hpp"

namespace trident {

CheckpointDrain::CheckpointDrain(std::string path, DirectFile* direct,
                                 std::vector<DrainPiece> pieces, std::vector<std::string> names,
                                 std::size_t datasets, long step, char* staging,
                                 std::size_t staging_bytes)
    : path_(std::move(path)), direct_(direct), pieces_(std::move(pieces)),
      names_(std::move(names)), step_(step), sums_(datasets, 0), staging_(staging),
      staging_bytes_(staging_bytes) {
  for (const DrainPiece& p : pieces_) {
    bytes_ += p.bytes;
    if (p.in_place) unread_in_place_ += p.bytes;
    if (p.reader) {
      unread_staged_ += p.bytes;
      if (p.bytes > staging_bytes_)
        error_ = std::make_exception_ptr(RuntimeFailure(fmt::format(
            "checkpoint {}: a piece of {} bytes does not fit the staging of {} bytes", path_,
            p.bytes, staging_bytes_)));
    }
  }
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd_ < 0)
    error_ = std::make_exception_ptr(RuntimeFailure(
        fmt::format("checkpoint {}: cannot open for the background write: {}", path_,
                    std::strerror(errno))));
  thread_ = std::thread([this] { run(); });
}

CheckpointDrain::~CheckpointDrain() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
  if (fd_ >= 0) ::close(fd_);
}

void CheckpointDrain::pause_if_injected(bool mid) {
  // TRIDENT_FAULT_INJECT=ckpt:drain_stall@STEP: the drain stops moving at its
  // middle, as a writer stuck on a dead file system would (until the run
  // ends); ckpt:drain_slow[@STEP]: 5 ms before each piece, so the drain
  // spans several steps of a small model and the optimizer meets it.
  const bool stall = mid && fault_armed("ckpt", "drain_stall", step_);
  if (!stall && !fault_armed("ckpt", "drain_slow", step_)) return;
  std::unique_lock<std::mutex> lock(mutex_);
  if (stall) changed_.wait(lock, [&] { return stop_; });
  else changed_.wait_for(lock, std::chrono::milliseconds(5), [&] { return stop_; });
}

void CheckpointDrain::run() {
  const double cpu0 = thread_cpu_seconds();
  try {
    if (error_) std::rethrow_exception(error_);
    std::size_t wave_end = 0, wave_at = 0;  // pieces [.., wave_end) are in the staging
    const std::size_t middle = pieces_.size() / 2;  // where faults are injected
    for (std::size_t i = 0, taken = 0; i < pieces_.size(); i += taken) {
      if (i == middle) {
        fault_point("ckpt", "mid_datasets", step_);  // kills the process
        if (fault_armed("ckpt", "drain_error", step_))
          throw RuntimeFailure(fmt::format("dataset {}: injected write failure "
                                           "(TRIDENT_FAULT_INJECT): Input/output error",
                                           names_.at(pieces_[i].dataset)));
      }
      pause_if_injected(i == middle);
      if (!wait_unpaused()) break;
      if (i >= wave_end && pieces_[i].reader) {
        wave_end = read_wave(i), wave_at = 0;
        if (wave_end == i) break;  // stopped
      }
      const char* staged = i < wave_end ? staging_ + wave_at : nullptr;
      if (staged) wave_at += pieces_[i].bytes;
      taken = write_pieces(i, i < middle ? middle : pieces_.size(), staged);
      if (taken == 0) break;  // stopped: the file stays incomplete
    }
    if (direct_) {
      direct_->drain();
      write_cpu_seconds_ = direct_->write_cpu_seconds();
    }
    // Durable before anyone is told: the completion's sync then has little left.
    if (::fsync(fd_) != 0)
      throw RuntimeFailure(fmt::format("fsync failed: {}", std::strerror(errno)));
  } catch (const RuntimeFailure& e) {
    error_ = std::make_exception_ptr(
        RuntimeFailure(fmt::format("checkpoint {}: {}", path_, e.what())));
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    cpu_seconds_ = thread_cpu_seconds() - cpu0;
    finished_ = true;
  }
  changed_.notify_all();
}

bool CheckpointDrain::wait_unpaused() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return !paused_ || stop_; });
  return !stop_;
}

void CheckpointDrain::pause() {
  std::lock_guard<std::mutex> lock(mutex_);
  paused_ = true;
}

void CheckpointDrain::resume() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    paused_ = false;
  }
  changed_.notify_all();
}

std::size_t CheckpointDrain::read_wave(std::size_t i) {
  // The last wave's pieces may still be on their way from the staging; a
  // stuck disk is the main thread's to find (wait_for_progress).
  if (staging_ticket_) direct_->written(staging_ticket_, std::numeric_limits<double>::infinity());
  std::size_t end = i, bytes = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_) return i;
    // Pieces from next_ on may have been read by release_sources(): no reader.
    while (end < pieces_.size() && pieces_[end].reader &&
           bytes + pieces_[end].bytes <= staging_bytes_)
      bytes += pieces_[end++].bytes;
    next_ = end;
    reading_ = true;
  }
  std::size_t at = 0;
  try {
    for (std::size_t j = i; j < end; at += pieces_[j++].bytes)
      (*pieces_[j].reader)(pieces_[j].src, pieces_[j].bytes, staging_ + at);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    reading_ = false;
    throw;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    reading_ = false;
    unread_staged_ -= bytes;
  }
  ++waves_;
  staged_bytes_ += bytes;
  changed_.notify_all();
  return end;
}

std::size_t CheckpointDrain::in_place_run_end(std::size_t i, std::size_t limit) const {
  std::size_t j = i + 1, bytes = pieces_[i].bytes;
  for (; j < limit; bytes += pieces_[j++].bytes) {
    const DrainPiece &a = pieces_[j - 1], &b = pieces_[j];
    if (!b.in_place || !b.direct || b.src != a.src + a.bytes || b.at != a.at + a.bytes ||
        bytes + b.bytes > kInPlaceWriteBytes)
      break;
  }
  return j;
}

std::size_t CheckpointDrain::write_pieces(std::size_t i, std::size_t limit, const char* staged) {
  // A bounce buffer first: waiting for the disk must not hold up
  // release_sources(), which waits only for a read in progress.
  char* buf = pieces_[i].direct ? direct_->acquire_buffer() : nullptr;
  const char* src = staged;
  std::size_t end = i + 1;
  // Training state aligned for the disk is written where it lies: summed in
  // place, then read by the transfer itself, so no copy passes through the
  // caches the training uses; the buffer only holds a place in the queue.
  // So is the staging (read_wave() waits for those writes before a refill).
  bool from_src = buf && staged && direct_->can_write_from(staged);
  if (!staged) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_) return 0;
    src = pieces_[i].src;
    from_src = buf && pieces_[i].in_place && direct_->can_write_from(src);
    if (from_src) end = in_place_run_end(i, limit);  // one transfer for neighbours
    next_ = end;
    reading_ = true;
  }
  const DrainPiece& p = pieces_[i];
  std::vector<char> copy(buf || from_src ? 0 : p.bytes);
  std::size_t bytes = 0;
  std::uint64_t ticket = 0;
  if (from_src) {
    for (std::size_t k = i; k < end; bytes += pieces_[k++].bytes) {
      const DrainPiece& q = pieces_[k];
      const char* from = k == i ? src : q.src;  // piece i's may be the staging
      sums_[q.dataset] += checksum_run(from, q.elem_bytes, q.first, q.bytes / q.elem_bytes,
                                       /*all_threads=*/false);
    }
    ticket = direct_->submit_from(buf, src, p.at, bytes);
    if (staged) staging_ticket_ = ticket;
    else written_in_place_ += bytes;
  } else {
    // Copied and summed in one pass, on this thread alone (idle OpenMP
    // workers would spin beside the training's).
    bytes = p.bytes;
    sums_[p.dataset] += checksum_copy(buf ? buf : copy.data(), src, p.elem_bytes, p.first,
                                      p.bytes / p.elem_bytes);
  }
  if (!staged) {
    std::lock_guard<std::mutex> lock(mutex_);
    reading_ = false;
    if (p.in_place) unread_in_place_ -= bytes;
    if (ticket) in_flight_ticket_ = ticket;  // queued before release_sources() can look
  }
  changed_.notify_all();
  if (!from_src) {
    if (buf) direct_->submit_buffer(buf, p.at, p.bytes);
    else if (direct_) direct_->submit_buffered(std::move(copy), p.at);
    else transfer_all(fd_, copy.data(), p.bytes, p.at, true);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    progress_ += end - i;
  }
  changed_.notify_all();
  return end - i;
}

bool CheckpointDrain::finished() {
  std::lock_guard<std::mutex> lock(mutex_);
  return finished_;
}

std::string CheckpointDrain::no_progress(double timeout_s) const {
  const std::size_t at = std::min(progress_, pieces_.size());
  const std::string dataset =
      at < pieces_.size() ? names_.at(pieces_[at].dataset) : "(its final sync)";
  return fmt::format(
      "checkpoint {}: the background write made no progress for {:g} s (system."
      "comm_timeout_s), at dataset {} ({} of {} pieces written); is its file system stuck?",
      path_, timeout_s, dataset, progress_, pieces_.size());
}

template <class Done>
void CheckpointDrain::wait_for_progress(std::unique_lock<std::mutex>& lock, Done done,
                                        double timeout_s) {
  if (!wait_while_progressing(lock, changed_, [&] { return progress_; }, done, timeout_s))
    throw RuntimeFailure(no_progress(timeout_s));
}

double CheckpointDrain::wait(double timeout_s) {
  resume();
  const double t0 = now_seconds();
  std::unique_lock<std::mutex> lock(mutex_);
  wait_for_progress(lock, [&] { return finished_; }, timeout_s);
  return now_seconds() - t0;
}

double CheckpointDrain::release_sources(std::size_t keep_bytes, double timeout_s) {
  const double t0 = now_seconds();
  std::unique_lock<std::mutex> lock(mutex_);
  if (released_) return 0;
  released_ = true;
  wait_for_progress(lock, [&] {
    return finished_ || (!reading_ && unread_in_place_ + unread_staged_ <= keep_bytes);
  }, timeout_s);
  // The thread takes no piece while the lock is held: copy what it has not.
  for (std::size_t i = next_; i < pieces_.size() && !finished_; ++i) {
    DrainPiece& p = pieces_[i];
    if (p.in_place) {
      copies_.emplace_back(p.src, p.src + p.bytes);
    } else if (p.reader) {
      copies_.emplace_back(p.bytes);
      (*p.reader)(p.src, p.bytes, copies_.back().data());
    } else {
      continue;
    }
    p.src = copies_.back().data();
    p.in_place = false;
    p.reader = nullptr;
    copied_bytes_ += p.bytes;
  }
  unread_in_place_ = unread_staged_ = 0;
  // The disk may still be reading training state in place (at most the
  // queue's depth of pieces): the state changes only once it is done.
  if (in_flight_ticket_ && !direct_->written(in_flight_ticket_, timeout_s))
    throw RuntimeFailure(no_progress(timeout_s));
  return now_seconds() - t0;
}

}  // namespace trident
