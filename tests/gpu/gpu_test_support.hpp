// Helpers for the GPU tests: a CUDA backend on this rank's device, device
// copies of host vectors, outputs poisoned with NaN (an element a kernel never
// writes then fails the comparison), and the comparison against the CPU.
#pragma once
#include <gtest/gtest.h>

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compute/cuda/cuda_backend.hpp"

namespace trident::testing {

// The device local_rank % count, as the trainer picks it; world rank in errors.
std::unique_ptr<CudaBackend> make_test_gpu();

// Device allocations of one backend, released when this goes out of scope.
class DeviceArrays {
 public:
  explicit DeviceArrays(ComputeBackend& backend) : be_(backend) {}
  ~DeviceArrays();
  DeviceArrays(const DeviceArrays&) = delete;
  DeviceArrays& operator=(const DeviceArrays&) = delete;
  float* upload(const std::vector<float>& h);
  std::int32_t* upload(const std::vector<std::int32_t>& h);
  std::uint16_t* upload(const std::vector<std::uint16_t>& h);  // bf16 bits
  float* poisoned(std::size_t n);  // every element NaN
  float* zeros(std::size_t n);
  std::vector<float> download(const float* d, std::size_t n);

 private:
  void* alloc(std::size_t bytes);
  ComputeBackend& be_;
  std::vector<std::pair<void*, std::size_t>> owned_;
};

// Uniform in [lo, hi), reproducible from the seed.
std::vector<float> random_vector(std::size_t n, std::uint64_t seed, float lo = -1.0f,
                                 float hi = 1.0f);
std::vector<float> nan_vector(std::size_t n);

// The bit patterns of v, so -0 and +0 (and NaN payloads) compare apart.
std::vector<std::uint32_t> float_bits(const std::vector<float>& v);

// The GPU's result against the CPU's: finite wherever the CPU's is, and
// ||gpu - cpu|| / ||cpu|| <= tol.
::testing::AssertionResult matches_cpu(const std::vector<float>& gpu,
                                       const std::vector<float>& cpu, double tol = 1e-5);

// Trains the tiny test deck (with `sets` overrides) on the ranks of `comm`
// with `backend`, and returns the loss of each step. `comms` picks the grid's
// collectives: "mpi" (host buffers only: the CPU backend), "staged" or "nccl".
std::vector<double> train_losses(MPI_Comm comm, const std::vector<std::string>& sets,
                                 ComputeBackend& backend, const std::string& comms, int steps);

}  // namespace trident::testing
