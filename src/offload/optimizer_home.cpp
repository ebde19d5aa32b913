#include "offload/optimizer_home.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "checkpoint/direct_queues.hpp"
#include "core/error.hpp"
#include "offload/swap_file.hpp"

namespace trident {

namespace {

constexpr int kStreamSets = 3;  // blocks being read, updated and written back
constexpr std::size_t kHostStaging = 3;  // cpu: widened gradients, two parameter blocks

std::size_t round_up(std::size_t x, std::size_t to) { return (x + to - 1) / to * to; }

}  // namespace

void OptimizerHome::FreeHost::operator()(float* p) const {
  if (backend) backend->unpin_host(p, bytes);
  std::free(p);
}

std::size_t OptimizerHome::block_elements(const OffloadSection& o) {
  const auto bytes =
      std::size_t(o.block_mb * double(1u << 20)) / SwapFile::kAlign * SwapFile::kAlign;
  return std::max(bytes, SwapFile::kAlign) / sizeof(float);
}

OptimizerHome::ArenaBytes OptimizerHome::arena_bytes(const OffloadSection& o, std::size_t n,
                                                     int kinds, bool memory_is_host) {
  const std::size_t k = std::size_t(kinds), block = block_elements(o) * sizeof(float);
  if (o.optimizer == OffloadTarget::none) return {k * n * sizeof(float), 0};
  if (o.optimizer == OffloadTarget::cpu)
    return {0, kHostStaging * std::min(block, n * sizeof(float))};
  ArenaBytes b;
  b.buffers += std::size_t(kStreamSets) * k * block;
  if (!memory_is_host) b.buffers += k * block;
  return b;
}

std::size_t OptimizerHome::host_bytes(const OffloadSection& o, std::size_t n, int kinds,
                                      DType grads) {
  if (o.optimizer != OffloadTarget::cpu) return 0;
  return std::size_t(kinds) * n * sizeof(float) + n * dtype_size(grads);
}

std::uint64_t OptimizerHome::swap_bytes(const OffloadSection& o, std::size_t n, int kinds) {
  if (o.optimizer != OffloadTarget::nvme) return 0;
  return std::uint64_t(kinds) * round_up(n * sizeof(float), SwapFile::kAlign);
}

OptimizerHome::OptimizerHome(const OffloadSection& o, ComputeBackend& backend,
                             MemoryLedger& ledger, std::size_t n, int kinds, DType grads,
                             int rank)
    : target_(o.optimizer),
      backend_(backend),
      ledger_(ledger),
      n_(n),
      kinds_(kinds),
      block_(block_elements(o)),
      host_grads_(nullptr, FreeHost{}) {
  if (target_ == OffloadTarget::none) {
    for (int k = 0; k < kinds; ++k)
      resident_.emplace_back(backend, ledger, MemCategory::optimizer, n);
    return;
  }
  if (target_ == OffloadTarget::cpu) {
    auto host_floats = [&](std::size_t count) {
      const std::size_t bytes = round_up(std::max<std::size_t>(count, 1) * sizeof(float),
                                         SwapFile::kAlign);
      auto* p = static_cast<float*>(std::aligned_alloc(SwapFile::kAlign, bytes));
      if (!p) throw RuntimeFailure("offload.optimizer = \"cpu\": out of host memory");
      std::memset(p, 0, bytes);
      if (o.pin_memory) backend.pin_host(p, bytes);
      return std::unique_ptr<float, FreeHost>(p, FreeHost{o.pin_memory ? &backend : nullptr, bytes});
    };
    for (int k = 0; k < kinds; ++k) host_.push_back(host_floats(n));
    host_grads_ = host_floats((n * dtype_size(grads) + sizeof(float) - 1) / sizeof(float));
    for (const auto& h : host_) host_state_bytes_ += h.get_deleter().bytes;
    host_state_bytes_ += host_grads_.get_deleter().bytes;
    const std::size_t staged = std::min(block_, n);
    for (std::size_t i = 0; i < kHostStaging; ++i) host_staging_.push_back(host_floats(staged));
    staging_counted_ = kHostStaging * staged * sizeof(float);
    ledger_.allocate(MemCategory::buffers, staging_counted_);
    if (backend.memory_is_host()) {
      host_backend_ = &backend;
    } else {
      own_host_backend_ = make_cpu_backend(0);
      host_backend_ = own_host_backend_.get();
    }
    return;
  }
  if (!backend.memory_is_host())  // each block is updated in device memory
    device_block_ = Arena(backend, ledger, MemCategory::buffers, std::size_t(kinds) * block_);
  region_bytes_ = round_up(n * sizeof(float), SwapFile::kAlign);
  swap_ = std::make_unique<SwapFile>(o.nvme_path, rank, swap_bytes(o, n, kinds), o.queue_depth);
  staging_ = std::make_unique<AlignedBuffers>(kStreamSets * kinds, block_ * sizeof(float),
                                              SwapFile::kAlign);
  staging_counted_ = std::size_t(kStreamSets) * std::size_t(kinds) * block_ * sizeof(float);
  ledger_.allocate(MemCategory::buffers, staging_counted_);
  pinned_ = o.pin_memory;
  if (pinned_)
    for (std::size_t i = 0; i < staging_->size(); ++i)
      backend.pin_host((*staging_)[i], block_ * sizeof(float));
}

OptimizerHome::~OptimizerHome() {
  backend_.wait_copies();  // none may still be reading or writing host memory freed here
  if (staging_) {
    swap_.reset();  // no transfer into the buffers after this
    if (pinned_)
      for (std::size_t i = 0; i < staging_->size(); ++i)
        backend_.unpin_host((*staging_)[i], block_ * sizeof(float));
  }
  ledger_.release(MemCategory::buffers, staging_counted_);
}

std::string OptimizerHome::warning() const { return swap_ ? swap_->warning() : std::string(); }

std::uint64_t OptimizerHome::swap_size() const { return swap_ ? swap_->size() : 0; }

void OptimizerHome::for_blocks(const BlockFn& f, bool write_back) {
  if (target_ == OffloadTarget::none) {
    float* state[3] = {};
    for (int k = 0; k < kinds_; ++k) state[k] = resident_[std::size_t(k)].f32();
    return f(0, n_, state);
  }
  if (target_ == OffloadTarget::nvme) return stream_swap(f, write_back);
  for (std::size_t first = 0; first < n_; first += block_) {  // cpu: in host memory
    float* state[3] = {};
    for (int k = 0; k < kinds_; ++k) state[k] = host(k) + first;
    f(first, std::min(block_, n_ - first), state);
  }
}

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
    if (!write || !whole) {
      swap_->submit(false, bounce, len, base, 0);
      swap_->wait();
    }
    if (write) {
      std::memcpy(bounce + (at - base), host, n);
      swap_->submit(true, bounce, len, base, 0);
      swap_->wait();
    } else {
      std::memcpy(host, bounce + (at - base), n);
    }
    host += n;
    at += n;
  }
}

