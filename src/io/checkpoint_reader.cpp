#include "io/checkpoint_reader.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <future>

#include "comm/agree.hpp"
#include "core/error.hpp"
#include "io/checkpoint_file.hpp"
#include "io/checksum.hpp"

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

CheckpointReader::CheckpointReader(Communicator& comm, std::string path)
    : comm_(comm), path_(std::move(path)) {
  run_agreed(comm_, [&] {
    if (!std::filesystem::is_regular_file(path_))
      throw InputError(fmt::format("{}: no such checkpoint file", path_));
    try {
      file_ = open_checkpoint_file(comm_, path_);
      transfer_ = collective_transfer();
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

void CheckpointReader::join_checksum() {
  if (pending_.valid()) sums_[pending_at_] = pending_.get();
}

void CheckpointReader::read(const DatasetSpec& spec, const TensorSlice& slice) {
  join_checksum();
  run_agreed(comm_, [&] {
    try {
      if (H5Lexists(file_.get(), spec.path.c_str(), H5P_DEFAULT) <= 0)
        throw InputError(fmt::format("{}: dataset {} is missing", path_, spec.path));
      H5Handle d(h5_check(H5Dopen2(file_.get(), spec.path.c_str(), H5P_DEFAULT), "open"),
                 H5Dclose);
      StoredDataset stored = describe(d.get(), spec.path);
      if (h5_dims(stored.spec.shape) != h5_dims(spec.shape) || stored.spec.dtype != spec.dtype)
        throw InputError(fmt::format("{}: dataset {} is {} {} but the model needs {} {}", path_,
                                     spec.path, dtype_name(stored.spec.dtype),
                                     format_shape(stored.spec.shape), dtype_name(spec.dtype),
                                     format_shape(spec.shape)));
      const std::size_t esz = dtype_size(spec.dtype);
      std::vector<SliceBox> boxes;
      std::size_t n = 0;
      void* buf = &staging_;  // any non-null address for an empty part
      if (!slice.empty()) {
        boxes = slice_boxes(*slice.shard, slice.lo, slice.hi);
        n = boxes_numel(boxes);
        buf = slice.data;
        if (n != slice.hi - slice.lo) {  // padding inside the range: read packed, then spread
          staging_.resize(n * esz);
          buf = staging_.data();
        }
      }
      H5Handle file_space = select_file_boxes(d.get(), boxes);
      H5Handle mem_space = packed_memory_space(n);
      h5_check(H5Dread(d.get(), memory_type(spec.dtype), mem_space.get(), file_space.get(),
                       transfer_.get(), buf),
               "read");
      if (!slice.empty() && buf != slice.data) unpack_slice(slice, boxes, esz, buf);
      const bool counted = slice.counted && n > 0;
      sums_.push_back(0);
      sums_.push_back(counted ? n : 0);
      // Summed right here, on the data just read. (Summing on another thread
      // while the next dataset is read raced in tests; correctness first.)
      if (counted) sums_[sums_.size() - 2] = checksum_slice(slice, boxes, esz);
      std::uint64_t numel = 1;
      for (hsize_t x : h5_dims(spec.shape)) numel *= x;
      bytes_ += numel * esz;
      read_.push_back(std::move(stored));
    } catch (const RuntimeFailure& e) {
      throw InputError(fmt::format("{}: dataset {}: {}", path_, spec.path, e.what()));
    }
  });
}

std::vector<ChecksumResult> CheckpointReader::checksums() {
  join_checksum();
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
