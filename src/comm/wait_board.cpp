#include "comm/wait_board.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <vector>

namespace trident {

MpiWaitBoard::MpiWaitBoard(MPI_Comm world) {
  MPI_Comm_dup(world, &comm_);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  // Some transports have no one-sided support (Open MPI over TCP between
  // nodes): then the board is off everywhere and timeouts say less.
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  int ok = MPI_Win_allocate(kRecordBytes, 1, MPI_INFO_NULL, comm_, &record_, &win_) == MPI_SUCCESS;
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm_);
  if (!ok) {
    if (win_ != MPI_WIN_NULL) MPI_Win_free(&win_);
    win_ = MPI_WIN_NULL;
    return;
  }
  MPI_Win_set_errhandler(win_, MPI_ERRORS_RETURN);
  std::memset(record_, 0, kRecordBytes);
  MPI_Barrier(comm_);  // every record is empty before anyone may read one
}

MpiWaitBoard::~MpiWaitBoard() {
  // Freeing a window synchronises the ranks: while an error unwinds this one
  // (the others may be stuck), leave it to MPI_Abort or MPI_Finalize.
  if (std::uncaught_exceptions() > 0) return;
  if (win_ != MPI_WIN_NULL) MPI_Win_free(&win_);
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiWaitBoard::publish(const std::string& text) {
  if (win_ == MPI_WIN_NULL) return;
  // Local stores into a window are ordered with remote gets by an epoch on it.
  MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank_, 0, win_);
  std::memset(record_, 0, kRecordBytes);
  std::memcpy(record_, text.data(), std::min<std::size_t>(text.size(), kRecordBytes - 1));
  MPI_Win_unlock(rank_, win_);
}

void MpiWaitBoard::waiting(const std::string& what) { publish(what); }

void MpiWaitBoard::done_waiting() { publish(""); }

std::string MpiWaitBoard::elsewhere(const std::string& what) {
  if (win_ == MPI_WIN_NULL) return "";
  std::vector<char> all(std::size_t(size_) * kRecordBytes, 0);
  if (MPI_Win_lock_all(0, win_) != MPI_SUCCESS) return "";
  for (int r = 0; r < size_; ++r)
    if (r != rank_)
      MPI_Get(all.data() + std::size_t(r) * kRecordBytes, kRecordBytes, MPI_CHAR, r, 0,
              kRecordBytes, MPI_CHAR, win_);
  if (MPI_Win_unlock_all(win_) != MPI_SUCCESS) return "";
  const std::string mine = what.substr(0, kRecordBytes - 1);
  std::string out;
  int listed = 0, more = 0;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const std::string theirs(all.data() + std::size_t(r) * kRecordBytes);
    if (theirs == mine) continue;  // waiting with us
    if (listed == kMaxListed) {
      ++more;
      continue;
    }
    out += fmt::format("{}rank {}: {}", listed++ ? "; " : "", r,
                       theirs.empty() ? "not in a collective (computing, or dead)" : theirs);
  }
  if (more) out += fmt::format("; {} more", more);
  return out;
}

}  // namespace trident