void OptimizerHome::read(int kind, std::size_t first, std::size_t count, float* out) {
  const std::size_t bytes = count * sizeof(float);
  if (target_ == OffloadTarget::none)
    backend_.copy_to_host(out, resident_[std::size_t(kind)].f32() + first, bytes);
  else if (target_ == OffloadTarget::cpu) std::memcpy(out, host(kind) + first, bytes);
  else swap_transfer(false, kind, first, count, reinterpret_cast<char*>(out));
}

void OptimizerHome::write(int kind, std::size_t first, std::size_t count, const float* in) {
  const std::size_t bytes = count * sizeof(float);
  if (target_ == OffloadTarget::none)
    backend_.copy_from_host(resident_[std::size_t(kind)].f32() + first, in, bytes);
  else if (target_ == OffloadTarget::cpu) std::memcpy(host(kind) + first, in, bytes);
  else swap_transfer(true, kind, first, count, reinterpret_cast<char*>(const_cast<float*>(in)));
}

float* OptimizerHome::open(int kind) {
  if (target_ == OffloadTarget::none) return resident_[std::size_t(kind)].f32();
  if (target_ == OffloadTarget::cpu && backend_.memory_is_host()) return host(kind);
  windows_.resize(std::size_t(kinds_));
  Arena& w = windows_[std::size_t(kind)];
  w = Arena(backend_, window_ledger_, MemCategory::buffers, n_);
  if (backend_.memory_is_host()) {
    read(kind, 0, n_, w.f32());
  } else {
    std::vector<float> h(n_);
    read(kind, 0, n_, h.data());
    backend_.copy_from_host(w.f32(), h.data(), n_ * sizeof(float));
  }
  return w.f32();
}

void OptimizerHome::close(int kind, bool changed) {
  if (std::size_t(kind) >= windows_.size() || !windows_[std::size_t(kind)].numel()) return;
  Arena& w = windows_[std::size_t(kind)];
  if (changed) {
    if (backend_.memory_is_host()) {
      write(kind, 0, n_, w.f32());
    } else {
      std::vector<float> h(n_);
      backend_.copy_to_host(h.data(), w.f32(), n_ * sizeof(float));
      write(kind, 0, n_, h.data());
    }
  }
  w = Arena();
}

}  // namespace trident
