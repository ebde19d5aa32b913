// The job's wait board: one small record per rank, holding the operation the
// rank is blocked in ("data all_reduce #31 (...)") or nothing. A rank whose
// wait times out reads every record and names the ranks that are somewhere
// else, so a hang points at the rank that never arrived. The other ranks need
// not call MPI: records on this node are read from shared memory, those on
// other nodes with one-sided gets.
#pragma once
#include <mpi.h>

#include <string>
#include <vector>

#include "comm/communicator.hpp"

namespace trident {

class MpiWaitBoard final : public WaitObserver {
 public:
  static constexpr int kRecordBytes = 96;  // an operation's description, cut to fit
  static constexpr int kMaxListed = 8;     // ranks named in one report
  static constexpr double kReadSeconds = 2.0;  // longest a report waits for remote records
  explicit MpiWaitBoard(MPI_Comm world);  // collective over `world`
  ~MpiWaitBoard() override;
  MpiWaitBoard(const MpiWaitBoard&) = delete;
  MpiWaitBoard& operator=(const MpiWaitBoard&) = delete;

  void waiting(const std::string& what) override;
  void done_waiting() override;
  std::string elsewhere(const std::string& what) override;

 private:
  void publish(const std::string& text);
  bool read_records();  // every record into records_; false if a remote one is unknown
  MPI_Comm comm_ = MPI_COMM_NULL, node_ = MPI_COMM_NULL;
  MPI_Win node_win_ = MPI_WIN_NULL;  // this node's records, in shared memory
  MPI_Win win_ = MPI_WIN_NULL;       // the same records to other nodes (none on one node)
  char* record_ = nullptr;           // this rank's record
  std::vector<const char*> local_;   // each world rank's record if on this node, else null
  std::vector<char> records_;        // what a report read; remote gets may still land in it
  bool reads_pending_ = false;       // a report gave up on gets that may never complete
  int rank_ = 0, size_ = 1;
};

}  // namespace trident
