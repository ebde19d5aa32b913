// The host-staged MPI backend with several ranks sharing one GPU (ctest runs
// 4 ranks): every collective on device buffers, ordering and overlap, and
// training in data- and tensor-parallel layouts (and ZeRO) against the serial
// CPU run, which every rank computes for itself.
#include <gtest/gtest.h>
#include <mpi.h>

#include "comm/staged_mpi_communicator.hpp"
#include "gpu/collective_checks.hpp"

using namespace trident;
using namespace trident::testing;

namespace {

// The first n ranks of the world (others get MPI_COMM_NULL).
MPI_Comm first_ranks(int n) {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm c;
  MPI_Comm_split(MPI_COMM_WORLD, r < n ? 0 : MPI_UNDEFINED, r, &c);
  return c;
}

}  // namespace

TEST(Staged, EveryCollectiveOnDeviceBuffers) {
  auto gpu = make_test_gpu();
  StagedMpiCommunicator comm(MPI_COMM_WORLD, "world", *gpu);
  check_collectives(comm, *gpu);
}

TEST(Staged, OrderedAfterComputeAndOverlapping) {
  auto gpu = make_test_gpu();
  StagedMpiCommunicator comm(MPI_COMM_WORLD, "world", *gpu);
  check_ordering_and_overlap(comm, *gpu);
}

TEST(Staged, LayoutsMatchTheSerialCpuRun) {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  auto cpu = make_cpu_backend(1);
  auto gpu = make_test_gpu();
  const int steps = 10;
  const std::vector<std::string> serial_sets = {"train.batch=4", "train.micro_batch=4"};
  const auto want = train_losses(MPI_COMM_SELF, serial_sets, *cpu, "mpi", steps);
  struct Layout {
    int ranks;
    std::vector<std::string> sets;
  };
  const std::vector<Layout> layouts = {
      {2, {"train.batch=4", "parallel.dp=2"}},
      {4, {"train.batch=4", "parallel.dp=4", "train.micro_batch=1"}},
      {2, {"train.batch=4", "parallel.tp=2", "parallel.dp=1"}},
      {4, {"train.batch=4", "parallel.tp=2", "parallel.dp=2", "parallel.sequence_parallel=true"}},
      {4, {"train.batch=4", "parallel.tp=4", "parallel.dp=1"}},
      {4, {"train.batch=4", "parallel.dp=4", "train.micro_batch=1", "zero.stage=3",
           "zero.persistence_threshold=0"}},
      {2, {"train.batch=4", "parallel.dp=2", "parallel.dp_mode=\"gather\""}},
  };
  for (const Layout& l : layouts) {
    if (l.ranks > world) continue;
    MPI_Comm group = first_ranks(l.ranks);
    if (group == MPI_COMM_NULL) continue;
    const auto got = train_losses(group, l.sets, *gpu, "staged", steps);
    std::string what;
    for (const auto& s : l.sets) what += s + " ";
    for (std::size_t s = 0; s < want.size(); ++s)
      EXPECT_NEAR(got[s], want[s], 1e-4 * std::abs(want[s])) << what << "step " << s;
    MPI_Comm_free(&group);
  }
}
