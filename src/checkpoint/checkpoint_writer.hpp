// Writes one checkpoint file with parallel HDF5, over every rank of the job.
// Each rank contributes its TensorSlice of each global tensor; only counted
// slices are written (exactly one copy of each element). Creating datasets
// and attributes is collective (every rank calls create, write_meta and
// finish in the same order with the same specs and meta); the data itself
// goes with independent transfers, each rank its own disjoint elements, as
// one stream per rank that waits on no other rank. The collective steps are
// agreed across ranks (run_agreed): a failure anywhere, a write's included,
// throws AgreedError everywhere.
#pragma once
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "checkpoint/checkpoint_drain.hpp"
#include "checkpoint/checkpoint_schema.hpp"
#include "checkpoint/direct_io.hpp"
#include "checkpoint/h5.hpp"
#include "checkpoint/io_phases.hpp"
#include "checkpoint/tensor_slice.hpp"

namespace trident {

class CheckpointWriter {
 public:
  // Slices are written in pieces of at most this many bytes, cut on multiples
  // of it in the file: file systems take writes of a stripe (typically 1 MiB)
  // best, and on Linux page-cache writes of 1 MiB run about 3x faster than
  // ones of 2 MiB and up (fio, docs/checkpoints.md).
  static constexpr std::size_t kPieceBytes = std::size_t(1) << 20;

  // Creates (truncates) `path`.
  CheckpointWriter(Communicator& comm, std::string path, std::size_t piece_bytes = kPieceBytes);
  ~CheckpointWriter();  // an unfinished file is closed incomplete
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  void write_meta(const CheckpointMeta& meta);
  // Creates these datasets (numbered on from the ones created before), all in
  // one agreed step: their file space is allocated here, in this order.
  void create(const std::vector<DatasetSpec>& specs);
  // Writes this rank's slice of dataset `index` (if counted); not collective,
  // so ranks write at their own pace. The slice's memory must stay unchanged
  // until the call returns. A failure is kept for finish() to report (the
  // writes after it are skipped), so no rank is left alone in a collective.
  void write(std::size_t index, const TensorSlice& slice);
  // Asynchronous saves, instead of write(): this rank's slice of dataset
  // `index` as pieces for a CheckpointDrain, appended to `out` in file order
  // (the writer counts the elements; the drain sums them). in_place: the
  // slice's memory is training state, read by the drain until released.
  void plan(std::size_t index, const TensorSlice& slice, bool in_place,
            std::vector<DrainPiece>& out);
  // The drain's partial checksums (by dataset) and failure, for finish().
  void add_drained(const std::vector<std::uint64_t>& sums, std::exception_ptr failure);
  DirectFile* direct() { return direct_.get(); }
  std::vector<std::string> dataset_paths() const;
  // Drops the file's handles without closing them (a collective), for a rank
  // leaving on an error of its own: the process is about to end.
  void abandon();
  // Agrees on the writes' failures, stores each dataset's checksum (one
  // all-reduce for all of them), checks that the counted slices covered every
  // element exactly once, writes complete = 1, flushes (MPI_File_sync on
  // every rank) and closes.
  void finish();

  std::uint64_t bytes() const { return bytes_; }  // dataset bytes in the file
  const std::string& path() const { return path_; }
  const IoPhases& phases() const { return phases_; }

 private:
  void create_groups_for(const std::string& dataset_path);
  // Starts the kernel writing this rank's part of a dataset to disk while the
  // next ones are written, so the final flush has little left to do.
  void start_writeback(hid_t dataset, const TensorSlice& slice,
                       const std::vector<SliceBox>& boxes, std::size_t elem_bytes);
  H5Handle create_dataset(const DatasetSpec& spec);
  // Writes the slice; returns its checksum. A slice that is one file range
  // goes direct but for its ends (partial file blocks), which DirectFile
  // writes through the page cache into the dataset's contiguous storage, as
  // HDF5 would, in its queue; the rest through HDF5.
  std::uint64_t write_slice(hid_t dataset, DType dtype, const TensorSlice& slice);
  // Through HDF5, piece by piece, each summed just before it is written (on
  // this thread, while it is in cache).
  std::uint64_t write_pieces(hid_t dataset, DType dtype, const TensorSlice& slice);

  Communicator& comm_;
  std::string path_;
  std::size_t piece_bytes_;
  int sync_fd_ = -1;  // a plain descriptor of the file, for early writeback
  std::unique_ptr<DirectFile> direct_;  // null where the file system has no O_DIRECT
  H5Handle file_, transfer_;
  std::vector<std::pair<std::string, H5Handle>> groups_;
  std::vector<H5Handle> datasets_;
  std::vector<DatasetSpec> specs_;    // per dataset, as created
  std::vector<std::uint64_t> sums_;   // per dataset: partial checksum, elements written
  std::vector<std::uint64_t> numel_;  // per dataset: elements in the global tensor
  std::exception_ptr write_failed_;   // the first write's failure, for finish()
  std::vector<char> staging_;         // packed copy of a slice that has padding
  std::uint64_t bytes_ = 0;
  IoPhases phases_;
};

}  // namespace trident
