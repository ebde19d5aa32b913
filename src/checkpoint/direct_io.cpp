#include "checkpoint/direct_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "core/error.hpp"

namespace trident {

DirectFile::DirectFile(const std::string& path, bool for_write) {
  fd_ = ::open(path.c_str(), (for_write ? O_WRONLY : O_RDONLY) | O_DIRECT | O_CLOEXEC);
  if (fd_ < 0 || !for_write) return;  // reads make their own queue, per stream
  buffered_fd_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (buffered_fd_ < 0) {
    ::close(fd_);
    fd_ = -1;
    return;
  }
  writes_ = std::make_unique<WriteBehind>(fd_, kQueueDepth, kPieceBytes, kBlock);
#ifdef STATX_DIOALIGN
  struct statx st {};
  if (::statx(fd_, "", AT_EMPTY_PATH, STATX_DIOALIGN, &st) == 0 &&
      (st.stx_mask & STATX_DIOALIGN) && st.stx_dio_mem_align > 0)
    mem_align_ = std::min<std::size_t>(kBlock, st.stx_dio_mem_align);
#endif
}

DirectFile::~DirectFile() {
  writes_.reset();  // before the descriptors go (an error is reported by drain())
  if (buffered_fd_ >= 0) ::close(buffered_fd_);
  if (fd_ >= 0) ::close(fd_);
}

void DirectFile::write(std::uint64_t at, const char* src, std::size_t len, const PieceFn& piece) {
  for (std::size_t from = 0; from < len; from += kPieceBytes) {
    const std::size_t n = std::min(kPieceBytes, len - from);
    char* b = writes_->acquire();
    std::memcpy(b, src + from, n);
    piece(b, from, n);
    writes_->submit(b, at + from, n);
  }
}

void DirectFile::write_buffered(std::uint64_t at, const char* src, std::size_t len,
                                const PieceFn& piece) {
  if (len == 0) return;
  std::vector<char> copy(src, src + len);
  piece(copy.data(), 0, len);
  writes_->submit_copy(buffered_fd_, std::move(copy), at);
}

void DirectFile::drain() { writes_->drain(); }

namespace {

// Transfers of at most `piece` bytes covering the ranges (in `order`, sorted
// by offset) and the gaps under `max_gap` between them: whole blocks.
std::vector<Transfer> plan_transfers(const std::vector<DirectFile::ReadRange>& ranges,
                                     const std::vector<std::size_t>& order, std::size_t block,
                                     std::size_t piece, std::size_t max_gap) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> extents;
  for (std::size_t i : order) {
    const std::uint64_t lo = ranges[i].at / block * block;
    const std::uint64_t hi = (ranges[i].at + ranges[i].len + block - 1) / block * block;
    if (!extents.empty() && lo <= extents.back().second + max_gap)
      extents.back().second = std::max(extents.back().second, hi);
    else
      extents.emplace_back(lo, hi);
  }
  std::vector<Transfer> out;
  for (const auto& [lo, hi] : extents)
    for (std::uint64_t at = lo; at < hi; at += piece)
      out.push_back({at, std::size_t(std::min<std::uint64_t>(piece, hi - at))});
  return out;
}

}  // namespace

void DirectFile::read_ranges(const std::vector<ReadRange>& ranges, const RangePieceFn& piece) {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < ranges.size(); ++i)
    if (ranges[i].len > 0) order.push_back(i);
  if (order.empty()) return;
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return ranges[a].at < ranges[b].at; });
  const std::vector<Transfer> transfers =
      plan_transfers(ranges, order, kBlock, kPieceBytes, kMaxGap);
  const AlignedBuffers buffers(kQueueDepth, kPieceBytes, kBlock);
  std::size_t next = 0;  // in order: the first range not yet read whole
  try {
    ReadAhead ahead(fd_, transfers, buffers, kReaders);  // joined before the buffers go
    for (std::size_t t = 0; t < transfers.size(); ++t) {
      const auto [data, got] = ahead.wait(t);
      const std::uint64_t from = transfers[t].at, to = from + transfers[t].len;
      for (std::size_t i = next; i < order.size() && ranges[order[i]].at < to; ++i) {
        const ReadRange& r = ranges[order[i]];
        const std::uint64_t a = std::max(r.at, from), b = std::min(r.at + r.len, to);
        if (a >= b) continue;
        if (b > from + got)
          throw ReadRangeError(order[i], fmt::format("the file ends at byte {}, before byte {}",
                                                     from + got, b));
        std::memcpy(r.dst + (a - r.at), data + (a - from), b - a);
        piece(order[i], r.dst + (a - r.at), std::size_t(a - r.at), std::size_t(b - a));
      }
      while (next < order.size() && ranges[order[next]].at + ranges[order[next]].len <= to) ++next;
      ahead.release(t);
    }
  } catch (const ReadRangeError&) {
    throw;
  } catch (const RuntimeFailure& e) {  // the reader's: in the first range not read whole
    throw ReadRangeError(order[std::min(next, order.size() - 1)], e.what());
  }
}

std::pair<std::size_t, std::size_t> direct_range(std::size_t lo, std::size_t hi,
                                                 std::uint64_t at, std::size_t esz) {
  const std::pair<std::size_t, std::size_t> none{hi, hi};
  if (at % esz != 0 || lo >= hi) return none;  // no element starts on a block
  const std::size_t head = std::size_t((DirectFile::kBlock - at % DirectFile::kBlock) %
                                       DirectFile::kBlock) / esz;
  if (head >= hi - lo) return none;
  const std::size_t bytes = (hi - lo - head) * esz / DirectFile::kBlock * DirectFile::kBlock;
  if (bytes < DirectFile::kMinBytes) return none;
  return {lo + head, lo + head + bytes / esz};
}

}  // namespace trident
