// One rank's swap file for offloaded state (ZeRO-Infinity, Rajbhandari et al.
// 2021, section 5): created in a node-local directory, preallocated with
// fallocate so a full disk fails at start rather than mid-run, and unlinked
// as soon as it is open, so no exit (clean, error or crash) leaves it behind.
// Transfers go through io_uring with O_DIRECT, up to queue_depth at the disk;
// a file system that refuses O_DIRECT (some network and FUSE ones; tmpfs
// before Linux 6.6) gets buffered I/O and a warning, a kernel without
// io_uring synchronous pread/pwrite.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace trident {

class SwapFile {
 public:
  static constexpr std::size_t kAlign = 4096;  // offsets, lengths and buffers: multiples

  // Throws InputError naming `dir` and the fix: missing, read-only, no room.
  SwapFile(const std::string& dir, int rank, std::uint64_t bytes, int queue_depth);
  ~SwapFile();
  SwapFile(const SwapFile&) = delete;
  SwapFile& operator=(const SwapFile&) = delete;

  std::uint64_t size() const { return bytes_; }
  bool direct() const { return direct_; }
  bool uring() const { return ring_ != nullptr; }
  std::string warning() const { return warning_; }  // why the I/O is not direct, or ""

  // Queues a transfer of buf[0, len) at `at` (aligned), tagged so wait(tag)
  // can wait for a group; waits first while queue_depth are in flight.
  void submit(bool write, char* buf, std::size_t len, std::uint64_t at, int tag);
  // Waits until no transfer tagged `tag` (or any, with -1) is in flight.
  // Throws RuntimeFailure for a failed transfer.
  void wait(int tag = -1);
  // Reads buf[0, len) at `at` (aligned) at once, outside the queue: pread
  // uses no shared state (not the queue, nor the file offset), so another
  // thread may read while this one submits and waits.
  void read_unqueued(char* buf, std::size_t len, std::uint64_t at) const;

 private:
  struct Op {
    bool write = false;
    char* buf = nullptr;
    std::size_t len = 0, done = 0;
    std::uint64_t at = 0;
    int tag = -1;
    bool busy = false;
  };
  void issue(std::size_t slot);
  void reap_one();  // completes one transfer (resubmitting a short one's rest)
  int in_flight(int tag) const;

  std::uint64_t bytes_ = 0;
  int fd_ = -1;
  bool direct_ = true;
  std::string warning_;
  struct Ring;
  std::unique_ptr<Ring> ring_;  // null: synchronous transfers
  std::vector<Op> ops_;
  std::string error_;     // first failure, reported by wait()
  bool io_error_ = false;  // fault injection: every transfer fails with EIO
};

}  // namespace trident
