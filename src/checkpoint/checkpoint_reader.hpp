// Reads a checkpoint file with parallel HDF5, collectively over every rank of
// the job; each rank reads only its own slice of each dataset, whatever layout
// wrote the file. Checksums are verified from the counted slices (exactly one
// copy of each element over all ranks), summed with one all-reduce. Anything
// wrong with the file is an InputError naming the file (and the dataset),
// agreed across ranks: every rank throws AgreedError with exit code 2.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "checkpoint/checkpoint_schema.hpp"
#include "checkpoint/direct_io.hpp"
#include "checkpoint/h5.hpp"
#include "checkpoint/io_phases.hpp"
#include "checkpoint/tensor_slice.hpp"

namespace trident {

// What the file says about one dataset.
struct StoredDataset {
  DatasetSpec spec;
  std::uint64_t checksum = 0;
  bool has_checksum = false;
};

// A dataset's stored checksum against the one its data gives.
struct ChecksumResult {
  StoredDataset stored;
  std::uint64_t computed = 0;
  bool ok() const { return stored.has_checksum && stored.checksum == computed; }
};

class CheckpointReader {
 public:
  // Slices are read in pieces of at most this many bytes, as the writer's: a
  // read of 1 MiB leaves the kernel's readahead running while it is summed.
  static constexpr std::size_t kPieceBytes = std::size_t(1) << 20;

  // Opens `path` and reads its meta. Refuses missing, truncated, incomplete or
  // other-version files.
  CheckpointReader(Communicator& comm, std::string path, std::size_t piece_bytes = kPieceBytes);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const CheckpointMeta& meta() const { return meta_; }
  const std::string& path() const { return path_; }

  // Reads this rank's slice of `spec` into slice.data (padding zeroed). Fails
  // when the dataset is missing or its shape or dtype differs from `spec`. The
  // slice's memory must stay unchanged until the next read or check.
  void read(const DatasetSpec& spec, const TensorSlice& slice);
  // A dataset and this rank's slice of it.
  struct SliceRead {
    DatasetSpec spec;
    TensorSlice slice;
    // Further copies this rank holds, read whole, never counted (a V
    // placement's second tied embedding): every rank lists each dataset once.
    std::vector<TensorSlice> copies;
  };
  // Reads every slice as read() does, in one pass: the slices that are one
  // range of the file (all but padded tensor-parallel shards) are read as one
  // direct stream in file order, so the disk never waits between datasets.
  // `between_pieces`, when given, runs after each piece of the stream (the
  // caller's background work: the replicas' exchange).
  void read_all(const std::vector<SliceRead>& reads,
                const std::function<void()>& between_pieces = {});
  // Checks every dataset read since the last check against its stored
  // checksum (one all-reduce); verify() throws for the first bad one.
  std::vector<ChecksumResult> checksums();
  void verify();

  // Every dataset in the file, in the order written (collective).
  std::vector<StoredDataset> datasets();
  std::uint64_t bytes() const { return bytes_; }  // dataset bytes read (global view)
  const IoPhases& phases() const { return phases_; }

 private:
  // One file range of dataset `index` (in read_) to read direct.
  struct DirectRun {
    std::size_t index = 0, elem_bytes = 0;
    std::uint64_t first = 0;  // global flat index of its first element
    bool counted = false;
  };
  // Reads the slice of dataset `index` (padding zeroed), adding the counted
  // elements' checksum and number to its sums. A slice that is one file range
  // is queued in `ranges` and `runs`, to be read direct (whole blocks around
  // it: buffered reads of its ends would start the kernel's readahead of
  // megabytes read again direct); the rest is read through HDF5 now.
  void read_slice(hid_t dataset, DType dtype, const TensorSlice& slice, std::size_t index,
                  std::vector<DirectFile::ReadRange>& ranges, std::vector<DirectRun>& runs);
  // Reads the queued ranges as one stream, summing each piece as it lands.
  void read_direct(const std::vector<DirectFile::ReadRange>& ranges,
                   const std::vector<DirectRun>& runs, const std::function<void()>& between);
  // Through HDF5, piece by piece, each summed right after its read.
  void read_pieces(hid_t dataset, DType dtype, const TensorSlice& slice, bool counted,
                   std::uint64_t& sum, std::uint64_t& count);

  Communicator& comm_;
  std::string path_;
  std::size_t piece_bytes_;
  H5Handle file_, transfer_;
  std::unique_ptr<DirectFile> direct_;  // null where the file system has no O_DIRECT
  CheckpointMeta meta_;
  std::vector<StoredDataset> read_;
  std::vector<std::uint64_t> sums_;  // per dataset read: partial checksum, elements counted
  std::vector<char> staging_;  // a packed piece of a slice that has padding
  std::uint64_t bytes_ = 0;
  IoPhases phases_;
};

}  // namespace trident
