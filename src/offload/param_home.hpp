// Where ZeRO-3's parameter shard lives when offload.params moves it off the
// device (ZeRO-Infinity, Rajbhandari et al. 2021, section 5): n elements of
// the weights' type in host memory (cpu) or in a swap file (nvme), in the
// shard's layout. Two ways in and out:
//   staging: before a unit is all-gathered its slice is read into one of a
//     few fixed staging buffers (one sized for the largest slice, the others
//     for any slice but the token embedding's), where the gather reads it;
//     a read can start early (prefetch) so the disk overlaps compute;
//   update: the optimizer streams a range through aligned blocks of
//     offload.block_mb (read ahead, written behind) and changes it in place.
// An asynchronous checkpoint reads it beside the gathers, from its own thread.
// On the CPU backend a cpu home is the backend's own memory: it is gathered
// and updated where it lies, with no staging. What the home adds to the
// arenas is only its buffers (arena_bytes).
#pragma once
#include <cstddef>
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

class ParamHome {
 public:
  static constexpr int kStagingSlots = 3;  // the gather in flight, the prefetched one, a read ahead

  // large / small: elements of the largest slice and of the largest slice
  // that is not the token embedding's (0: no such slice, no buffer). Throws
  // InputError for a swap file that cannot be made (offload/swap_file.hpp).
  ParamHome(const OffloadSection& o, ComputeBackend& backend, MemoryLedger& ledger, std::size_t n,
            DType weights, std::size_t large, std::size_t small, int rank);
  ~ParamHome();

  // What a home adds to the arenas (all of it buffers), exactly.
  static std::size_t arena_bytes(const OffloadSection& o, DType weights, std::size_t large,
                                 std::size_t small, bool memory_is_host);
  std::string warning() const;  // a swap file's I/O fallback, or ""
  // The home itself when the backend can use it (cpu on the CPU backend),
  // else null: then slices pass through staging.
  char* in_place();

  // Starts bringing shard elements [first, first + count) into a free
  // staging buffer under `key`. With may_fail, returns false when none is
  // free; without, drops read-aheads nobody took to make room, and throws
  // if every fitting buffer is held by a gather. Only without in_place().
  bool stage(int key, std::size_t first, std::size_t count, bool may_fail);
  bool holds(int key) const;
  // The staged elements in backend memory (waits for the read); held until
  // release(key).
  const void* staged(int key);
  void release(int key);
  void drop_read_aheads();  // before the home is written: no stale copies

  // f(first', count', params) for pieces covering [first, first + count):
  // params points at element first' in backend memory; what f writes there
  // is stored.
  using RangeFn = std::function<void(std::size_t, std::size_t, void*)>;
  void update(std::size_t first, std::size_t count, const RangeFn& f);
  // Elements [first, first + count) to or from backend memory.
  void load(std::size_t first, std::size_t count, void* out);
  void store(std::size_t first, std::size_t count, const void* in);
  // An asynchronous checkpoint's reader, from the drain's thread while the
  // gathers go on: elements [first, first + count) to host memory. A cpu
  // home is read where it lies; the swap outside the gathers' queue
  // (SwapFile::read_unqueued) through the stream's last buffer, which only
  // update(), load() and store() use: none runs before the checkpoint's
  // release_sources() has ended its reads (the optimizer step comes after).
  void read_beside_gathers(std::size_t first, std::size_t count, void* out);
  // cpu: the shard's bytes in host memory (outside the arenas).
  std::size_t host_bytes() const { return host_ ? host_.get_deleter().bytes : 0; }

 private:
  struct Staging {
    std::size_t capacity = 0;  // elements
    char* host = nullptr;      // nvme: the read lands here (offset: see `skip`)
    Arena device;              // device backends: what the gather reads
    int key = -1;
    bool taken = false;        // staged() was called: a gather reads it
    std::size_t first = 0, count = 0, skip = 0;
  };
  bool direct() const { return target_ == OffloadTarget::cpu && backend_.memory_is_host(); }
  char* host_at(std::size_t element) { return host_.get() + element * w_; }
  Staging* find(int key);
  void wait_read(std::size_t slot);
  void stream(std::size_t first, std::size_t count, const RangeFn& f);
  void in_blocks(std::size_t first, std::size_t count, const RangeFn& f);
  void swap_bytes(bool write, std::uint64_t at, std::size_t n, char* host);

  struct FreeHost {  // no initialisers: default-constructible inside the incomplete class
    std::size_t bytes;
    ComputeBackend* pinned;
    void operator()(char* p) const;
  };
  struct Pinned {
    char* p;
    std::size_t bytes;
  };
  OffloadTarget target_;
  ComputeBackend& backend_;
  MemoryLedger& ledger_;
  std::size_t n_, w_;  // elements, bytes per element
  std::size_t block_bytes_;
  std::unique_ptr<char, FreeHost> host_;  // cpu
  std::unique_ptr<SwapFile> swap_;         // nvme
  std::vector<Staging> staging_;
  std::vector<std::unique_ptr<AlignedBuffers>> host_buffers_;  // nvme: staging, then stream
  Arena device_block_;                                          // device backends: one block
  std::vector<Pinned> pinned_;                                  // page-locked staging
  std::size_t counted_ = 0;                                     // host bytes in the ledger
};

}  // namespace trident
