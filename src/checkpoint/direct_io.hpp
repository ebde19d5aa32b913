// Bulk transfers of checkpoint data with O_DIRECT, past the page cache: the
// write queue and the read stream. On the benchmark machine (a VM with 2 busy
// cores), buffered writes and reads of a fresh 1.5 GB file ran at 0.3 GB/s
// where direct ones of 1-8 MiB ran at 1.1-1.7 GB/s (fio, perf/RESULTS.md):
// the page cache costs CPU that a loaded node does not have.
// Data goes through aligned bounce buffers. While one is on its way to or from
// the disk (on a helper thread), the caller's hook sees another, so checksums
// overlap the transfers, and never run on memory in flight.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "checkpoint/direct_queues.hpp"

namespace trident {

class DirectFile {
 public:
  static constexpr std::size_t kBlock = 4096;           // offsets and lengths: multiples
  static constexpr std::size_t kPieceBytes = 2u << 20;  // bytes per transfer
  static constexpr std::size_t kMinBytes = 32u << 10;   // smaller writes go buffered

  // Opens `path` (existing) for direct writes or reads; !ok() where the file
  // system refuses O_DIRECT (tmpfs, some network ones): callers fall back.
  DirectFile(const std::string& path, bool for_write);
  ~DirectFile();
  DirectFile(const DirectFile&) = delete;
  DirectFile& operator=(const DirectFile&) = delete;
  bool ok() const { return fd_ >= 0; }

  // piece(data, from, bytes): bytes [from, from + bytes) of the range at data.
  using PieceFn = std::function<void(const char*, std::size_t, std::size_t)>;
  // Writes src[0, len) at file offset `at`; piece() sees each piece's bounce
  // copy, the exact bytes then written. Returns once src is copied: up to
  // kQueueDepth pieces go on being written while the caller prepares the next
  // range (one queue across all of a file's ranges). Throws RuntimeFailure,
  // also for an earlier range's transfer.
  void write(std::uint64_t at, const char* src, std::size_t len, const PieceFn& piece);
  // Writes src[0, len) at `at` (any offset and length: the ends of a range,
  // small tensors) through the page cache, queued in order with the direct
  // writes: on ext4 a buffered write waits for the inode lock an allocating
  // direct write holds for its whole transfer, so the caller must not make it.
  // piece() sees the copy written.
  void write_buffered(std::uint64_t at, const char* src, std::size_t len, const PieceFn& piece);
  // Waits for every write in flight; throws if one failed.
  void drain();
  // The CPU time the write queue's thread has used (its system calls).
  double write_cpu_seconds() { return writes_->cpu_seconds(); }
  // For a writer that copies into the bounce buffers itself (an asynchronous
  // checkpoint's drain copies its sources under its own lock): a free buffer
  // of kPieceBytes (waits while all are queued; throws an earlier failure),
  // queued for n bytes (whole blocks) at `at`; and a copy for the page cache.
  char* acquire_buffer() { return writes_->acquire(); }
  void submit_buffer(char* buf, std::uint64_t at, std::size_t n) { writes_->submit(buf, at, n); }
  // Whether a transfer may read `src` in place: the address is aligned as
  // the file's direct I/O needs (statx's dio_mem_align; kBlock where the
  // kernel does not say).
  bool can_write_from(const char* src) const {
    return reinterpret_cast<std::uintptr_t>(src) % mem_align_ == 0;
  }
  // Queues src[0, n) (can_write_from; unchanged until written) at `at`,
  // holding the buffer `slot` from acquire_buffer() until then; the ticket
  // is for written().
  std::uint64_t submit_from(char* slot, const char* src, std::uint64_t at, std::size_t n) {
    return writes_->submit_from(slot, src, at, n);
  }
  // Waits until the write of `ticket` (and every one before it) is done or
  // failed; false when none finished for timeout_s.
  bool written(std::uint64_t ticket, double timeout_s) {
    return writes_->wait_done(ticket, timeout_s);
  }
  void submit_buffered(std::vector<char> bytes, std::uint64_t at) {
    writes_->submit_copy(buffered_fd_, std::move(bytes), at);
  }
  // One byte range of the file to read into memory.
  struct ReadRange {
    std::uint64_t at = 0;
    std::size_t len = 0;
    char* dst = nullptr;
  };
  // piece(range, data, from, bytes): bytes [from, from + bytes) of ranges[range]
  // are in its dst (at data). Cuts fall on blocks of the file.
  using RangePieceFn = std::function<void(std::size_t, const char*, std::size_t, std::size_t)>;
  // Reads every range (any offsets and lengths; not overlapping) as one
  // stream in file order: ranges less than kMaxGap apart are read with the
  // bytes between them, so a whole checkpoint is one sequential read, with
  // kQueueDepth transfers queued ahead on kReaders threads while the caller
  // copies and sums. Throws ReadRangeError (the first range not read whole)
  // when the file ends early or a read fails.
  void read_ranges(const std::vector<ReadRange>& ranges, const RangePieceFn& piece);
  static constexpr std::size_t kMaxGap = 1u << 20;
  // Buffers queued between the caller and the disk, each way: 16 MiB keep
  // the disk busy while the caller creates a run of small datasets.
  static constexpr int kQueueDepth = 8;
  // Reads at the disk at once per stream: with one, the disk idles from each
  // read's end until its thread, sharing a busy core, issues the next (2 ranks
  // on 2 cores reading 1.49 GB: 0.77-1.00 GB/s on one reader, 0.89-1.00 on
  // two, in alternating runs).
  static constexpr int kReaders = 2;

 private:
  int fd_ = -1;
  int buffered_fd_ = -1;                 // for writing only: the same file, no O_DIRECT
  std::size_t mem_align_ = kBlock;       // of memory a transfer reads from
  std::unique_ptr<WriteBehind> writes_;  // for writing only
};

// A read_ranges failure, with the range it stopped in.
struct ReadRangeError : RuntimeFailure {
  ReadRangeError(std::size_t r, const std::string& what) : RuntimeFailure(what), range(r) {}
  std::size_t range;
};

// Of the element range [lo, hi) of a slice that is one contiguous range of
// its tensor, element lo's bytes at file offset `at`: the sub-range whose
// bytes are whole file blocks (empty, {hi, hi}, when under kMinBytes).
std::pair<std::size_t, std::size_t> direct_range(std::size_t lo, std::size_t hi,
                                                 std::uint64_t at, std::size_t elem_bytes);

}  // namespace trident
