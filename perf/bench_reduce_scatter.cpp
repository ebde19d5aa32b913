// ZeRO's gradient reduce-scatter on MPI: the communicator's (one exchange,
// sums in rank order, src/comm/mpi_ops.cpp) against the MPI library's own,
// non-blocking (MPI_Ireduce_scatter_block + MPI_Wait) and blocking
// (MPI_Reduce_scatter_block), on f32 buffers of the given sizes per rank.
//   mpirun -np N build/perf/bench_reduce_scatter [MiB...] (default 1 4 16 64)
// Each figure is the median over REPEATS (env, default 10) of the slowest
// rank's time, after a barrier; bus bandwidth is (N-1)/N of the buffer over
// it (nccl-tests' busbw). Prints the ratio of Trident's to the faster MPI.
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "comm/mpi_communicator.hpp"

using namespace trident;

namespace {

template <class Op>
double median_seconds(int repeats, Op op) {
  op();  // warm up: connections, registrations, first touch
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    op();
    double took = MPI_Wtime() - t0;
    MPI_Allreduce(MPI_IN_PLACE, &took, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    t.push_back(took);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<double> mibs;
  for (int i = 1; i < argc; ++i) mibs.push_back(std::atof(argv[i]));
  if (mibs.empty()) mibs = {1, 4, 16, 64};
  const char* env = std::getenv("REPEATS");
  const int repeats = env ? std::max(1, std::atoi(env)) : 10;
  auto comm = make_communicator(MPI_COMM_WORLD, "world");
  if (rank == 0) {
    fmt::print("ranks {}, median of {} (slowest rank each), f32 sums\n", size, repeats);
    fmt::print("{:>8} {:>22} {:>22} {:>22} {:>7} {:>10}\n", "MiB/rank", "trident ms (GB/s)",
               "MPI nonblocking", "MPI blocking", "ratio", "max |diff|");
  }
  for (double mib : mibs) {
    const std::size_t count = std::size_t(mib * (1 << 20) / sizeof(float)) / size;
    std::vector<float> send(count * size), mine(count), theirs(count);
    for (std::size_t i = 0; i < send.size(); ++i) send[i] = float((i * 7 + rank * 13) % 101) / 64;
    const int n = int(count);
    const double ours = median_seconds(repeats, [&] {
      comm->reduce_scatter(send.data(), mine.data(), count, DType::f32, ReduceOp::sum);
    });
    const double nonblocking = median_seconds(repeats, [&] {
      MPI_Request r;
      MPI_Ireduce_scatter_block(send.data(), theirs.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r);
      MPI_Wait(&r, MPI_STATUS_IGNORE);
    });
    const double blocking = median_seconds(repeats, [&] {
      MPI_Reduce_scatter_block(send.data(), theirs.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    });
    double diff = 0;  // the sums differ only in their order of addition
    for (std::size_t i = 0; i < count; ++i) diff = std::max(diff, double(std::fabs(mine[i] - theirs[i])));
    MPI_Allreduce(MPI_IN_PLACE, &diff, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    const double bus = double(count) * sizeof(float) * (size - 1);
    auto cell = [&](double s) { return fmt::format("{:.2f} ({:.2f})", 1e3 * s, bus / s / 1e9); };
    if (rank == 0)
      fmt::print("{:>8g} {:>22} {:>22} {:>22} {:>7.2f} {:>10.1e}\n", mib, cell(ours),
                 cell(nonblocking), cell(blocking), std::min(nonblocking, blocking) / ours, diff);
  }
  MPI_Finalize();
  return 0;
}
