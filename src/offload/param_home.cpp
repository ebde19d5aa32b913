#include "offload/param_home.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "checkpoint/direct_queues.hpp"
#include "core/error.hpp"
#include "offload/optimizer_home.hpp"
#include "offload/swap_file.hpp"

namespace trident {

namespace {

constexpr std::size_t kAlign = SwapFile::kAlign;
constexpr int kStreamSets = 3;              // blocks being read, updated and written back
constexpr int kStreamTag = ParamHome::kStagingSlots;  // swap tags: staging slot i is tag i

std::size_t round_up(std::size_t x, std::size_t to) { return (x + to - 1) / to * to; }

// An nvme staging buffer: a slice at any offset, read as whole aligned pages.
std::size_t staging_host_bytes(std::size_t elements, std::size_t w) {
  return round_up(elements * w, kAlign) + kAlign;
}

std::size_t stream_block_bytes(const OffloadSection& o) {
  return OptimizerHome::block_elements(o) * sizeof(float);
}

}  // namespace

void ParamHome::FreeHost::operator()(char* p) const {
  if (pinned) pinned->unpin_host(p, bytes);
  std::free(p);
}

std::size_t ParamHome::arena_bytes(const OffloadSection& o, DType weights, std::size_t large,
                                   std::size_t small, bool memory_is_host) {
  if (o.params == OffloadTarget::none || (o.params == OffloadTarget::cpu && memory_is_host))
    return 0;
  const bool nvme = o.params == OffloadTarget::nvme;
  const std::size_t w = dtype_size(weights), block = stream_block_bytes(o);
  std::size_t b = 0;
  for (std::size_t s : {large, small, small}) {
    if (s == 0) continue;
    if (nvme) b += staging_host_bytes(s, w);
    if (!memory_is_host) b += s * w;
  }
  if (nvme) b += std::size_t(kStreamSets) * block;
  if (!memory_is_host) b += block / w * w;
  return b;
}

ParamHome::ParamHome(const OffloadSection& o, ComputeBackend& backend, MemoryLedger& ledger,
                     std::size_t n, DType weights, std::size_t large, std::size_t small, int rank)
    : target_(o.params),
      backend_(backend),
      ledger_(ledger),
      n_(n),
      w_(dtype_size(weights)),
      block_bytes_(stream_block_bytes(o)) {
  ComputeBackend* pin = o.pin_memory ? &backend : nullptr;
  auto host_buffers = [&](int count, std::size_t bytes) {
    host_buffers_.push_back(std::make_unique<AlignedBuffers>(count, bytes, kAlign));
    counted_ += std::size_t(count) * bytes;
    for (int i = 0; pin && i < count; ++i) {
      pinned_.push_back({(*host_buffers_.back())[std::size_t(i)], bytes});
      backend.pin_host(pinned_.back().p, bytes);
    }
    return host_buffers_.back().get();
  };
  if (target_ == OffloadTarget::cpu) {
    const std::size_t bytes = round_up(std::max<std::size_t>(n * w_, 1), kAlign);
    auto* p = static_cast<char*>(std::aligned_alloc(kAlign, bytes));
    if (!p) throw RuntimeFailure("offload.params = \"cpu\": out of host memory");
    std::memset(p, 0, bytes);
    if (pin) backend.pin_host(p, bytes);
    host_ = std::unique_ptr<char, FreeHost>(p, FreeHost{bytes, pin});
    if (direct()) return;  // gathered and updated where it lies
  } else {
    swap_ = std::make_unique<SwapFile>(o.nvme_path, rank, round_up(n * w_, kAlign), o.queue_depth);
  }
  for (std::size_t s : {large, small, small}) {
    if (s == 0) continue;
    Staging st;
    st.capacity = s;
    if (swap_) st.host = (*host_buffers(1, staging_host_bytes(s, w_)))[0];
    if (!backend.memory_is_host()) st.device = Arena(backend, ledger, MemCategory::buffers, s, weights);
    staging_.push_back(std::move(st));
  }
  if (swap_) host_buffers(kStreamSets, block_bytes_);
  if (!backend.memory_is_host())
    device_block_ = Arena(backend, ledger, MemCategory::buffers, block_bytes_ / w_, weights);
  ledger_.allocate(MemCategory::buffers, counted_);
}

ParamHome::~ParamHome() {
  swap_.reset();  // no transfer into the buffers after this
  for (const Pinned& b : pinned_) backend_.unpin_host(b.p, b.bytes);
  ledger_.release(MemCategory::buffers, counted_);
}

std::string ParamHome::warning() const { return swap_ ? swap_->warning() : std::string(); }

char* ParamHome::in_place() { return direct() ? host_.get() : nullptr; }

ParamHome::Staging* ParamHome::find(int key) {
  for (Staging& s : staging_)
    if (s.key == key) return &s;
  return nullptr;
}

bool ParamHome::holds(int key) const {
  return std::any_of(staging_.begin(), staging_.end(), [&](const Staging& s) { return s.key == key; });
}

void ParamHome::wait_read(std::size_t slot) {
  if (swap_) swap_->wait(int(slot));
}

bool ParamHome::stage(int key, std::size_t first, std::size_t count, bool may_fail) {
  if (direct()) throw std::logic_error("offload.params: a home in place has no staging");
  if (find(key)) return true;
  for (int attempt = 0;; ++attempt) {
    Staging* best = nullptr;  // the smallest free buffer that fits
    for (Staging& s : staging_)
      if (s.key < 0 && s.capacity >= count && (!best || s.capacity < best->capacity)) best = &s;
    if (best) {
      best->key = key;
      best->taken = false;
      best->first = first;
      best->count = count;
      if (swap_) {
        const std::uint64_t at = first * w_ / kAlign * kAlign;
        best->skip = std::size_t(first * w_ - at);
        swap_->submit(false, best->host, round_up(best->skip + count * w_, kAlign), at,
                      int(best - staging_.data()));
      }
      return true;
    }
    if (may_fail) return false;
    if (attempt > 0)
      throw std::logic_error("offload.params: every staging buffer is held by a gather");
    drop_read_aheads();
  }
}

const void* ParamHome::staged(int key) {
  Staging* s = find(key);
  if (!s) throw std::logic_error("offload.params: a slice was used before it was staged");
  const char* src = s->host ? s->host + s->skip : host_at(s->first);
  if (!s->taken) {
    wait_read(std::size_t(s - staging_.data()));
    if (!backend_.memory_is_host()) backend_.copy_from_host(s->device.data(), src, s->count * w_);
    s->taken = true;
  }
  return backend_.memory_is_host() ? static_cast<const void*>(src) : s->device.data();
}

void ParamHome::release(int key) {
  if (Staging* s = find(key)) {
    wait_read(std::size_t(s - staging_.data()));
    s->key = -1;
    s->taken = false;
  }
}

void ParamHome::drop_read_aheads() {
  for (Staging& s : staging_)
    if (s.key >= 0 && !s.taken) release(s.key);
}

void ParamHome::update(std::size_t first, std::size_t count, const RangeFn& f) {
  drop_read_aheads();
  if (direct()) return f(first, count, host_at(first));
  if (swap_) return stream(first, count, f);
  in_blocks(first, count, f);
}

// A host range updated in device memory, one block at a time: there and back.
void ParamHome::in_blocks(std::size_t first, std::size_t count, const RangeFn& f) {
  const std::size_t block = device_block_.numel();
  for (std::size_t a = first; a < first + count; a += block) {
    const std::size_t k = std::min(block, first + count - a);
    backend_.copy_from_host(device_block_.data(), host_at(a), k * w_);
    f(a, k, device_block_.data());
    backend_.copy_to_host(host_at(a), device_block_.data(), k * w_);
  }
}

// Whole aligned blocks of the file (so writes never share a page): block
// b + 1 is read while block b is updated and block b - 1 written back.
void ParamHome::stream(std::size_t first, std::size_t count, const RangeFn& f) {
  if (count == 0) return;
  const std::size_t per = block_bytes_ / w_, b0 = first / per, b1 = (first + count - 1) / per + 1;
  AlignedBuffers& buffers = *host_buffers_.back();
  auto buffer = [&](std::size_t b) { return buffers[b % kStreamSets]; };
  auto tag = [](std::size_t b) { return kStreamTag + int(b % kStreamSets); };
  auto transfer = [&](bool write, std::size_t b) {
    const std::size_t k = std::min(per, n_ - b * per);
    swap_->submit(write, buffer(b), round_up(k * w_, kAlign), b * block_bytes_, tag(b));
  };
  transfer(false, b0);
  for (std::size_t b = b0; b < b1; ++b) {
    if (b + 1 < b1) {
      swap_->wait(tag(b + 1));  // block b - 2's write-back left its buffer
      transfer(false, b + 1);
    }
    swap_->wait(tag(b));
    const std::size_t lo = std::max(first, b * per), hi = std::min(first + count, (b + 1) * per);
    char* p = buffer(b) + (lo - b * per) * w_;
    if (backend_.memory_is_host()) {
      f(lo, hi - lo, p);
    } else {
      backend_.copy_from_host(device_block_.data(), p, (hi - lo) * w_);
      f(lo, hi - lo, device_block_.data());
      backend_.copy_to_host(p, device_block_.data(), (hi - lo) * w_);
    }
    transfer(true, b);
  }
  for (int s = 0; s < kStreamSets; ++s) swap_->wait(kStreamTag + s);
}

// Bytes [at, at + n) of the swap through the first stream buffer; the partial
// pages at either end are read first, so a write keeps their neighbours.
void ParamHome::swap_bytes(bool write, std::uint64_t at, std::size_t n, char* host) {
  char* bounce = (*host_buffers_.back())[0];
  const std::uint64_t end = at + n;
  while (at < end) {
    const std::uint64_t base = at / kAlign * kAlign;
    const std::size_t k = std::size_t(std::min<std::uint64_t>(end - at, base + block_bytes_ - at));
    const std::size_t len = round_up(std::size_t(at - base) + k, kAlign);
    if (!write || at != base || k != len) {
      swap_->submit(false, bounce, len, base, kStreamTag);
      swap_->wait(kStreamTag);
    }
    if (write) {
      std::memcpy(bounce + (at - base), host, k);
      swap_->submit(true, bounce, len, base, kStreamTag);
      swap_->wait(kStreamTag);
    } else {
      std::memcpy(host, bounce + (at - base), k);
    }
    host += k;
    at += k;
  }
}

void ParamHome::read_beside_gathers(std::size_t first, std::size_t count, void* out) {
  char* to = static_cast<char*>(out);
  if (!swap_) {
    std::memcpy(to, host_at(first), count * w_);
    return;
  }
  char* bounce = (*host_buffers_.back())[kStreamSets - 1];
  std::uint64_t at = first * w_;
  const std::uint64_t end = at + count * w_;
  while (at < end) {  // whole pages, at most a stream block at a time
    const std::uint64_t base = at / kAlign * kAlign;
    const std::size_t k = std::size_t(std::min<std::uint64_t>(end - at, base + block_bytes_ - at));
    swap_->read_unqueued(bounce, round_up(std::size_t(at - base) + k, kAlign), base);
    std::memcpy(to, bounce + (at - base), k);
    to += k;
    at += k;
  }
}

void ParamHome::load(std::size_t first, std::size_t count, void* out) {
  const std::size_t bytes = count * w_;
  if (!swap_) return backend_.copy_from_host(out, host_at(first), bytes);
  if (backend_.memory_is_host()) return swap_bytes(false, first * w_, bytes, static_cast<char*>(out));
  std::vector<char> h(bytes);
  swap_bytes(false, first * w_, bytes, h.data());
  backend_.copy_from_host(out, h.data(), bytes);
}

void ParamHome::store(std::size_t first, std::size_t count, const void* in) {
  drop_read_aheads();
  const std::size_t bytes = count * w_;
  if (!swap_) return backend_.copy_to_host(host_at(first), in, bytes);
  if (backend_.memory_is_host())
    return swap_bytes(true, first * w_, bytes, static_cast<char*>(const_cast<void*>(in)));
  std::vector<char> h(bytes);
  backend_.copy_to_host(h.data(), in, bytes);
  swap_bytes(true, first * w_, bytes, h.data());
}

}  // namespace trident
