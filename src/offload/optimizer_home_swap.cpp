// The nvme home's stream: the swap file read, updated and written back block
// by block through three sets of aligned staging buffers, and the checkpoint
// path's transfers of arbitrary element ranges.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "checkpoint/direct_queues.hpp"
#include "offload/optimizer_home.hpp"
#include "offload/swap_file.hpp"

namespace trident {

// A host block's update in device memory: there and back.
void OptimizerHome::on_device(std::size_t first, std::size_t count, float* const* host,
                              const BlockFn& f, bool write_back) {
  float* dev[3] = {};
  for (int k = 0; k < kinds_; ++k) {
    dev[k] = device_block_.f32() + std::size_t(k) * block_;
    backend_.copy_from_host(dev[k], host[k], count * sizeof(float));
  }
  f(first, count, dev);
  if (!write_back) return;
  for (int k = 0; k < kinds_; ++k) backend_.copy_to_host(host[k], dev[k], count * sizeof(float));
}

void OptimizerHome::stream_swap(const BlockFn& f, bool write_back) {
  const std::size_t blocks = (n_ + block_ - 1) / block_;
  auto buffer = [&](std::size_t b, int k) {
    return (*staging_)[(b % kStreamSets) * std::size_t(kinds_) + std::size_t(k)];
  };
  auto transfer = [&](bool write, std::size_t b) {
    const std::size_t count = std::min(block_, n_ - b * block_);
    const std::size_t len = round_up(count * sizeof(float), SwapFile::kAlign);
    for (int k = 0; k < kinds_; ++k)
      swap_->submit(write, buffer(b, k), len, region(k) + b * block_ * sizeof(float),
                    int(b % kStreamSets));
  };
  if (blocks > 0) transfer(false, 0);
  for (std::size_t b = 0; b < blocks; ++b) {
    if (b + 1 < blocks) {
      swap_->wait(int((b + 1) % kStreamSets));  // block b - 2's write-back left its buffers
      transfer(false, b + 1);
    }
    swap_->wait(int(b % kStreamSets));
    const std::size_t first = b * block_, count = std::min(block_, n_ - first);
    float* state[3] = {};
    for (int k = 0; k < kinds_; ++k) state[k] = reinterpret_cast<float*>(buffer(b, k));
    if (backend_.memory_is_host()) f(first, count, state);
    else on_device(first, count, state, f, write_back);
    if (write_back) transfer(true, b);
  }
  swap_->wait();
}

static bool aligned(const char* p) {
  return reinterpret_cast<std::uintptr_t>(p) % SwapFile::kAlign == 0;
}

// Whole aligned pieces of the swap through the first staging buffer; the
// partial ones at either end are read first, so a write keeps their neighbours.
void OptimizerHome::swap_transfer(bool write, int kind, std::size_t first, std::size_t count,
                                  char* host) {
  char* bounce = (*staging_)[0];
  const std::size_t cap = block_ * sizeof(float);
  std::uint64_t at = region(kind) + first * sizeof(float);
  const std::uint64_t end = at + count * sizeof(float);
  while (at < end) {
    const std::uint64_t base = at / SwapFile::kAlign * SwapFile::kAlign;
    const std::size_t n = std::size_t(std::min<std::uint64_t>(end - at, base + cap - at));
    const std::size_t len = round_up(std::size_t(at - base) + n, SwapFile::kAlign);
    const bool whole = at == base && n == len;
    // Whole blocks read into aligned memory (a checkpoint's staging) go
    // straight there: the drain then sums them without a copy before.
    char* into = !write && whole && aligned(host) ? host : bounce;
    if (!write || !whole) {
      swap_->submit(false, into, len, base, 0);
      swap_->wait();
    }
    if (write) {
      std::memcpy(bounce + (at - base), host, n);
      swap_->submit(true, bounce, len, base, 0);
      swap_->wait();
    } else if (into == bounce) {
      std::memcpy(host, bounce + (at - base), n);
    }
    host += n;
    at += n;
  }
}

}  // namespace trident
