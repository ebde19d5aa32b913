#include "comm/wait_board.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <numeric>
#include <thread>

namespace trident {

MpiWaitBoard::MpiWaitBoard(MPI_Comm world) {
  MPI_Comm_dup(world, &comm_);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_);
  int node_size = 1;
  MPI_Comm_size(node_, &node_size);
  int ok = MPI_Win_allocate_shared(kRecordBytes, 1, MPI_INFO_NULL, node_, &record_, &node_win_) ==
           MPI_SUCCESS;
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm_);
  if (!ok) {
    if (node_win_ != MPI_WIN_NULL) MPI_Win_free(&node_win_);
    node_win_ = MPI_WIN_NULL;
    return;  // the board is off everywhere: timeouts say less
  }
  std::memset(record_, 0, kRecordBytes);
  records_.assign(std::size_t(size_) * kRecordBytes, 0);
  // Where each node peer's record lies in this process.
  local_.assign(size_, nullptr);
  std::vector<int> node_ranks(node_size), world_ranks(node_size);
  std::iota(node_ranks.begin(), node_ranks.end(), 0);
  MPI_Group node_group, world_group;
  MPI_Comm_group(node_, &node_group);
  MPI_Comm_group(comm_, &world_group);
  MPI_Group_translate_ranks(node_group, node_size, node_ranks.data(), world_group,
                            world_ranks.data());
  MPI_Group_free(&node_group);
  MPI_Group_free(&world_group);
  for (int i = 0; i < node_size; ++i) {
    MPI_Aint bytes = 0;
    int unit = 1;
    char* base = nullptr;
    MPI_Win_shared_query(node_win_, i, &bytes, &unit, &base);
    local_[world_ranks[i]] = base;
  }
  // Other nodes' records are read with gets. Some transports have no
  // one-sided support (Open MPI over TCP between nodes): then only this
  // node's ranks are named.
  int multi_node = node_size < size_;
  MPI_Allreduce(MPI_IN_PLACE, &multi_node, 1, MPI_INT, MPI_MAX, comm_);
  if (multi_node) {
    int remote = MPI_Win_create(record_, kRecordBytes, 1, MPI_INFO_NULL, comm_, &win_) ==
                 MPI_SUCCESS;
    MPI_Allreduce(MPI_IN_PLACE, &remote, 1, MPI_INT, MPI_MIN, comm_);
    if (!remote && win_ != MPI_WIN_NULL) MPI_Win_free(&win_);
    if (!remote) win_ = MPI_WIN_NULL;
  }
  // One shared passive-target epoch per window for the board's whole life,
  // opened while every rank is inside MPI: a report then needs no lock, and
  // locking a rank that is stuck outside MPI can wait for it forever (MPICH
  // over UCX answers lock requests only inside MPI calls). All locks are shared.
  MPI_Win_lock_all(MPI_MODE_NOCHECK, node_win_);
  if (win_ != MPI_WIN_NULL) {
    MPI_Win_set_errhandler(win_, MPI_ERRORS_RETURN);
    MPI_Win_lock_all(MPI_MODE_NOCHECK, win_);
  }
  MPI_Barrier(comm_);  // every record is empty before anyone may read one
}

MpiWaitBoard::~MpiWaitBoard() {
  // Closing the epochs and freeing the windows synchronise with the other
  // ranks: while an error unwinds this one (the others may be stuck), or after
  // a report left gets pending, leave it to MPI_Abort or MPI_Finalize.
  if (std::uncaught_exceptions() > 0 || reads_pending_) return;
  for (MPI_Win* w : {&win_, &node_win_}) {
    if (*w == MPI_WIN_NULL) continue;
    MPI_Win_unlock_all(*w);
    MPI_Win_free(w);
  }
  if (node_ != MPI_COMM_NULL) MPI_Comm_free(&node_);
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiWaitBoard::publish(const std::string& text) {
  if (node_win_ == MPI_WIN_NULL) return;
  // The last byte stays 0, so a read that races this store still ends in a
  // string (only a rank that is moving can be read mid-update).
  std::memset(record_, 0, kRecordBytes);
  std::memcpy(record_, text.data(), std::min<std::size_t>(text.size(), kRecordBytes - 1));
  MPI_Win_sync(node_win_);  // the stores, visible to node peers and to gets
}

void MpiWaitBoard::waiting(const std::string& what) { publish(what); }

void MpiWaitBoard::done_waiting() { publish(""); }

bool MpiWaitBoard::read_records() {
  MPI_Win_sync(node_win_);  // node peers' latest stores, visible here
  std::vector<MPI_Request> gets;
  bool missed = false;  // a get MPI refused: that rank's record is unknown
  for (int r = 0; r < size_; ++r) {
    char* dst = records_.data() + std::size_t(r) * kRecordBytes;
    if (local_[r]) {
      std::memcpy(dst, local_[r], kRecordBytes);
      continue;
    }
    MPI_Request req = MPI_REQUEST_NULL;
    if (win_ == MPI_WIN_NULL || MPI_Rget(dst, kRecordBytes, MPI_CHAR, r, 0, kRecordBytes,
                                         MPI_CHAR, win_, &req) != MPI_SUCCESS)
      missed = true;
    else
      gets.push_back(req);
  }
  // A transport that serves gets only while the target calls MPI would wait
  // for a stuck rank forever: give up after kReadSeconds, and report less.
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration<double>(kReadSeconds);
  while (!gets.empty()) {
    int done = 0;
    if (MPI_Testall(int(gets.size()), gets.data(), &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
      break;
    if (done) return !missed;
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  reads_pending_ = !gets.empty();
  return gets.empty() && !missed;
}

std::string MpiWaitBoard::elsewhere(const std::string& what) {
  if (node_win_ == MPI_WIN_NULL || reads_pending_) return "";
  const bool remote_read = read_records() && win_ != MPI_WIN_NULL;
  const std::string mine = what.substr(0, kRecordBytes - 1);
  std::string out;
  int listed = 0, more = 0;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || (!local_[r] && !remote_read)) continue;
    const std::string theirs(records_.data() + std::size_t(r) * kRecordBytes);
    if (theirs == mine) continue;  // waiting with us
    if (listed == kMaxListed) {
      ++more;
      continue;
    }
    out += fmt::format("{}rank {}: {}", listed++ ? "; " : "", r,
                       theirs.empty() ? "not in a collective (computing, or dead)" : theirs);
  }
  if (more) out += fmt::format("; {} more", more);
  const bool all_local = std::all_of(local_.begin(), local_.end(), [](auto p) { return p; });
  if (!out.empty() && !remote_read && !all_local) out += "; ranks on other nodes unread";
  return out;
}

}  // namespace trident
