// Opening checkpoint files with parallel HDF5 on MPI-IO, and the pieces the
// writer and reader share: transfer properties, element types, selections of
// a slice's boxes.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "core/dtype.hpp"
#include "checkpoint/h5.hpp"
#include "checkpoint/tensor_slice.hpp"

namespace trident {

// Collective over `comm` (an MPI-backed communicator). Throw RuntimeFailure.
H5Handle create_checkpoint_file(Communicator& comm, const std::string& path);
H5Handle open_checkpoint_file(Communicator& comm, const std::string& path);

// A transfer property list for independent MPI-IO reads and writes: each rank
// moves only its own elements (disjoint file ranges when written), so no rank
// waits for another per piece.
H5Handle independent_transfer();

// In memory and in the file: f32 as IEEE little-endian, 16-bit types as uint16.
hid_t memory_type(DType t);
hid_t file_type(DType t);
std::optional<DType> dtype_named(const std::string& name);  // "f32", "bf16", ...

// The file space of `dataset` with the boxes' global parts selected (none when
// empty), and a 1-D memory space of the same element count.
H5Handle select_file_boxes(hid_t dataset, const std::vector<SliceBox>& boxes);
H5Handle packed_memory_space(std::size_t elements);

// The shape as HDF5 sees it (a 0-d tensor is stored as one element).
std::vector<hsize_t> h5_dims(const std::vector<std::int64_t>& shape);

}  // namespace trident
