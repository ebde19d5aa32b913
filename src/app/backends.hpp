// Which compute backend and which collectives a run uses (deck keys
// system.device and system.comm). The only place that knows which backends
// exist; the model and the parallel code see the two seams.
#pragma once
#include <memory>
#include <string>

#include "compute/backend.hpp"
#include "grid/grid.hpp"
#include "io/deck.hpp"

namespace trident {

// This rank's compute backend: the CPU with `threads` threads, or the CUDA
// device local_rank % (devices visible). Collective over the grid's world: a
// rank that cannot make its backend (no GPU) fails every rank with its
// message. With CUDA, rank 0 prints the device map (rank, host, device, name,
// memory).
std::unique_ptr<ComputeBackend> make_compute_backend(const Deck& deck, Grid& grid, int threads);

// Switches the grid's communicators to system.comm for `backend` and returns
// the choice: mpi, nccl or staged, never automatic. "auto" is mpi on the CPU; on CUDA it
// is nccl, or staged where NCCL is missing or ranks share a GPU anywhere in
// the job (NCCL refuses two ranks on one device). Collective over the grid.
CommBackend connect_communicators(const Deck& deck, Grid& grid, ComputeBackend& backend);

}  // namespace trident
