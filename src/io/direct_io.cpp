#include "io/direct_io.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <future>

#include "core/error.hpp"

namespace trident {
namespace {

// Moves n bytes; a read stops early only at the end of the file. Returns the
// bytes moved.
std::size_t transfer_all(int fd, char* buf, std::size_t n, std::uint64_t at, bool write) {
  std::size_t done = 0;
  while (done < n) {
    const ssize_t r = write ? ::pwrite(fd, buf + done, n - done, off_t(at + done))
                            : ::pread(fd, buf + done, n - done, off_t(at + done));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0 && !write) break;
    if (r <= 0)
      throw RuntimeFailure(fmt::format("direct {} of {} bytes at {}: {}", write ? "write" : "read",
                                       n - done, at + done,
                                       r < 0 ? std::strerror(errno) : "no progress"));
    done += std::size_t(r);
  }
  return done;
}

}  // namespace

DirectFile::DirectFile(const std::string& path, bool for_write) {
  fd_ = ::open(path.c_str(), (for_write ? O_WRONLY : O_RDONLY) | O_DIRECT | O_CLOEXEC);
  if (fd_ < 0) return;
  for (char*& b : bounce_) b = static_cast<char*>(std::aligned_alloc(kBlock, kPieceBytes));
  if (!bounce_[0] || !bounce_[1]) ::close(fd_), fd_ = -1;
}

DirectFile::~DirectFile() {
  for (auto& f : in_flight_)
    if (f.valid()) f.wait();  // before its buffer goes (an error is reported by drain())
  if (fd_ >= 0) ::close(fd_);
  for (char* b : bounce_) std::free(b);
}

void DirectFile::write(std::uint64_t at, const char* src, std::size_t len, const PieceFn& piece) {
  for (std::size_t from = 0; from < len; from += kPieceBytes, next_ ^= 1) {
    const std::size_t n = std::min(kPieceBytes, len - from);
    std::future<std::size_t>& slot = in_flight_[next_];
    if (slot.valid()) slot.get();  // this bounce buffer's last write is done
    char* b = bounce_[next_];
    std::memcpy(b, src + from, n);
    piece(b, from, n);
    slot = std::async(std::launch::async, transfer_all, fd_, b, n, at + from, true);
  }
}

void DirectFile::drain() {
  for (auto& slot : in_flight_)
    if (slot.valid()) slot.get();
}

void DirectFile::read(std::uint64_t at, char* dst, std::size_t len, const PieceFn& piece) {
  // Whole blocks around the range; the bytes outside it are dropped.
  const std::uint64_t start = at / kBlock * kBlock;
  const std::uint64_t end = (at + len + kBlock - 1) / kBlock * kBlock;
  std::future<std::size_t> in_flight[2];  // destroyed (joined) before this returns or throws
  auto issue = [&](std::size_t k) {
    const std::uint64_t from = start + k * kPieceBytes;
    if (from < end)
      in_flight[k % 2] = std::async(std::launch::async, transfer_all, fd_, bounce_[k % 2],
                                    std::size_t(std::min<std::uint64_t>(kPieceBytes, end - from)),
                                    from, false);
  };
  issue(0);
  for (std::size_t k = 0; start + k * kPieceBytes < end; ++k) {
    issue(k + 1);  // into the other buffer, consumed in the previous round
    const std::size_t got = in_flight[k % 2].get();
    const std::uint64_t from = std::max(at, start + k * kPieceBytes);
    const std::uint64_t to = std::min(at + len, start + k * kPieceBytes + kPieceBytes);
    if (start + k * kPieceBytes + got < to)
      throw RuntimeFailure(fmt::format("direct read: the file ends before byte {}", to));
    std::memcpy(dst + (from - at), bounce_[k % 2] + (from - start - k * kPieceBytes), to - from);
    piece(dst + (from - at), std::size_t(from - at), std::size_t(to - from));
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
