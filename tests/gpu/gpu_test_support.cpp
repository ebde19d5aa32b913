#include "gpu/gpu_test_support.hpp"

#include <mpi.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "comm/staged_mpi_communicator.hpp"
#include "compute/cuda/device.hpp"
#include "io/deck.hpp"
#include "io/token_shard.hpp"
#include "support/test_support.hpp"
#include "train/trainer.hpp"
#if TRIDENT_HAVE_NCCL
#include "comm/nccl_communicator.hpp"
#endif

namespace trident::testing {

std::unique_ptr<CudaBackend> make_test_gpu() {
  int rank = 0, local = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local);
  MPI_Comm_free(&node);
  CudaBackendOptions o;
  o.device = pick_cuda_device(local, rank, "this node");
  o.rank = rank;
  return make_cuda_backend(o);
}

DeviceArrays::~DeviceArrays() {
  for (auto& [p, n] : owned_) be_.release(p, n);
}

void* DeviceArrays::alloc(std::size_t bytes) {
  void* p = be_.allocate(bytes);
  owned_.emplace_back(p, bytes);
  return p;
}

float* DeviceArrays::upload(const std::vector<float>& h) {
  auto* d = static_cast<float*>(alloc(h.size() * sizeof(float)));
  be_.copy_from_host(d, h.data(), h.size() * sizeof(float));
  return d;
}

std::int32_t* DeviceArrays::upload(const std::vector<std::int32_t>& h) {
  auto* d = static_cast<std::int32_t*>(alloc(h.size() * sizeof(std::int32_t)));
  be_.copy_from_host(d, h.data(), h.size() * sizeof(std::int32_t));
  return d;
}

std::uint16_t* DeviceArrays::upload(const std::vector<std::uint16_t>& h) {
  auto* d = static_cast<std::uint16_t*>(alloc(h.size() * sizeof(std::uint16_t)));
  be_.copy_from_host(d, h.data(), h.size() * sizeof(std::uint16_t));
  return d;
}

float* DeviceArrays::poisoned(std::size_t n) { return upload(nan_vector(n)); }

float* DeviceArrays::zeros(std::size_t n) { return upload(std::vector<float>(n, 0.0f)); }

std::vector<float> DeviceArrays::download(const float* d, std::size_t n) {
  std::vector<float> h(n);
  be_.copy_to_host(h.data(), d, n * sizeof(float));
  return h;
}

std::vector<float> random_vector(std::size_t n, std::uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

std::vector<float> nan_vector(std::size_t n) {
  return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN());
}

std::vector<std::uint32_t> float_bits(const std::vector<float>& v) {
  std::vector<std::uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

::testing::AssertionResult matches_cpu(const std::vector<float>& gpu,
                                       const std::vector<float>& cpu, double tol) {
  if (gpu.size() != cpu.size())
    return ::testing::AssertionFailure() << "sizes differ: " << gpu.size() << " vs " << cpu.size();
  for (std::size_t i = 0; i < cpu.size(); ++i)
    if (std::isfinite(cpu[i]) && !std::isfinite(gpu[i]))
      return ::testing::AssertionFailure()
             << "element " << i << " is " << gpu[i] << " on the GPU (never written?), "
             << cpu[i] << " on the CPU";
  const double d = rel_diff(gpu.data(), cpu.data(), cpu.size());
  if (d > tol)
    return ::testing::AssertionFailure() << "relative difference " << d << " > " << tol;
  return ::testing::AssertionSuccess() << "relative difference " << d;
}

std::vector<double> train_losses(MPI_Comm comm, const std::vector<std::string>& sets,
                                 ComputeBackend& backend, const std::string& comms, int steps) {
  static std::string dir;
  if (dir.empty()) {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    dir = scratch_dir("gpu_r" + std::to_string(r));
    make_text_shard(dir, "train.bin", 60000);
    make_text_shard(dir, "val.bin", 4000);
  }
  const std::string text = tiny_deck(dir + "/train.bin", dir + "/val.bin",
                                     "steps = " + std::to_string(steps) + "\n");
  Deck deck = parse_deck(text, "gpu_test.toml", sets);
  int world = 0;
  MPI_Comm_size(comm, &world);
  Grid grid(comm, resolve_layout(deck, world));
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  if (comms == "staged")
    grid.use_communicators([cuda](MPI_Comm c, std::string name) {
      return make_staged_communicator(c, std::move(name), *cuda);
    });
#if TRIDENT_HAVE_NCCL
  if (comms == "nccl")
    grid.use_communicators([cuda](MPI_Comm c, std::string name) {
      return make_nccl_communicator(c, std::move(name), *cuda);
    });
#endif
  MemoryLedger ledger;
  TokenDataset train(deck.data.train, deck.model.seq_len, "data.train");
  Trainer trainer(deck, grid, backend, ledger, train, nullptr);
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) losses.push_back(trainer.step(s).loss);
  return losses;
}

}  // namespace trident::testing
