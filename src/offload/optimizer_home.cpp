#include "offload/optimizer_home.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <sys/mman.h>

#include "checkpoint/direct_queues.hpp"
#include "core/error.hpp"
#include "offload/swap_file.hpp"

namespace trident {

namespace {

constexpr std::size_t kHostStaging = 3;  // cpu: widened gradients, two parameter blocks

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

std::size_t OptimizerHome::device_elements(const OffloadSection& o, std::size_t n) {
  if (o.optimizer == OffloadTarget::none) return n;
  if (o.optimizer != OffloadTarget::cpu || o.ratio >= 1.0) return 0;
  const auto kept = std::size_t((1.0 - o.ratio) * double(n));
  return std::min(n, kept / 16 * 16);
}

OptimizerHome::ArenaBytes OptimizerHome::arena_bytes(const OffloadSection& o, std::size_t n,
                                                     int kinds, bool memory_is_host) {
  const std::size_t k = std::size_t(kinds), block = block_elements(o) * sizeof(float);
  if (o.optimizer == OffloadTarget::none) return {k * n * sizeof(float), 0};
  if (o.optimizer == OffloadTarget::cpu) {
    const std::size_t device = device_elements(o, n);
    return {k * device * sizeof(float), kHostStaging * std::min(block, (n - device) * sizeof(float))};
  }
  ArenaBytes b;
  b.buffers += std::size_t(kStreamSets) * k * block;
  if (!memory_is_host) b.buffers += k * block;
  return b;
}

std::size_t OptimizerHome::host_bytes(const OffloadSection& o, std::size_t n, int kinds,
                                      DType grads) {
  if (o.optimizer != OffloadTarget::cpu) return 0;
  const std::size_t host = n - device_elements(o, n);
  return std::size_t(kinds) * host * sizeof(float) + host * dtype_size(grads);
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
      offloaded_first_(device_elements(o, n)),
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
    const std::size_t on_host = n - offloaded_first_;
    for (int k = 0; k < kinds && offloaded_first_ > 0; ++k)
      resident_.emplace_back(backend, ledger, MemCategory::optimizer, offloaded_first_);
    for (int k = 0; k < kinds; ++k) host_.push_back(host_floats(on_host));
    host_grads_ = host_floats((on_host * dtype_size(grads) + sizeof(float) - 1) / sizeof(float));
    for (const auto& h : host_) host_state_bytes_ += h.get_deleter().bytes;
    host_state_bytes_ += host_grads_.get_deleter().bytes;
    const std::size_t staged = std::min(block_, on_host);
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
  if (reserved_) ::munmap(reserved_, std::size_t(kinds_) * std::max<std::size_t>(n_, 1) * sizeof(float));
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
  float* state[3] = {};
  if (offloaded_first_ > 0) {  // cpu: the device part first (on CUDA its kernels run meanwhile)
    for (int k = 0; k < kinds_; ++k) state[k] = resident_[std::size_t(k)].f32();
    f(0, offloaded_first_, state);
  }
  for (std::size_t first = offloaded_first_; first < n_; first += block_) {  // in host memory
    for (int k = 0; k < kinds_; ++k) state[k] = host(k, first);
    f(first, std::min(block_, n_ - first), state);
  }
}

// Elements [first, first + count) of a kind to (write) or from `values`: the
// part below offloaded_first_ lives in the arenas, the rest in host memory or
// the swap file.
void OptimizerHome::transfer(bool write, int kind, std::size_t first, std::size_t count,
                             float* values) {
  const std::size_t mid = std::clamp(offloaded_first_, first, first + count);
  if (first < mid) {
    float* resident = resident_[std::size_t(kind)].f32() + first;
    const std::size_t bytes = (mid - first) * sizeof(float);
    if (write) backend_.copy_from_host(resident, values, bytes);
    else backend_.copy_to_host(values, resident, bytes);
  }
  if (mid == first + count) return;
  float* rest = values + (mid - first);
  const std::size_t bytes = (first + count - mid) * sizeof(float);
  if (target_ == OffloadTarget::nvme)
    swap_transfer(write, kind, mid, first + count - mid, reinterpret_cast<char*>(rest));
  else if (write) std::memcpy(host(kind, mid), rest, bytes);
  else std::memcpy(rest, host(kind, mid), bytes);
}

void OptimizerHome::read(int kind, std::size_t first, std::size_t count, float* out) {
  transfer(false, kind, first, count, out);
}

void OptimizerHome::write(int kind, std::size_t first, std::size_t count, const float* in) {
  transfer(true, kind, first, count, const_cast<float*>(in));
}

float* OptimizerHome::open(int kind) {
  if (target_ == OffloadTarget::none) return resident_[std::size_t(kind)].f32();
  if (target_ == OffloadTarget::cpu && backend_.memory_is_host() && offloaded_first_ == 0)
    return host(kind, 0);
  windows_.resize(std::size_t(kinds_));
  Arena& w = windows_[std::size_t(kind)];
  if (w.numel()) return w.f32();  // already open
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

namespace trident {

float* OptimizerHome::reserved(int kind) {
  const std::size_t stride = std::max<std::size_t>(n_, 1);
  if (!reserved_) {
    void* p = ::mmap(nullptr, std::size_t(kinds_) * stride * sizeof(float), PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw RuntimeFailure("checkpoint: cannot reserve address space for "
                                              "offloaded optimizer state");
    reserved_ = static_cast<char*>(p);
  }
  return reinterpret_cast<float*>(reserved_) + std::size_t(kind) * stride;
}

bool OptimizerHome::read_reserved(const void* at, std::size_t bytes, void* out) {
  const std::size_t stride = std::max<std::size_t>(n_, 1);
  const char* p = static_cast<const char*>(at);
  if (!reserved_ || p < reserved_ ||
      p >= reserved_ + std::size_t(kinds_) * stride * sizeof(float))
    return false;
  const std::size_t element = std::size_t(p - reserved_) / sizeof(float);
  read(int(element / stride), element % stride, bytes / sizeof(float), static_cast<float*>(out));
  return true;
}

}  // namespace trident
