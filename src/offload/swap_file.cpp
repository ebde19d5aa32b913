#include "offload/swap_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <liburing.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "checkpoint/direct_queues.hpp"
#include "core/error.hpp"
#include "core/fault_inject.hpp"

namespace trident {

struct SwapFile::Ring {
  io_uring ring{};
};

namespace {

int open_swap(const std::string& path, bool direct) {
  return ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | (direct ? O_DIRECT : 0),
                0600);
}

}  // namespace

SwapFile::SwapFile(const std::string& dir, int rank, std::uint64_t bytes, int queue_depth)
    : bytes_(bytes), ops_(std::size_t(queue_depth)) {
  const std::string where = fmt::format("offload.nvme_path = \"{}\"", dir);
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw InputError(fmt::format("{}: no such directory; create it or choose a node-local "
                                 "scratch directory that exists", where));
  static std::atomic<int> files{0};  // a rank with several model chunks has one per chunk
  const std::string path = (std::filesystem::path(dir) /
                            fmt::format("trident-swap-{}-rank{}-{}", ::getpid(), rank, files++))
                               .string();
  fd_ = open_swap(path, !fault_armed("swap", "no_direct", rank));
  if (fd_ >= 0 && fault_armed("swap", "no_direct", rank)) {
    ::close(fd_);
    fd_ = -1;
    errno = EINVAL;
  }
  if (fd_ < 0 && errno == EINVAL) {  // the file system refuses O_DIRECT
    direct_ = false;
    warning_ = fmt::format("{} refuses O_DIRECT; the swap goes through the page cache, which "
                           "costs memory and CPU", where);
    ::unlink(path.c_str());
    fd_ = open_swap(path, false);
  }
  if (fd_ < 0)
    throw InputError(fmt::format("{}: cannot create the swap file {}: {}; choose a writable "
                                 "directory", where, path, std::strerror(errno)));
  ::unlink(path.c_str());  // the open descriptor keeps the data; no exit leaves the file
  int err = bytes > 0 ? ::posix_fallocate(fd_, 0, off_t(bytes)) : 0;
  if (fault_armed("swap", "no_space", rank)) err = ENOSPC;
  if (err != 0) {
    ::close(fd_);
    fd_ = -1;
    throw InputError(fmt::format("{}: cannot reserve {:.2f} GB for this rank's swap file ({}); "
                                 "free space there or choose a larger scratch directory",
                                 where, double(bytes) / 1e9, std::strerror(err)));
  }
  io_error_ = fault_armed("swap", "io_error", rank);
  ring_ = std::make_unique<Ring>();
  if (io_uring_queue_init(unsigned(queue_depth), &ring_->ring, 0) < 0) ring_.reset();
}

SwapFile::~SwapFile() {
  try {
    wait();
  } catch (...) {  // the error was reported where it happened, or the run is ending anyway
  }
  if (ring_) io_uring_queue_exit(&ring_->ring);
  if (fd_ >= 0) ::close(fd_);
}

void SwapFile::submit(bool write, char* buf, std::size_t len, std::uint64_t at, int tag) {
  if (!ring_) {  // synchronous: transfer_all throws RuntimeFailure
    transfer_all(fd_, buf, len, at, write);
    return;
  }
  std::size_t slot = 0;
  for (;;) {
    while (slot < ops_.size() && ops_[slot].busy) ++slot;
    if (slot < ops_.size()) break;
    reap_one();
    slot = 0;
  }
  ops_[slot] = Op{write, buf, len, 0, at, tag, true};
  issue(slot);
}

void SwapFile::issue(std::size_t slot) {
  Op& op = ops_[slot];
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_->ring);
  if (!sqe) throw RuntimeFailure("swap file: io_uring submission queue full");
  if (op.write)
    io_uring_prep_write(sqe, fd_, op.buf + op.done, unsigned(op.len - op.done), op.at + op.done);
  else
    io_uring_prep_read(sqe, fd_, op.buf + op.done, unsigned(op.len - op.done), op.at + op.done);
  io_uring_sqe_set_data64(sqe, slot);
  const int r = io_uring_submit(&ring_->ring);
  if (r < 0) throw RuntimeFailure(fmt::format("swap file: io_uring submit: {}", std::strerror(-r)));
}

void SwapFile::reap_one() {
  io_uring_cqe* cqe = nullptr;
  int r;
  while ((r = io_uring_wait_cqe(&ring_->ring, &cqe)) == -EINTR) {
  }
  if (r < 0) throw RuntimeFailure(fmt::format("swap file: io_uring wait: {}", std::strerror(-r)));
  const std::size_t slot = std::size_t(io_uring_cqe_get_data64(cqe));
  const int res = io_error_ ? -EIO : cqe->res;
  io_uring_cqe_seen(&ring_->ring, cqe);
  Op& op = ops_[slot];
  if (res == -EINTR || res == -EAGAIN) return issue(slot);
  if (res <= 0) {
    if (error_.empty())
      error_ = fmt::format("swap file: {} of {} bytes at {}: {}", op.write ? "write" : "read",
                           op.len - op.done, op.at + op.done,
                           res < 0 ? std::strerror(-res) : "end of file");
    op.busy = false;
    return;
  }
  op.done += std::size_t(res);
  if (op.done < op.len) return issue(slot);  // a short transfer: the rest
  op.busy = false;
}

int SwapFile::in_flight(int tag) const {
  int n = 0;
  for (const Op& op : ops_) n += op.busy && (tag < 0 || op.tag == tag);
  return n;
}

void SwapFile::wait(int tag) {
  if (ring_)
    while (in_flight(tag) > 0) reap_one();
  if (!error_.empty()) {
    std::string e;
    e.swap(error_);
    throw RuntimeFailure(e);
  }
}

void SwapFile::read_unqueued(char* buf, std::size_t len, std::uint64_t at) const {
  if (io_error_)
    throw RuntimeFailure(fmt::format("swap file: read of {} bytes at {}: {}", len, at,
                                     std::strerror(EIO)));
  if (transfer_all(fd_, buf, len, at, false) < len)
    throw RuntimeFailure(fmt::format("swap file: read of {} bytes at {}: end of file", len, at));
}

}  // namespace trident
