// Bulk transfers of one contiguous byte range of a checkpoint file with
// O_DIRECT, past the page cache. On the benchmark machine (a VM with 2 busy
// cores), buffered writes and reads of a fresh 1.5 GB file ran at 0.3 GB/s
// where direct ones of 1-8 MiB ran at 1.1-1.7 GB/s (fio, README
// "Checkpoints"): the page cache costs CPU that a loaded node does not have.
// Data goes through two aligned bounce buffers owned here. While one is on its
// way to or from the disk (on a helper thread), the caller's hook sees the
// other, so checksums overlap the transfers, and never on memory in flight.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <string>
#include <utility>

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
  // copy, the exact bytes then written. Returns once src is copied: the last
  // transfers go on while the caller prepares the next range (one pipeline
  // across all of a file's ranges). Throws RuntimeFailure, also for an
  // earlier range's transfer.
  void write(std::uint64_t at, const char* src, std::size_t len, const PieceFn& piece);
  // Waits for every write in flight; throws if one failed.
  void drain();
  // Reads [at, at + len) into dst (any offset and length: whole blocks around
  // it are read); piece() sees each piece once it is in dst, cut where the
  // range crosses a multiple of kPieceBytes in the file.
  void read(std::uint64_t at, char* dst, std::size_t len, const PieceFn& piece);

 private:
  int fd_ = -1;
  char* bounce_[2] = {nullptr, nullptr};
  std::future<std::size_t> in_flight_[2];  // the last write from each bounce buffer
  std::size_t next_ = 0;                   // the bounce buffer the next piece goes in
};

// Of the element range [lo, hi) of a slice that is one contiguous range of
// its tensor, element lo's bytes at file offset `at`: the sub-range whose
// bytes are whole file blocks (empty, {hi, hi}, when under kMinBytes).
std::pair<std::size_t, std::size_t> direct_range(std::size_t lo, std::size_t hi,
                                                 std::uint64_t at, std::size_t elem_bytes);

}  // namespace trident
