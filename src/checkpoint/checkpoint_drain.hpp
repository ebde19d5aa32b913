// The bulk of an asynchronous checkpoint: this rank's pieces of the file
// copied, summed and written on a thread of its own while training goes on
// (docs/checkpoints.md, "Asynchronous saves"). The file and its datasets were
// created collectively beforehand and the completion (checksums, `complete`,
// rename) is the caller's, on its own thread: this thread calls neither MPI
// nor HDF5, only pwrite (through DirectFile's queue where the file system
// takes O_DIRECT), then fsync.
// Pieces marked in_place are read from the training state itself, which stays
// unchanged until the next optimizer step; before that step the caller calls
// release_sources(), which copies whatever the thread has not read yet. Where
// the state is aligned for direct I/O the disk reads it in place too, and
// release_sources() also waits for those writes in flight (the queue's depth).
// Pieces with a reader (device memory, offloaded state) cannot be read by
// memcpy: the thread reads them in waves through a staging buffer of bounded
// size, and release_sources() waits for or reads those it has not either.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/direct_io.hpp"

namespace trident {

// Reads `bytes` at `src` (not host memory) into `out`; thread-safe with training
// until the next optimizer step.
using PieceReader = std::function<void(const char* src, std::size_t bytes, char* out)>;

// One run of bytes of one dataset, contiguous in memory and in the file.
struct DrainPiece {
  const char* src = nullptr;  // the bytes: training state (in_place) or a copy
  std::size_t bytes = 0;
  std::uint64_t at = 0;       // file offset
  std::uint64_t first = 0;    // global flat index of its first element
  std::uint32_t dataset = 0;  // the writer's dataset index
  std::uint8_t elem_bytes = 4;
  bool direct = false;    // whole file blocks, at most DirectFile::kPieceBytes
  bool in_place = false;  // src is training state: valid until the next optimizer step
  const PieceReader* reader = nullptr;  // set: src is read through it, in a wave
};

class CheckpointDrain {
 public:
  // `direct`: the writer's queue, or null where the file system refuses
  // O_DIRECT (every piece then goes through the page cache from this thread).
  // `names`: the dataset paths, for messages; `step`: for fault injection.
  // `staging`: staging_bytes of host memory for the pieces with a reader, at
  // least the largest of them; the caller's, kept until the drain is gone.
  CheckpointDrain(std::string path, DirectFile* direct, std::vector<DrainPiece> pieces,
                  std::vector<std::string> names, std::size_t datasets, long step,
                  char* staging = nullptr, std::size_t staging_bytes = 0);
  ~CheckpointDrain();  // stops at the next piece (the file stays incomplete)
  CheckpointDrain(const CheckpointDrain&) = delete;
  CheckpointDrain& operator=(const CheckpointDrain&) = delete;

  // Every piece is written and the file synced, or the drain failed.
  bool finished();
  // Waits for finished(); returns the seconds waited. Throws RuntimeFailure
  // naming the dataset the drain is at when no piece is done for timeout_s.
  double wait(double timeout_s);
  // Before the training state changes: waits until at most keep_bytes of the
  // in-place and reader pieces are unread, then copies (reads) those.
  // Returns the seconds spent.
  double release_sources(std::size_t keep_bytes, double timeout_s);
  // While paused the thread starts no piece (the writes queued go on): an
  // optimizer step whose state is on the same disk (offload nvme) then has
  // it to itself. wait() resumes.
  void pause();
  void resume();
  // After finished(): the failure (null if none), per dataset the partial
  // checksum, and the bytes release_sources() copied.
  std::exception_ptr error() const { return error_; }
  const std::vector<std::uint64_t>& sums() const { return sums_; }
  std::size_t copied_bytes() const { return copied_bytes_; }
  // After finished(): the bytes the disk read from the training state itself.
  std::size_t written_in_place() const { return written_in_place_; }
  std::size_t bytes() const { return bytes_; }
  // After finished(): the waves read through the staging, and their bytes.
  std::size_t waves() const { return waves_; }
  std::size_t staged_bytes() const { return staged_bytes_; }
  // After finished(): the CPU time the drain's thread spent (copies, checksums,
  // queueing): on a machine whose cores all compute, training loses at least this.
  double cpu_seconds() const { return cpu_seconds_; }
  // After finished(): the CPU time of the direct-I/O queue's thread (system
  // calls and their waits' bookkeeping; 0 without O_DIRECT, where the drain's
  // own thread writes).
  double write_cpu_seconds() const { return write_cpu_seconds_; }

 private:
  void run();
  // Piece i from staging when `staged`, else from its src, with the in-place
  // pieces after it that continue it in memory and in the file (below
  // `limit`). Returns the pieces written (0: stopped).
  std::size_t write_pieces(std::size_t i, std::size_t limit, const char* staged);
  std::size_t in_place_run_end(std::size_t i, std::size_t limit) const;
  // One transfer's most from training state: 2 requests of a virtio disk's
  // 4 MiB, one system call, one wake-up of the writing thread.
  static constexpr std::size_t kInPlaceWriteBytes = 8u << 20;
  // Reads the pieces with a reader from i on into the staging, as many as it
  // holds; returns the end of the wave (i when stopped).
  std::size_t read_wave(std::size_t i);
  void pause_if_injected(bool mid);
  // Waits while pause()d; false: stopped.
  bool wait_unpaused();
  // The error for a drain stuck for timeout_s (lock held): where it stands.
  std::string no_progress(double timeout_s) const;
  // Waits (lock held) until done(); throws when progress_ stands for timeout_s.
  template <class Done>
  void wait_for_progress(std::unique_lock<std::mutex>& lock, Done done, double timeout_s);

  std::string path_;
  DirectFile* direct_;
  int fd_ = -1;  // buffered writes where direct_ is null; the final fsync
  std::vector<DrainPiece> pieces_;
  std::vector<std::string> names_;
  long step_;
  std::vector<std::uint64_t> sums_;
  std::vector<std::vector<char>> copies_;  // release_sources()'s copies
  char* staging_;
  std::size_t staging_bytes_;
  std::size_t bytes_ = 0, copied_bytes_ = 0, waves_ = 0, staged_bytes_ = 0;
  std::size_t written_in_place_ = 0;
  double cpu_seconds_ = 0, write_cpu_seconds_ = 0;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::size_t next_ = 0;         // pieces [0, next_) have been taken up by the thread
  bool reading_ = false;         // pieces up to next_ - 1 are being copied from their source
  std::size_t unread_in_place_ = 0;  // bytes of in-place pieces from next_ on
  std::size_t unread_staged_ = 0;    // bytes of pieces with a reader from next_ on
  std::size_t progress_ = 0;     // pieces handed to the disk
  std::uint64_t in_flight_ticket_ = 0;  // the last write queued from training state
  std::uint64_t staging_ticket_ = 0;    // the last from the staging (this thread's)
  bool finished_ = false, stop_ = false, released_ = false, paused_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: started once the rest is built
};

}  // namespace trident
