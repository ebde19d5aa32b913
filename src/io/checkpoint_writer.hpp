// Writes one checkpoint file with parallel HDF5, collectively over every rank
// of the job. Each rank contributes its TensorSlice of each global tensor;
// only counted slices are written (exactly one copy of each element), the
// others take part with an empty selection, as parallel HDF5 requires every
// rank in every dataset create and collective write. Every rank calls every
// method in the same order with the same specs and meta. Each step is agreed
// across ranks (run_agreed): a failure anywhere throws AgreedError everywhere.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "io/checkpoint_schema.hpp"
#include "io/h5.hpp"
#include "io/tensor_slice.hpp"

namespace trident {

class CheckpointWriter {
 public:
  // Creates (truncates) `path`.
  CheckpointWriter(Communicator& comm, std::string path);
  ~CheckpointWriter();  // an unfinished file is closed incomplete
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  void write_meta(const CheckpointMeta& meta);
  // Creates the dataset `spec` and writes this rank's slice of it (if counted).
  void write(const DatasetSpec& spec, const TensorSlice& slice);
  // Stores each dataset's checksum (one all-reduce for all of them), checks
  // that the counted slices covered every element exactly once, writes
  // complete = 1, flushes (MPI_File_sync on every rank) and closes.
  void finish();

  std::uint64_t bytes() const { return bytes_; }  // dataset bytes in the file
  const std::string& path() const { return path_; }

 private:
  hid_t group_for(const std::string& dataset_path);

  Communicator& comm_;
  std::string path_;
  H5Handle file_, transfer_;
  std::vector<std::pair<std::string, H5Handle>> groups_;
  std::vector<H5Handle> datasets_;
  std::vector<std::string> names_;
  std::vector<std::uint64_t> sums_;   // per dataset: partial checksum, then elements written
  std::vector<std::uint64_t> numel_;  // per dataset: elements in the global tensor
  std::vector<char> staging_;         // packed copy of a slice that has padding
  std::uint64_t bytes_ = 0;
};

}  // namespace trident
