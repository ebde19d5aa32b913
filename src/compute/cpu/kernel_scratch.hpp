// Working memory the CPU kernels hold outside the arenas: packed GEMM
// operands, attention's per-head tiles, 16-bit copies of operands given as
// values. Most of it is kept per thread between calls. Every such buffer is a
// ScratchVector, whose allocator counts its bytes process-wide, so the run's
// memory line shows the peak beside the arenas.
#pragma once
#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

namespace trident::cpu {

struct KernelScratchCount {
  static inline std::atomic<std::size_t> now{0}, peak{0};
  static void add(std::size_t bytes) {
    const std::size_t n = now.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    std::size_t p = peak.load(std::memory_order_relaxed);
    while (n > p && !peak.compare_exchange_weak(p, n, std::memory_order_relaxed)) {
    }
  }
  static void remove(std::size_t bytes) { now.fetch_sub(bytes, std::memory_order_relaxed); }
};

template <class T>
struct ScratchAllocator {
  using value_type = T;
  ScratchAllocator() = default;
  template <class U>
  ScratchAllocator(const ScratchAllocator<U>&) {}
  T* allocate(std::size_t n) {
    T* p = std::allocator<T>().allocate(n);
    KernelScratchCount::add(n * sizeof(T));
    return p;
  }
  void deallocate(T* p, std::size_t n) {
    KernelScratchCount::remove(n * sizeof(T));
    std::allocator<T>().deallocate(p, n);
  }
  template <class U>
  bool operator==(const ScratchAllocator<U>&) const { return true; }
  template <class U>
  bool operator!=(const ScratchAllocator<U>&) const { return false; }
};

template <class T>
using ScratchVector = std::vector<T, ScratchAllocator<T>>;

// The most kernel scratch held at once since the process started (bytes).
inline std::size_t kernel_scratch_peak() { return KernelScratchCount::peak.load(); }

}  // namespace trident::cpu
