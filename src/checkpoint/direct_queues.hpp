// The helper threads behind DirectFile. WriteBehind writes filled buffers in
// the order given while the caller fills the next ones; ReadAhead reads a
// list of transfers into buffers ahead of the caller's use. Either keeps the
// disk busy while the caller copies and sums, up to `depth` buffers ahead.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace trident {

// Moves n bytes at file offset `at`; a read stops early only at the end of
// the file. Returns the bytes moved; throws RuntimeFailure.
std::size_t transfer_all(int fd, char* buf, std::size_t n, std::uint64_t at, bool write);

// `count` buffers of `bytes`, aligned for O_DIRECT.
class AlignedBuffers {
 public:
  AlignedBuffers(int count, std::size_t bytes, std::size_t alignment);
  char* operator[](std::size_t i) const { return buffers_[i].get(); }
  std::size_t size() const { return buffers_.size(); }

 private:
  struct Free {
    void operator()(char* p) const;
  };
  std::vector<std::unique_ptr<char, Free>> buffers_;
};

class WriteBehind {
 public:
  WriteBehind(int fd, int depth, std::size_t buffer_bytes, std::size_t alignment);
  ~WriteBehind();  // finishes the queued writes (errors are drain()'s to report)
  // A buffer to fill; waits while all are queued. Throws an earlier write's failure.
  char* acquire();
  // Queues buf[0, n) for writing at `at`; buf came from acquire().
  void submit(char* buf, std::uint64_t at, std::size_t n);
  // Queues src[0, n) (aligned for O_DIRECT; unchanged until the write is
  // done) for writing at `at`, holding `slot` (from acquire()) meanwhile, so
  // the writes in flight stay within the depth. Returns the job's ticket.
  std::uint64_t submit_from(char* slot, const char* src, std::uint64_t at, std::size_t n);
  // Waits until the job of `ticket` and all before it are done (or one
  // failed: the caller's source may then change, the file is lost anyway).
  // false: no job finished for timeout_s.
  bool wait_done(std::uint64_t ticket, double timeout_s);
  // Queues `bytes` (any offset and length) for writing at `at` through
  // descriptor `fd` (one without O_DIRECT), in order with the rest.
  void submit_copy(int fd, std::vector<char> bytes, std::uint64_t at);
  // Waits until every queued write is done; throws the first failure.
  void drain();
  // The CPU time the writing thread has used so far.
  double cpu_seconds();

 private:
  struct Job {
    char* buf = nullptr;      // one of buffers_, or null: `copy` goes through `fd`
    std::vector<char> copy;
    int fd = -1;
    std::uint64_t at = 0;
    std::size_t n = 0;
    const char* src = nullptr;  // set: written from here; buf is only a slot
  };
  std::uint64_t enqueue(Job job);  // returns its ticket
  void run();
  void throw_if_failed();  // with mutex_ held

  int fd_;
  AlignedBuffers buffers_;
  const bool slow_disk_;  // fault injection: each transfer waits 20 ms first
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<char*> free_;
  std::deque<Job> queue_;
  bool busy_ = false, stop_ = false;
  std::uint64_t submitted_ = 0, done_ = 0;  // jobs; tickets count from 1
  double cpu_seconds_ = 0;  // the thread's, after its last job
  std::exception_ptr error_;
  std::thread thread_;  // last: started once the rest is built
};

struct Transfer {
  std::uint64_t at = 0;
  std::size_t len = 0;
};

class ReadAhead {
 public:
  // Starts reading transfers[0], [1], ... into buffers of at least their
  // length, on `readers` threads: transfer t on thread t % readers, so up to
  // `readers` transfers are at the disk at once.
  ReadAhead(int fd, const std::vector<Transfer>& transfers, const AlignedBuffers& buffers,
            int readers);
  ~ReadAhead();  // stops the readers (transfers not yet read are dropped)
  // Waits for transfer t: its buffer and the bytes read (fewer at the end of
  // the file). Throws the failure of a transfer at or before t.
  std::pair<const char*, std::size_t> wait(std::size_t t);
  // The caller is done with transfers up to t (released in order).
  void release(std::size_t t);

 private:
  void run(std::size_t first);

  int fd_;
  const std::vector<Transfer>& transfers_;
  const AlignedBuffers& buffers_;
  std::vector<std::size_t> got_;
  std::vector<char> ready_;  // per transfer
  std::mutex mutex_;
  std::condition_variable changed_;
  const std::size_t readers_;
  std::size_t released_ = 0, failed_at_ = SIZE_MAX;
  bool stop_ = false;
  std::exception_ptr error_;  // of transfer failed_at_
  std::vector<std::thread> threads_;  // last: started once the rest is built
};

}  // namespace trident
