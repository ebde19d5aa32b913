// Every collective of the seam on device buffers against its definition, for
// any communicator backend and any group size (shared by the NCCL and the
// host-staged tests). Rank r contributes values that encode r and the index.
#pragma once
#include <gtest/gtest.h>

#include "comm/communicator.hpp"
#include "gpu/gpu_test_support.hpp"

namespace trident::testing {

// All-reduce (sum, max, min; f32, f64, i32), reduce, reduce-scatter,
// all-gather (in and out of place), broadcast, a send/recv ring (size > 1),
// barrier and host-buffer fallbacks; stats and sequence numbers counted.
void check_collectives(Communicator& comm, CudaBackend& gpu);

// A collective must see what the compute stream wrote before it was issued,
// without any host synchronisation in between; a non-blocking one must
// return at once and complete while later compute runs; afterwards the
// compute stream must see its result.
void check_ordering_and_overlap(Communicator& comm, CudaBackend& gpu);

}  // namespace trident::testing
