#include "app/backends.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <set>
#include <vector>

#include "comm/agree.hpp"
#include "core/error.hpp"
#if TRIDENT_HAVE_CUDA
#include "comm/staged_mpi_communicator.hpp"
#include "compute/cuda/cuda_backend.hpp"
#include "compute/cuda/device.hpp"
#endif
#if TRIDENT_HAVE_NCCL
#include "comm/nccl_communicator.hpp"
#endif

namespace trident {
namespace {

#if TRIDENT_HAVE_CUDA
std::string host_name() {
  std::array<char, 256> b{};
  gethostname(b.data(), b.size() - 1);
  return b.data();
}

// One fixed-size line per rank, gathered on every rank (host memory: MPI).
std::vector<std::string> gather_lines(Communicator& world, const std::string& mine) {
  constexpr std::size_t kWidth = 256;
  std::vector<char> own(kWidth, '\0'), all(kWidth * world.size(), '\0');
  mine.copy(own.data(), kWidth - 1);
  world.all_gather(own.data(), all.data(), kWidth, DType::u8);
  std::vector<std::string> out;
  for (int r = 0; r < world.size(); ++r) out.emplace_back(all.data() + r * kWidth);
  return out;
}

std::unique_ptr<ComputeBackend> make_cuda(const Deck& deck, Grid& grid) {
  CudaBackendOptions o;
  o.device = pick_cuda_device(grid.local_rank(), grid.rank(), host_name());
  o.rank = grid.rank();
  o.allow_tf32 = deck.system.allow_tf32;
  const char* timing = std::getenv("TRIDENT_KERNEL_TIMES");
  o.time_kernels = timing && *timing && std::string(timing) != "0";
  return make_cuda_backend(o);
}

void print_device_map(Grid& grid, const CudaBackend& cuda) {
  constexpr int kShown = 64;  // a large job prints the first ranks only
  const int device = cuda.site().device;
  const auto lines = gather_lines(
      grid.world(), fmt::format("rank {:>4} | {} | device {} | {}", grid.rank(), host_name(),
                                device, cuda_device_summary(device)));
  if (!grid.is_root()) return;
  fmt::print("devices:\n");
  for (int r = 0; r < int(lines.size()) && r < kShown; ++r) fmt::print("  {}\n", lines[r]);
  if (int(lines.size()) > kShown) fmt::print("  ... and {} more ranks\n", lines.size() - kShown);
}

// True when two ranks of the job run on one physical GPU.
bool ranks_share_a_gpu(Grid& grid, const CudaBackend& cuda) {
  const auto ids = gather_lines(
      grid.world(), host_name() + " " + cuda_device_bus_id(cuda.site().device));
  return std::set<std::string>(ids.begin(), ids.end()).size() < ids.size();
}
#endif

}  // namespace

std::unique_ptr<ComputeBackend> make_compute_backend(const Deck& deck, Grid& grid, int threads) {
  std::unique_ptr<ComputeBackend> backend;
  run_agreed(grid.world(), [&] {
#if TRIDENT_HAVE_CUDA
    if (deck.system.device == Device::cuda) {
      backend = make_cuda(deck, grid);
      return;
    }
#endif
    backend = make_cpu_backend(threads);
  });
#if TRIDENT_HAVE_CUDA
  if (auto* cuda = dynamic_cast<CudaBackend*>(backend.get())) print_device_map(grid, *cuda);
#endif
  return backend;
}

CommBackend connect_communicators(const Deck& deck, Grid& grid, ComputeBackend& backend) {
  CommBackend choice = deck.system.comm;
  if (deck.system.device == Device::cpu) return CommBackend::mpi;
#if TRIDENT_HAVE_CUDA
  auto& cuda = dynamic_cast<CudaBackend&>(backend);
  run_agreed(grid.world(), [&] {
    const bool shared = ranks_share_a_gpu(grid, cuda);
    if (choice == CommBackend::automatic)
      choice = shared || !TRIDENT_HAVE_NCCL ? CommBackend::staged : CommBackend::nccl;
    if (choice == CommBackend::nccl && shared)
      throw InputError(fmt::format(
          "{}: [system] comm = \"nccl\" but ranks of this job share a GPU, which NCCL "
          "refuses; launch one rank per GPU or set system.comm = \"staged\"", deck.path));
  });
  if (choice == CommBackend::staged)
    grid.use_communicators([&cuda](MPI_Comm c, std::string name) {
      return make_staged_communicator(c, std::move(name), cuda);
    });
#if TRIDENT_HAVE_NCCL
  if (choice == CommBackend::nccl)
    grid.use_communicators([&cuda](MPI_Comm c, std::string name) {
      return make_nccl_communicator(c, std::move(name), cuda);
    });
#endif
  // mpi: device buffers go to MPI as they are, which needs a CUDA-aware MPI.
#endif
  return choice;
}

}  // namespace trident
