// The job's wait board: one small record per rank in an MPI window, holding
// the operation the rank is blocked in ("data all_reduce #31 (...)") or
// nothing. A rank whose wait times out reads every record (passive-target
// one-sided gets: the other ranks need not call MPI) and names the ranks that
// are somewhere else, so a hang points at the rank that never arrived.
#pragma once
#include <mpi.h>

#include <string>

#include "comm/communicator.hpp"

namespace trident {

class MpiWaitBoard final : public WaitObserver {
 public:
  static constexpr int kRecordBytes = 96;  // an operation's description, cut to fit
  static constexpr int kMaxListed = 8;     // ranks named in one report
  explicit MpiWaitBoard(MPI_Comm world);  // collective over `world`
  ~MpiWaitBoard() override;
  MpiWaitBoard(const MpiWaitBoard&) = delete;
  MpiWaitBoard& operator=(const MpiWaitBoard&) = delete;

  void waiting(const std::string& what) override;
  void done_waiting() override;
  std::string elsewhere(const std::string& what) override;

 private:
  void publish(const std::string& text);
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Win win_ = MPI_WIN_NULL;
  char* record_ = nullptr;  // this rank's record, inside the window
  int rank_ = 0, size_ = 1;
};

}  // namespace trident
