// What every rank must agree on at a step boundary before checkpointing: any
// rank's stop signal, rank 0's clock (checkpoint.minutes), any rank's
// background save still writing. One small all-reduce (max) of three flags
// per step. Under post-validation a step ends without a barrier, and a
// blocking all-reduce here would put one back: there the flags are posted at
// one step's end and read at the next's, so a stop signal or the clock acts
// a step later, and a drained save completes a step later.
#pragma once
#include <array>
#include <cstdint>

#include "comm/communicator.hpp"

namespace trident {

// Stop signal number (0: none), rank 0's clock says save, a save still writing.
using StepFlags = std::array<std::int32_t, 3>;

class StepAgreement {
 public:
  StepAgreement(Communicator& comm, bool lagged) : comm_(comm), lagged_(lagged) {}
  ~StepAgreement();  // waits for flags still in flight
  StepAgreement(const StepAgreement&) = delete;
  StepAgreement& operator=(const StepAgreement&) = delete;

  bool lagged() const { return lagged_; }
  // The flags agreed at the boundary after `done` steps, from this rank's
  // `local` ones: all-reduced now, or (lagged, unless `final`) the ones
  // posted at the previous boundary, zeros at the first. Once per boundary:
  // later calls for the same `done` return the same flags.
  const StepFlags& at(int done, bool final, const StepFlags& local);
  // Lagged: posts this rank's flags for the next boundary to read.
  void post(const StepFlags& local);

 private:
  void finish_posted();

  Communicator& comm_;
  bool lagged_;
  StepFlags agreed_{}, posted_{};
  int agreed_for_ = -1;
  Request posted_request_;
};

}  // namespace trident
