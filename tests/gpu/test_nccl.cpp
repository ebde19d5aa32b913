// The NCCL backend with one GPU per rank (ctest runs it on 1 rank, and on 2
// where the node has two GPUs): every collective on device buffers, ordering
// after compute and overlap of non-blocking all-reduces, and training on NCCL
// communicators against the CPU.
#include <gtest/gtest.h>
#include <mpi.h>

#include "comm/nccl_communicator.hpp"
#include "gpu/collective_checks.hpp"

using namespace trident;
using namespace trident::testing;

TEST(Nccl, EveryCollectiveOnDeviceBuffers) {
  auto gpu = make_test_gpu();
  NcclCommunicator comm(MPI_COMM_WORLD, "world", *gpu);
  check_collectives(comm, *gpu);
}

TEST(Nccl, OrderedAfterComputeAndOverlapping) {
  auto gpu = make_test_gpu();
  NcclCommunicator comm(MPI_COMM_WORLD, "world", *gpu);
  check_ordering_and_overlap(comm, *gpu);
}

TEST(Nccl, TrainingMatchesTheCpu) {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  auto cpu = make_cpu_backend(1);
  auto gpu = make_test_gpu();
  const std::vector<std::string> sets = {"train.batch=" + std::to_string(2 * world),
                                         "train.micro_batch=2"};
  const auto want = train_losses(MPI_COMM_SELF, {"train.batch=" + std::to_string(2 * world)},
                                 *cpu, "mpi", 10);
  const auto got = train_losses(MPI_COMM_WORLD, sets, *gpu, "nccl", 10);
  for (std::size_t s = 0; s < want.size(); ++s)
    EXPECT_NEAR(got[s], want[s], 1e-4 * std::abs(want[s])) << "step " << s;
}
