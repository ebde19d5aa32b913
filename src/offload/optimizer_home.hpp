// Where the optimizer state of one ZeRO shard lives (offload.optimizer): the
// Adam moments and, with 16-bit weights, the f32 masters, each n floats in the
// shard's layout.
//   none: arenas in the backend's memory, counted as optimizer state;
//   cpu:  host memory (ZeRO-Offload, Ren et al. 2021), outside the arenas;
//         on the CPU backend that is the memory the arenas use. The update
//         runs there too, on the host's compute backend, reading a host copy
//         of the owned gradients that backward fills slice by slice
//         (host_grads); updated weights go back through two staging blocks
//         that alternate, 16-bit gradients are widened in a third (the
//         staging counts as buffers). offload.ratio < 1 keeps the rest of
//         the shard, its first elements, in the arenas (DeepSpeed's
//         ZeRO-Offload++ "ratio"): the backend updates that part, on CUDA
//         while the host updates its own;
//   nvme: a swap file (ZeRO-Infinity), streamed through the step in blocks
//         of offload.block_mb: block k+1 is read while block k is updated and
//         block k-1 written back (the staging buffers count as buffers).
// The update is the same AdamW in every home (compute/adamw_math.hpp: the
// host's and the device's give the same bits; nvme blocks pass through device
// staging on a device backend), so a run offloads bit-identically to one that
// does not.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compute/backend.hpp"
#include "io/deck.hpp"
#include "memory/arena.hpp"
#include "memory/ledger.hpp"

namespace trident {

class SwapFile;
class AlignedBuffers;

class OptimizerHome {
 public:
  enum Kind : int { exp_avg = 0, exp_avg_sq = 1, masters = 2 };

  // `kinds`: 2 (moments) or 3 (and masters); `grads`: the gradients' type.
  // Throws InputError for a swap file that cannot be made (offload/swap_file.hpp).
  OptimizerHome(const OffloadSection& o, ComputeBackend& backend, MemoryLedger& ledger,
                std::size_t n, int kinds, DType grads, int rank);
  ~OptimizerHome();

  std::size_t size() const { return n_; }
  int kinds() const { return kinds_; }
  OffloadTarget target() const { return target_; }
  // Shard elements [offloaded_first(), n) live offloaded (in host memory,
  // updated there, or in the swap file); those below it in the arenas.
  std::size_t offloaded_first() const { return offloaded_first_; }
  // Elements of a shard of n whose state stays in the arenas with a cpu home
  // and offload.ratio (whole 64-byte lines); n without offload, 0 for nvme.
  static std::size_t device_elements(const OffloadSection& o, std::size_t n);
  std::string warning() const;  // a swap file's I/O fallback, or ""
  std::uint64_t swap_size() const;  // the swap file's bytes (0 without one)
  // Elements per block of the nvme stream (the staging buffers' size).
  static std::size_t block_elements(const OffloadSection& o);
  // What a home of n elements of `kinds` kinds adds to the arenas, exactly
  // (the estimator's figures): resident state as optimizer state; the
  // swap's staging and, on a device backend, one block per kind in device
  // memory as buffers. Offloaded state itself is in none of them.
  struct ArenaBytes {
    std::size_t optimizer = 0, buffers = 0;
  };
  static ArenaBytes arena_bytes(const OffloadSection& o, std::size_t n, int kinds,
                                bool memory_is_host);
  // Host memory outside the arenas: offloaded state and (cpu) the gradients' copy.
  static std::size_t host_bytes(const OffloadSection& o, std::size_t n, int kinds, DType grads);
  // The swap file's size (nvme), 0 otherwise.
  static std::uint64_t swap_bytes(const OffloadSection& o, std::size_t n, int kinds);

