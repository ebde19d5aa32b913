#include "checkpoint/direct_queues.hpp"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "core/error.hpp"
#include "core/fault_inject.hpp"
#include "core/progress_wait.hpp"
#include "core/timer.hpp"

namespace trident {

std::size_t transfer_all(int fd, char* buf, std::size_t n, std::uint64_t at, bool write) {
  std::size_t done = 0;
  while (done < n) {
    const ssize_t r = write ? ::pwrite(fd, buf + done, n - done, off_t(at + done))
                            : ::pread(fd, buf + done, n - done, off_t(at + done));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0 && !write) break;
    if (r <= 0)
      throw RuntimeFailure(fmt::format("direct {} of {} bytes at {}: {}", write ? "write" : "read",
                                       n - done, at + done,
                                       r < 0 ? std::strerror(errno) : "no progress"));
    done += std::size_t(r);
  }
  return done;
}

void AlignedBuffers::Free::operator()(char* p) const { std::free(p); }

AlignedBuffers::AlignedBuffers(int count, std::size_t bytes, std::size_t alignment) {
  // Whole huge pages where the buffers are: a direct transfer then pins one
  // page, not 512, and reaches the disk as one physically contiguous segment
  // (a 4 KiB-paged 2 MiB buffer exceeds a virtio disk's 254 segments and is
  // split), so the writing thread spends a fraction of the CPU.
  constexpr std::size_t kHugePage = std::size_t{2} << 20;
  const bool huge = bytes % kHugePage == 0 && kHugePage % alignment == 0;
  for (int i = 0; i < count; ++i) {
    buffers_.emplace_back(static_cast<char*>(std::aligned_alloc(huge ? kHugePage : alignment, bytes)));
    if (!buffers_.back())
      throw RuntimeFailure(fmt::format("out of memory for {} direct I/O buffers of {} bytes",
                                       count, bytes));
    if (huge) madvise(buffers_.back().get(), bytes, MADV_HUGEPAGE);
  }
}

WriteBehind::WriteBehind(int fd, int depth, std::size_t buffer_bytes, std::size_t alignment)
    : fd_(fd), buffers_(depth, buffer_bytes, alignment),
      // TRIDENT_FAULT_INJECT=ckpt:write_slow: a slow disk, 20 ms a transfer.
      slow_disk_(fault_armed("ckpt", "write_slow", -1)) {
  for (std::size_t i = 0; i < buffers_.size(); ++i) free_.push_back(buffers_[i]);
  thread_ = std::thread([this] { run(); });
}

WriteBehind::~WriteBehind() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void WriteBehind::throw_if_failed() {
  if (error_) std::rethrow_exception(error_);
}

char* WriteBehind::acquire() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return !free_.empty() || error_; });
  throw_if_failed();
  char* b = free_.back();
  free_.pop_back();
  return b;
}

std::uint64_t WriteBehind::enqueue(Job job) {
  std::uint64_t ticket = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(job));
    ticket = ++submitted_;
  }
  changed_.notify_all();
  return ticket;
}

void WriteBehind::submit(char* buf, std::uint64_t at, std::size_t n) {
  enqueue({buf, {}, fd_, at, n});
}

std::uint64_t WriteBehind::submit_from(char* slot, const char* src, std::uint64_t at,
                                       std::size_t n) {
  return enqueue({slot, {}, fd_, at, n, src});
}

bool WriteBehind::wait_done(std::uint64_t ticket, double timeout_s) {
  std::unique_lock<std::mutex> lock(mutex_);
  return wait_while_progressing(
      lock, changed_, [&] { return done_; }, [&] { return done_ >= ticket || error_; },
      timeout_s);
}

void WriteBehind::submit_copy(int fd, std::vector<char> bytes, std::uint64_t at) {
  const std::size_t n = bytes.size();
  enqueue({nullptr, std::move(bytes), fd, at, n});
}

void WriteBehind::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return (queue_.empty() && !busy_) || error_; });
  throw_if_failed();
}

double WriteBehind::cpu_seconds() {
  std::lock_guard<std::mutex> lock(mutex_);
  return cpu_seconds_;
}

void WriteBehind::run() {
  const double cpu0 = thread_cpu_seconds();
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    // Stops only once the queue is empty: a destructor mid-checkpoint still
    // finishes the writes it was given (the file is discarded anyway).
    changed_.wait(lock, [&] { return !queue_.empty() || stop_; });
    if (queue_.empty()) return;
    Job job = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    const bool skip = bool(error_);  // after a failure, buffers only come back
    lock.unlock();
    std::exception_ptr failed;
    if (slow_disk_) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!skip) {
      try {
        const char* from = job.src ? job.src : job.buf ? job.buf : job.copy.data();
        transfer_all(job.fd, const_cast<char*>(from), job.n, job.at, true);
      } catch (...) {
        failed = std::current_exception();
      }
    }
    const double cpu = thread_cpu_seconds() - cpu0;
    lock.lock();
    cpu_seconds_ = cpu;
    if (failed && !error_) error_ = failed;
    busy_ = false;
    ++done_;
    if (job.buf) free_.push_back(job.buf);
    changed_.notify_all();
  }
}

ReadAhead::ReadAhead(int fd, const std::vector<Transfer>& transfers, const AlignedBuffers& buffers,
                     int readers)
    : fd_(fd), transfers_(transfers), buffers_(buffers), got_(transfers.size()),
      ready_(transfers.size(), 0), readers_(std::size_t(std::max(readers, 1))) {
  for (std::size_t i = 0; i < readers_; ++i) threads_.emplace_back([this, i] { run(i); });
}

ReadAhead::~ReadAhead() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  for (std::thread& t : threads_) t.join();
}

std::pair<const char*, std::size_t> ReadAhead::wait(std::size_t t) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return ready_[t] || failed_at_ <= t; });
  if (!ready_[t]) std::rethrow_exception(error_);
  return {buffers_[t % buffers_.size()], got_[t]};
}

void ReadAhead::release(std::size_t t) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    released_ = t + 1;
  }
  changed_.notify_all();
}

void ReadAhead::run(std::size_t first) {
  for (std::size_t t = first; t < transfers_.size(); t += readers_) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // Transfer t's buffer is free once t - buffers was released.
      changed_.wait(lock, [&] { return stop_ || t < released_ + buffers_.size(); });
      if (stop_ || t > failed_at_) return;
    }
    std::size_t got = 0;
    try {
      got = transfer_all(fd_, buffers_[t % buffers_.size()], transfers_[t].len, transfers_[t].at,
                         false);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (t < failed_at_) failed_at_ = t, error_ = std::current_exception();
      changed_.notify_all();
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      got_[t] = got;
      ready_[t] = 1;
    }
    changed_.notify_all();
  }
}

}  // namespace trident
