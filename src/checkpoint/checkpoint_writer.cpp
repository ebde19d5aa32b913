#include "checkpoint/checkpoint_writer.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>

#include "comm/agree.hpp"
#include "core/error.hpp"
#include "core/fault_inject.hpp"
#include "checkpoint/checkpoint_file.hpp"
#include "checkpoint/checksum.hpp"

namespace trident {

CheckpointWriter::CheckpointWriter(Communicator& comm, std::string path, std::size_t piece_bytes)
    : comm_(comm), path_(std::move(path)), piece_bytes_(piece_bytes) {
  run_agreed(comm_, [&] {
    try {
      file_ = phases_.time("create", [&] { return create_checkpoint_file(comm_, path_); });
      transfer_ = independent_transfer();
      sync_fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
      direct_ = std::make_unique<DirectFile>(path_, true);
      if (!direct_->ok()) direct_.reset();
    } catch (const RuntimeFailure& e) {
      throw RuntimeFailure(fmt::format("checkpoint {}: {}", path_, e.what()));
    }
  });
}

CheckpointWriter::~CheckpointWriter() {
  if (sync_fd_ >= 0) ::close(sync_fd_);
  datasets_.clear();
  groups_.clear();
  file_.reset();
}

void CheckpointWriter::write_meta(const CheckpointMeta& meta) {
  run_agreed(comm_, [&] {
    try {
      phases_.time("meta", [&] { write_checkpoint_meta(file_.get(), meta); });
    } catch (const RuntimeFailure& e) {
      throw RuntimeFailure(fmt::format("checkpoint {}: {}", path_, e.what()));
    }
  });
}

void CheckpointWriter::create_groups_for(const std::string& dataset_path) {
  // Creates each missing group on the way ("/optim", then "/optim/exp_avg"),
  // tracking creation order so datasets list in the order they were written.
  std::size_t from = 1;
  for (std::size_t slash; (slash = dataset_path.find('/', from)) != std::string::npos;
       from = slash + 1) {
    const std::string name = dataset_path.substr(0, slash);
    auto it = std::find_if(groups_.begin(), groups_.end(),
                           [&](const auto& g) { return g.first == name; });
    if (it == groups_.end()) {
      H5Handle gcpl(H5Pcreate(H5P_GROUP_CREATE), H5Pclose);
      H5Pset_link_creation_order(gcpl.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
      H5Handle g(h5_check(H5Gcreate2(file_.get(), name.c_str(), H5P_DEFAULT, gcpl.get(),
                                     H5P_DEFAULT),
                          "create group " + name),
                 H5Gclose);
      groups_.emplace_back(name, std::move(g));
    }
  }
}

H5Handle CheckpointWriter::create_dataset(const DatasetSpec& spec) {
  create_groups_for(spec.path);
  const auto dims = h5_dims(spec.shape);
  H5Handle space(h5_check(H5Screate_simple(int(dims.size()), dims.data(), nullptr),
                          "H5Screate_simple"),
                 H5Sclose);
  H5Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  // Every element is written by some rank: no fill pass over the file.
  H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER);
  H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY);
  H5Handle d(h5_check(H5Dcreate2(file_.get(), spec.path.c_str(), file_type(spec.dtype),
                                 space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                      "create dataset"),
             H5Dclose);
  h5_write_attr(d.get(), "dtype", std::string(dtype_name(spec.dtype)));
  std::uint64_t numel = 1;
  for (hsize_t x : dims) numel *= x;
  bytes_ += numel * dtype_size(spec.dtype);
  numel_.push_back(numel);
  return d;
}

void CheckpointWriter::create(const std::vector<DatasetSpec>& specs) {
  run_agreed(comm_, [&] {
    for (const DatasetSpec& spec : specs) {
      try {
        datasets_.push_back(phases_.time("dataset create", [&] { return create_dataset(spec); }));
      } catch (const RuntimeFailure& e) {
        throw RuntimeFailure(
            fmt::format("checkpoint {}: dataset {}: {}", path_, spec.path, e.what()));
      }
      specs_.push_back(spec);
      sums_.push_back(0);  // partial checksum
      sums_.push_back(0);  // elements written
    }
  });
}

void CheckpointWriter::write(std::size_t index, const TensorSlice& slice) {
  if (write_failed_ || !slice.counted || slice.empty()) return;
  try {
    if (fault_armed("ckpt", "write_error", long(index)))
      throw RuntimeFailure("injected write failure (TRIDENT_FAULT_INJECT)");
    const hid_t d = datasets_.at(index).get();
    const DType dtype = specs_.at(index).dtype;
    const std::size_t esz = dtype_size(dtype);
    const auto boxes = slice_boxes(*slice.shard, slice.lo, slice.hi);
    sums_[2 * index] += write_slice(d, dtype, slice);
    sums_[2 * index + 1] += boxes_numel(boxes);
    // Direct writes leave nothing in the page cache to start writing back.
    if (!direct_) phases_.time("writeback", [&] { start_writeback(d, slice, boxes, esz); });
  } catch (const RuntimeFailure& e) {
    write_failed_ = std::make_exception_ptr(RuntimeFailure(
        fmt::format("checkpoint {}: dataset {}: {}", path_, specs_[index].path, e.what())));
  }
}

void CheckpointWriter::start_writeback(hid_t dataset, const TensorSlice& slice,
                                       const std::vector<SliceBox>& boxes, std::size_t esz) {
  const haddr_t at = H5Dget_offset(dataset);
  if (sync_fd_ < 0 || boxes.empty() || at == HADDR_UNDEF) return;
  std::uint64_t first = ~std::uint64_t(0), end = 0;
  for (const SliceBox& b : boxes)
    for_each_run(*slice.shard, b, [&](std::size_t, std::uint64_t g, std::size_t len) {
      first = std::min(first, g), end = std::max(end, g + len);
    });
  // Best effort: file systems without it (network ones) just flush at the end.
  sync_file_range(sync_fd_, off_t(at + first * esz), off_t((end - first) * esz),
                  SYNC_FILE_RANGE_WRITE);
}

std::uint64_t CheckpointWriter::write_slice(hid_t dataset, DType dtype, const TensorSlice& slice) {
  const std::size_t esz = dtype_size(dtype);
  const haddr_t at = H5Dget_offset(dataset);
  const std::optional<FileRun> run = contiguous_run(slice);
  if (!direct_ || !run || at == HADDR_UNDEF) return write_pieces(dataset, dtype, slice);
  // The run's whole file blocks go direct; its ends through the page cache,
  // queued with them (padding around the run is not the tensor's: never
  // written). Both are summed from the copies written.
  const auto [a, b] = direct_range(run->lo, run->hi, at + run->first * esz, esz);
  std::uint64_t sum = 0;
  for (const auto& end : {std::pair(run->lo, a), std::pair(b, run->hi)}) {
    if (end.second <= end.first) continue;
    const std::uint64_t g = run->first + (end.first - run->lo);
    phases_.time("buffered write", [&] {
      direct_->write_buffered(at + g * esz,
                              static_cast<const char*>(slice.data) + (end.first - slice.lo) * esz,
                              (end.second - end.first) * esz,
                              [&](const char* p, std::size_t, std::size_t n) {
                                sum += checksum_run(p, esz, g, n / esz);
                              });
    });
  }
  if (a == b) return sum;
  const std::uint64_t g = run->first + (a - run->lo);  // global index of element a
  phases_.time("direct write", [&] {
    direct_->write(at + g * esz, static_cast<const char*>(slice.data) + (a - slice.lo) * esz,
                   (b - a) * esz, [&](const char* p, std::size_t from, std::size_t n) {
                     sum += phases_.time("checksum", [&] {
                       return checksum_run(p, esz, g + from / esz, n / esz);
                     });
                   });
  });
  return sum;
}

std::uint64_t CheckpointWriter::write_pieces(hid_t dataset, DType dtype, const TensorSlice& slice) {
  const std::size_t esz = dtype_size(dtype);
  const haddr_t at = H5Dget_offset(dataset);
  std::uint64_t sum = 0;
  for (const auto& [lo, hi] : slice_pieces(slice, esz, at == HADDR_UNDEF ? 0 : at, piece_bytes_)) {
    const TensorSlice piece = sub_slice(slice, lo, hi, esz);
    const std::vector<SliceBox> boxes = slice_boxes(*slice.shard, lo, hi);
    const std::size_t n = boxes_numel(boxes);
    if (n == 0) continue;  // all padding
    sum += phases_.time("checksum", [&] { return checksum_slice(piece, boxes, esz); });
    const void* buf = piece.data;
    if (n != hi - lo) {  // padding inside the piece: pack the rest
      staging_.resize(n * esz);
      pack_slice(piece, boxes, esz, staging_.data());
      buf = staging_.data();
    }
    H5Handle file_space = select_file_boxes(dataset, boxes);
    H5Handle mem_space = packed_memory_space(n);
    phases_.time("write", [&] {
      h5_check(H5Dwrite(dataset, memory_type(dtype), mem_space.get(), file_space.get(),
                        transfer_.get(), buf),
               "write");
    });
  }
  return sum;
}

void CheckpointWriter::plan(std::size_t index, const TensorSlice& slice, bool in_place,
                            std::vector<DrainPiece>& out) {
  if (write_failed_ || !slice.counted || slice.empty()) return;
  const DatasetSpec& spec = specs_.at(index);
  const std::size_t esz = dtype_size(spec.dtype);
  const haddr_t at = H5Dget_offset(datasets_.at(index).get());
  if (fault_armed("ckpt", "write_error", long(index)) || at == HADDR_UNDEF) {
    write_failed_ = std::make_exception_ptr(RuntimeFailure(fmt::format(
        "checkpoint {}: dataset {}: {}", path_, spec.path,
        at == HADDR_UNDEF ? "no file space allocated"
                          : "injected write failure (TRIDENT_FAULT_INJECT)")));
    return;
  }
  // Elements [e0, e1) of the shard, global elements g0... on: pieces of at
  // most 2 MiB, direct ones cut on blocks of the file.
  auto add = [&](std::size_t e0, std::size_t e1, std::uint64_t g0, bool direct) {
    const std::size_t step = DirectFile::kPieceBytes / esz;
    for (std::size_t e = e0; e < e1; e += step) {
      const std::size_t n = std::min(step, e1 - e);
      const std::uint64_t g = g0 + (e - e0);
      out.push_back({static_cast<const char*>(slice.data) + (e - slice.lo) * esz, n * esz,
                     at + g * esz, g, std::uint32_t(index), std::uint8_t(esz), direct, in_place});
    }
  };
  const auto boxes = slice_boxes(*slice.shard, slice.lo, slice.hi);
  sums_[2 * index + 1] += boxes_numel(boxes);
  if (const std::optional<FileRun> run = contiguous_run(slice)) {
    // Whole file blocks direct; the ends through the page cache (as write()).
    const auto [a, b] = direct_ ? direct_range(run->lo, run->hi, at + run->first * esz, esz)
                                : std::pair(run->hi, run->hi);
    add(run->lo, a, run->first, false);
    add(a, b, run->first + (a - run->lo), true);
    add(b, run->hi, run->first + (b - run->lo), false);
    return;
  }
  for (const SliceBox& box : boxes)  // padding inside: each run of the file its own piece
    for_each_run(*slice.shard, box, [&](std::size_t l, std::uint64_t g, std::size_t len) {
      add(l, l + len, g, false);
    });
}

void CheckpointWriter::add_drained(const std::vector<std::uint64_t>& sums,
                                   std::exception_ptr failure) {
  for (std::size_t i = 0; i < sums.size() && i < specs_.size(); ++i) sums_[2 * i] += sums[i];
  if (failure && !write_failed_) write_failed_ = failure;
}

std::vector<std::string> CheckpointWriter::dataset_paths() const {
  std::vector<std::string> out;
  for (const DatasetSpec& s : specs_) out.push_back(s.path);
  return out;
}

void CheckpointWriter::abandon() {
  for (H5Handle& d : datasets_) (void)d.release();
  for (auto& g : groups_) (void)g.second.release();
  (void)transfer_.release();
  (void)file_.release();
}

void CheckpointWriter::finish() {
  run_agreed(comm_, [&] {
    if (write_failed_) std::rethrow_exception(write_failed_);
    try {
      if (direct_) phases_.time("direct write", [&] { direct_->drain(); });
    } catch (const RuntimeFailure& e) {
      throw RuntimeFailure(fmt::format("checkpoint {}: {}", path_, e.what()));
    }
  });
  if (!sums_.empty()) comm_.all_reduce(sums_.data(), sums_.size(), DType::u64, ReduceOp::sum);
  run_agreed(comm_, [&] {
    for (std::size_t i = 0; i < specs_.size(); ++i) {
      if (sums_[2 * i + 1] != numel_[i])  // a layout bug, never the user's input
        throw RuntimeFailure(fmt::format(
            "checkpoint {}: dataset {}: the ranks wrote {} of its {} elements (each element "
            "must have exactly one counted copy)", path_, specs_[i].path, sums_[2 * i + 1], numel_[i]));
    }
    try {
      phases_.time("attributes", [&] {
        for (std::size_t i = 0; i < specs_.size(); ++i)
          h5_write_attr(datasets_[i].get(), "checksum", sums_[2 * i]);
        datasets_.clear();
        groups_.clear();
        direct_.reset();
        // Last: the marker that the file is whole. Readers refuse files without it.
        h5_write_attr(file_.get(), "complete", std::int64_t(1));
      });
      phases_.time("flush", [&] {  // MPI_File_sync
        h5_check(H5Fflush(file_.get(), H5F_SCOPE_GLOBAL), "flush");
      });
      phases_.time("close", [&] { h5_check(H5Fclose(file_.release()), "close"); });
    } catch (const RuntimeFailure& e) {
      throw RuntimeFailure(fmt::format("checkpoint {}: {}", path_, e.what()));
    }
  });
}

}  // namespace trident