  // f(first, count, state) for consecutive blocks covering [0, n): state[k]
  // points at element `first` of kind k where the update runs, backend
  // memory, or host memory for a home that updates_on_host() (cpu: blocks of
  // at most block_elements(), the staging's size); what f writes there is
  // kept. With !write_back f only reads (the swap is not written). A cpu
  // home with a device part gives it first, as one block in backend memory.
  using BlockFn = std::function<void(std::size_t, std::size_t, float* const*)>;
  void for_blocks(const BlockFn& f, bool write_back = true);
  bool updates_on_host() const { return target_ == OffloadTarget::cpu; }
  ComputeBackend& host_backend() { return *host_backend_; }
  // Host staging, staging_elements() floats each: 16-bit gradients widened
  // (0), a block's parameters (1, 2: the one being copied back and the next).
  float* staging_block(int i) { return host_staging_[std::size_t(i)].get(); }
  std::size_t staging_elements() const { return std::min(block_, n_ - offloaded_first_); }
  // cpu: the owned gradients of elements [offloaded_first(), n) in host memory,
  // in the gradients' type.
  void* host_grads() { return host_grads_.get(); }
  // cpu: the bytes of the state and the gradients' copy in host memory.
  std::size_t host_state_bytes() const { return host_state_bytes_; }
  // A resident home's arena of a kind (null when any of it is offloaded).
  Arena* resident(int kind) {
    return target_ == OffloadTarget::none ? &resident_[std::size_t(kind)] : nullptr;
  }
  // Elements [first, first + count) of a kind to or from host memory.
  void read(int kind, std::size_t first, std::size_t count, float* host);
  void write(int kind, std::size_t first, std::size_t count, const float* host);
  // A whole kind in backend memory while a checkpoint reads or writes it
  // (for an offloaded home a window the size of the kind, held until close);
  // close(changed) stores what a load wrote.
  float* open(int kind);
  void close(int kind, bool changed);
  // An asynchronous checkpoint's stand-in for open(): address space the size
  // of a kind that is never touched (reserved, PROT_NONE), so the slices
  // point into it and read_reserved() maps them back to elements, read through
  // read() when the drain comes to them rather than copied whole at the save.
  float* reserved(int kind);
  // Bytes at `at` in a reservation to `out`; false when `at` is not in one.
  // From the drain's thread: only the optimizer step also uses the swap, and
  // the checkpoint's release_sources() ends the reads before it.
  bool read_reserved(const void* at, std::size_t bytes, void* out);

 private:
  float* host(int kind, std::size_t element) {
    return host_[std::size_t(kind)].get() + (element - offloaded_first_);
  }
  std::uint64_t region(int kind) const { return std::uint64_t(kind) * region_bytes_; }
  static constexpr int kStreamSets = 3;  // nvme: blocks being read, updated and written back
  static std::size_t round_up(std::size_t x, std::size_t to) { return (x + to - 1) / to * to; }
  void transfer(bool write, int kind, std::size_t first, std::size_t count, float* values);
  void swap_transfer(bool write, int kind, std::size_t first, std::size_t count, char* host);
  void stream_swap(const BlockFn& f, bool write_back);
  void on_device(std::size_t first, std::size_t count, float* const* host, const BlockFn& f,
                 bool write_back);

  struct FreeHost {
    ComputeBackend* backend = nullptr;
    std::size_t bytes = 0;
    void operator()(float* p) const;
  };
  OffloadTarget target_;
  ComputeBackend& backend_;
  MemoryLedger& ledger_;
  std::size_t n_;
  int kinds_;
  std::size_t block_;  // elements per block
  std::size_t offloaded_first_;  // elements below it have their state in the arenas
  std::vector<Arena> resident_;                         // none; cpu: [0, offloaded_first_)
  std::vector<std::unique_ptr<float, FreeHost>> host_;  // cpu
  std::vector<std::unique_ptr<float, FreeHost>> host_staging_;  // cpu: gradients, parameters
  std::unique_ptr<float, FreeHost> host_grads_;                 // cpu
  std::size_t host_state_bytes_ = 0;                            // cpu: host_ and host_grads_
  std::unique_ptr<ComputeBackend> own_host_backend_;    // cpu on a device backend
  ComputeBackend* host_backend_ = nullptr;
  std::unique_ptr<SwapFile> swap_;                      // nvme
  std::uint64_t region_bytes_ = 0;                      // per kind in the swap file
  std::unique_ptr<AlignedBuffers> staging_;             // nvme: 3 blocks of every kind
  std::size_t staging_counted_ = 0;                     // bytes in the ledger's buffers
  bool pinned_ = false;                                 // staging_ is page-locked
  Arena device_block_;                                  // device backends: one block per kind
  MemoryLedger window_ledger_;                          // checkpoint windows: transient
  std::vector<Arena> windows_;
  char* reserved_ = nullptr;  // kinds_ x n_ floats of address space only
};

}  // namespace trident
