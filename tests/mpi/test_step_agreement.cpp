// The checkpointer's per-step agreement (train/step_agreement.hpp) on however
// many ranks mpirun starts (run with 4).
#include <gtest/gtest.h>
#include <mpi.h>

#include "comm/mpi_communicator.hpp"
#include "train/step_agreement.hpp"

using namespace trident;

// The checkpointer's per-step agreement: blocking, the flags of this boundary;
// lagged (post-validation), the flags posted at the previous boundary, and
// the final boundary blocking again. Once per boundary either way.
TEST(StepAgreement, LaggedFlagsArriveOneBoundaryLate) {
  auto c = make_communicator(MPI_COMM_WORLD, "world");
  const int r = c->rank(), last = c->size() - 1;
  const StepFlags quiet{};
  const StepFlags signalled = {r == last ? 10 : 0, 0, r == 0 ? 1 : 0};
  {
    StepAgreement now(*c, false);
    EXPECT_EQ(now.at(1, false, signalled), (StepFlags{10, 0, 1}));
    EXPECT_EQ(now.at(1, false, quiet), (StepFlags{10, 0, 1}));  // the same boundary
    EXPECT_EQ(now.at(2, false, quiet), quiet);
  }
  StepAgreement lagged(*c, true);
  EXPECT_EQ(lagged.at(1, false, signalled), quiet);  // nothing posted yet
  lagged.post(signalled);
  EXPECT_EQ(lagged.at(2, false, quiet), (StepFlags{10, 0, 1}));
  lagged.post(quiet);
  EXPECT_EQ(lagged.at(3, true, signalled), (StepFlags{10, 0, 1}));  // final: this boundary's
  lagged.post(quiet);  // in flight when it goes: the destructor waits
}
