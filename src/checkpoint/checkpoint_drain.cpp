#include "checkpoint/checkpoint_drain.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "checkpoint/checksum.hpp"
#include "checkpoint/direct_queues.hpp"
#include "core/error.hpp"
#include "core/fault_inject.hpp"
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
    for (std::size_t i = 0; i < pieces_.size(); ++i) {
      if (i == pieces_.size() / 2) {
        fault_point("ckpt", "mid_datasets", step_);  // kills the process
        if (fault_armed("ckpt", "drain_error", step_))
          throw RuntimeFailure(fmt::format("dataset {}: injected write failure "
                                           "(TRIDENT_FAULT_INJECT): Input/output error",
                                           names_.at(pieces_[i].dataset)));
      }
      pause_if_injected(i == pieces_.size() / 2);
      if (i >= wave_end && pieces_[i].reader) {
        wave_end = read_wave(i), wave_at = 0;
        if (wave_end == i) break;  // stopped
      }
      const char* staged = i < wave_end ? staging_ + wave_at : nullptr;
      if (staged) wave_at += pieces_[i].bytes;
      if (!write_piece(i, staged)) break;  // stopped: the file stays incomplete
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

std::size_t CheckpointDrain::read_wave(std::size_t i) {
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

bool CheckpointDrain::write_piece(std::size_t i, const char* staged) {
  // A bounce buffer first: waiting for the disk must not hold up
  // release_sources(), which waits only for a read in progress.
  char* buf = pieces_[i].direct ? direct_->acquire_buffer() : nullptr;
  const char* src = staged;
  if (!staged) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_) return false;
    src = pieces_[i].src;
    next_ = i + 1;
    reading_ = true;
  }
  const DrainPiece& p = pieces_[i];
  std::vector<char> copy(buf ? 0 : p.bytes);
  // Copied and summed in one pass, on this thread alone (idle OpenMP workers
  // would spin beside the training's).
  sums_[p.dataset] +=
      checksum_copy(buf ? buf : copy.data(), src, p.elem_bytes, p.first, p.bytes / p.elem_bytes);
  if (!staged) {
    std::lock_guard<std::mutex> lock(mutex_);
    reading_ = false;
    if (p.in_place) unread_in_place_ -= p.bytes;
  }
  changed_.notify_all();
  if (buf) direct_->submit_buffer(buf, p.at, p.bytes);
  else if (direct_) direct_->submit_buffered(std::move(copy), p.at);
  else transfer_all(fd_, copy.data(), p.bytes, p.at, true);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++progress_;
  }
  changed_.notify_all();
  return true;
}

bool CheckpointDrain::finished() {
  std::lock_guard<std::mutex> lock(mutex_);
  return finished_;
}

template <class Done>
void CheckpointDrain::wait_for_progress(std::unique_lock<std::mutex>& lock, Done done,
                                        double timeout_s) {
  std::size_t seen = progress_;
  double since = now_seconds();
  while (!done()) {
    changed_.wait_for(lock, std::chrono::milliseconds(50));
    if (progress_ != seen) {
      seen = progress_, since = now_seconds();
    } else if (now_seconds() - since > timeout_s) {
      const std::size_t at = std::min(progress_, pieces_.size());
      const std::string dataset =
          at < pieces_.size() ? names_.at(pieces_[at].dataset) : "(its final sync)";
      throw RuntimeFailure(fmt::format(
          "checkpoint {}: the background write made no progress for {:g} s (system."
          "comm_timeout_s), at dataset {} ({} of {} pieces written); is its file system stuck?",
          path_, timeout_s, dataset, progress_, pieces_.size()));
    }
  }
}

double CheckpointDrain::wait(double timeout_s) {
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
  return now_seconds() - t0;
}

}  // namespace trident
