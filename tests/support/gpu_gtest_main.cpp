// GoogleTest main for the GPU tests (label gpu): as mpi_gtest_main, but first
// every rank looks for a CUDA device. Without one the test exits 77, which
// ctest reports as skipped (SKIP_RETURN_CODE 77), after saying why. With the
// environment variable TRIDENT_GPU_PER_RANK=1 it also skips unless each rank
// of a node has a GPU of its own (NCCL refuses two ranks on one device).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "compute/cuda/device.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::string why;
  int devices = trident::cuda_device_count(&why);
  const char* per_rank = std::getenv("TRIDENT_GPU_PER_RANK");
  if (per_rank && std::string(per_rank) == "1") {
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int local_size = 1;
  MPI_Comm_size(node, &local_size);
  MPI_Comm_free(&node);
  if (devices > 0 && devices < local_size) {
    why = std::to_string(local_size) + " ranks on a node with " + std::to_string(devices) +
          " GPU(s); this test needs one GPU per rank";
    devices = 0;
  }
  }
  int fewest = devices;
  MPI_Allreduce(MPI_IN_PLACE, &fewest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (fewest == 0) {
    if (devices == 0) std::printf("SKIP (rank %d): %s\n", rank, why.c_str());
    std::fflush(stdout);
    MPI_Finalize();
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return failed;
}
