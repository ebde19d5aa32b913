#include "checkpoint/checkpoint_reader.hpp"

#include <fmt/format.h>

#include <filesystem>

#include "comm/agree.hpp"
#include "core/error.hpp"
#include "checkpoint/checkpoint_file.hpp"
#include "checkpoint/checksum.hpp"

namespace trident {
namespace {

StoredDataset describe(hid_t d, const std::string& path) {
  StoredDataset s;
  s.spec.path = path;
  H5Handle space(h5_check(H5Dget_space(d), "H5Dget_space"), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(std::max(rank, 0));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  s.spec.shape.assign(dims.begin(), dims.end());
  const auto name = h5_read_str(d, "dtype");
  const auto t = name ? dtype_named(*name) : std::nullopt;
  if (!t)
    throw RuntimeFailure(name ? fmt::format("unknown dtype '{}'", *name)
                              : std::string("no dtype attribute"));
  s.spec.dtype = *t;
  const auto sum = h5_read_u64(d, "checksum");
  s.has_checksum = sum.has_value();
  s.checksum = sum.value_or(0);
  return s;
}

herr_t collect_dataset(hid_t, const char* name, const H5O_info_t* info, void* data) {
  if (info->type == H5O_TYPE_DATASET)
    static_cast<std::vector<std::string>*>(data)->push_back(std::string("/") + name);
  return 0;
}

}  // namespace

CheckpointReader::CheckpointReader(Communicator& comm, std::string path, std::size_t piece_bytes)
    : comm_(comm), path_(std::move(path)), piece_bytes_(piece_bytes) {
  run_agreed(comm_, [&] {
    if (!std::filesystem::is_regular_file(path_))
      throw InputError(fmt::format("{}: no such checkpoint file", path_));
    try {
      file_ = phases_.time("open", [&] { return open_checkpoint_file(comm_, path_); });
      transfer_ = independent_transfer();
      direct_ = std::make_unique<DirectFile>(path_, false);
      if (!direct_->ok()) direct_.reset();
      if (h5_read_i64(file_.get(), "complete").value_or(0) != 1)
        throw InputError(fmt::format("{}: the checkpoint is incomplete (no complete = 1 marker: "
                                     "its writer was interrupted); resume from another one",
                                     path_));
      meta_ = read_checkpoint_meta(file_.get());
    } catch (const RuntimeFailure& e) {
      throw InputError(fmt::format("{}: not a readable checkpoint: {}", path_, e.what()));
    }
    if (meta_.format_version != kCheckpointFormatVersion)
      throw InputError(fmt::format("{}: checkpoint format version {} is not supported (this "
                                   "trident reads version {})", path_, meta_.format_version,
                                   kCheckpointFormatVersion));
  });
}

CheckpointReader::~CheckpointReader() { file_.reset(); }

void CheckpointReader::read(const DatasetSpec& spec, const TensorSlice& slice) {
  read_all({{spec, slice, {}}});
}

void CheckpointReader::read_all(const std::vector<SliceRead>& reads,
                                const std::function<void()>& between_pieces) {
  run_agreed(comm_, [&] {
    std::vector<DirectFile::ReadRange> ranges;
    std::vector<DirectRun> runs;
    for (const auto& [spec, slice, copies] : reads) {
      try {
        if (H5Lexists(file_.get(), spec.path.c_str(), H5P_DEFAULT) <= 0)
          throw InputError(fmt::format("{}: dataset {} is missing", path_, spec.path));
        const double t0 = now_seconds();
        H5Handle d(h5_check(H5Dopen2(file_.get(), spec.path.c_str(), H5P_DEFAULT), "open"),
                   H5Dclose);
        StoredDataset stored = describe(d.get(), spec.path);
        phases_.add("dataset open", now_seconds() - t0);
        if (h5_dims(stored.spec.shape) != h5_dims(spec.shape) || stored.spec.dtype != spec.dtype)
          throw InputError(fmt::format("{}: dataset {} is {} {} but the model needs {} {}", path_,
                                       spec.path, dtype_name(stored.spec.dtype),
                                       format_shape(stored.spec.shape), dtype_name(spec.dtype),
                                       format_shape(spec.shape)));
        const std::size_t index = read_.size();
        read_.push_back(std::move(stored));
        sums_.push_back(0);  // checksum
        sums_.push_back(0);  // elements counted
        if (!slice.empty()) read_slice(d.get(), spec.dtype, slice, index, ranges, runs);
        for (const TensorSlice& copy : copies)  // through HDF5: small, outside the stream
          if (!copy.empty())
            read_pieces(d.get(), spec.dtype, copy, /*counted=*/false, sums_[2 * index],
                        sums_[2 * index + 1]);
        std::uint64_t numel = 1;
        for (hsize_t x : h5_dims(spec.shape)) numel *= x;
        bytes_ += numel * dtype_size(spec.dtype);
      } catch (const RuntimeFailure& e) {
        throw InputError(fmt::format("{}: dataset {}: {}", path_, spec.path, e.what()));
      }
    }
    try {
      read_direct(ranges, runs, between_pieces);
    } catch (const ReadRangeError& e) {
      throw InputError(fmt::format("{}: dataset {}: {}", path_,
                                   read_[runs[e.range].index].spec.path, e.what()));
    }
  });
}

void CheckpointReader::read_slice(hid_t dataset, DType dtype, const TensorSlice& slice,
                                  std::size_t index, std::vector<DirectFile::ReadRange>& ranges,
                                  std::vector<DirectRun>& runs) {
  const std::size_t esz = dtype_size(dtype);
  const bool counted = slice.counted;
  std::uint64_t& sum = sums_[2 * index];
  std::uint64_t& count = sums_[2 * index + 1];
  const haddr_t at = H5Dget_offset(dataset);
  const std::optional<FileRun> run = contiguous_run(slice);
  // Direct pieces are cut on blocks, multiples of the element size: they start
  // on elements when the tensor does.
  if (!direct_ || !run || at == HADDR_UNDEF || at % esz != 0)
    return read_pieces(dataset, dtype, slice, counted, sum, count);
  // Padding around the run: zeroed there, nothing read.
  read_pieces(dataset, dtype, sub_slice(slice, slice.lo, run->lo, esz), counted, sum, count);
  read_pieces(dataset, dtype, sub_slice(slice, run->hi, slice.hi, esz), counted, sum, count);
  ranges.push_back({at + run->first * esz, (run->hi - run->lo) * esz,
                    static_cast<char*>(slice.data) + (run->lo - slice.lo) * esz});
  runs.push_back({index, esz, run->first, counted});
}

void CheckpointReader::read_direct(const std::vector<DirectFile::ReadRange>& ranges,
                                   const std::vector<DirectRun>& runs,
                                   const std::function<void()>& between) {
  if (ranges.empty()) return;
  phases_.time("direct read", [&] {
    direct_->read_ranges(ranges, [&](std::size_t r, const char* p, std::size_t from,
                                     std::size_t n) {
      if (between) between();
      const DirectRun& run = runs[r];
      if (!run.counted) return;
      const std::size_t k = n / run.elem_bytes;
      sums_[2 * run.index] += phases_.time("checksum", [&] {
        return checksum_run(p, run.elem_bytes, run.first + from / run.elem_bytes, k,
                            /*all_threads=*/false);
      });
      sums_[2 * run.index + 1] += k;
    });
  });
}

void CheckpointReader::read_pieces(hid_t dataset, DType dtype, const TensorSlice& slice,
                                   bool counted, std::uint64_t& sum, std::uint64_t& count) {
  const std::size_t esz = dtype_size(dtype);
  const haddr_t at = H5Dget_offset(dataset);
  for (const auto& [lo, hi] : slice_pieces(slice, esz, at == HADDR_UNDEF ? 0 : at, piece_bytes_)) {
    const TensorSlice piece = sub_slice(slice, lo, hi, esz);
    const std::vector<SliceBox> boxes = slice_boxes(*slice.shard, lo, hi);
    const std::size_t n = boxes_numel(boxes);
    void* buf = piece.data;
    if (n != hi - lo) {  // padding inside the piece: read packed, then spread
      staging_.resize(std::max<std::size_t>(n, 1) * esz);
      buf = staging_.data();
    }
    if (n > 0) {
      H5Handle file_space = select_file_boxes(dataset, boxes);
      H5Handle mem_space = packed_memory_space(n);
      phases_.time("read", [&] {
        h5_check(H5Dread(dataset, memory_type(dtype), mem_space.get(), file_space.get(),
                         transfer_.get(), buf),
                 "read");
      });
    }
    if (buf != piece.data) unpack_slice(piece, boxes, esz, buf);
    // Summed right after its read, on this thread, while the kernel reads
    // ahead the next piece: the disk stays busy and the data is in cache.
    if (counted && n > 0) {
      sum += phases_.time("checksum", [&] { return checksum_slice(piece, boxes, esz); });
      count += n;
    }
  }
}

std::vector<ChecksumResult> CheckpointReader::checksums() {
  if (!sums_.empty()) comm_.all_reduce(sums_.data(), sums_.size(), DType::u64, ReduceOp::sum);
  std::vector<ChecksumResult> out;
  for (std::size_t i = 0; i < read_.size(); ++i) {
    const StoredDataset& s = read_[i];
    std::uint64_t numel = 1;
    for (hsize_t x : h5_dims(s.spec.shape)) numel *= x;
    if (sums_[2 * i + 1] != numel)  // a layout bug, never the file's fault
      throw AgreedError(kExitRuntime, fmt::format("{}: dataset {}: the ranks counted {} of its "
                                                  "{} elements (each element must have exactly "
                                                  "one counted copy)",
                                                  path_, s.spec.path, sums_[2 * i + 1], numel));
    out.push_back({s, sums_[2 * i]});
  }
  read_.clear();
  sums_.clear();
  return out;
}

void CheckpointReader::verify() {
  std::vector<const ChecksumResult*> bad;
  const auto results = checksums();
  for (const ChecksumResult& r : results)
    if (!r.ok()) bad.push_back(&r);
  if (bad.empty()) return;
  const ChecksumResult& first = *bad.front();
  const std::string why =
      first.stored.has_checksum
          ? fmt::format("stored checksum {:#018x}, its data gives {:#018x}", first.stored.checksum,
                        first.computed)
          : std::string("it has no checksum attribute");
  throw AgreedError(kExitBadInput,
                    fmt::format("{}: dataset {} is corrupt ({}){}; resume from another "
                                "checkpoint", path_, first.stored.spec.path, why,
                                bad.size() > 1 ? fmt::format("; {} more datasets are bad",
                                                             bad.size() - 1)
                                               : std::string()));
}

std::vector<StoredDataset> CheckpointReader::datasets() {
  std::vector<StoredDataset> out;
  run_agreed(comm_, [&] {
    try {
      std::vector<std::string> names;
      h5_check(H5Ovisit2(file_.get(), H5_INDEX_CRT_ORDER, H5_ITER_INC, collect_dataset, &names,
                         H5O_INFO_BASIC),
               "list datasets");
      for (const std::string& name : names) {
        H5Handle d(h5_check(H5Dopen2(file_.get(), name.c_str(), H5P_DEFAULT), "open " + name),
                   H5Dclose);
        out.push_back(describe(d.get(), name));
      }
    } catch (const RuntimeFailure& e) {
      throw InputError(fmt::format("{}: {}", path_, e.what()));
    }
  });
  return out;
}

}  // namespace trident
