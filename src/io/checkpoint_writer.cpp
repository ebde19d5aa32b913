#include "io/checkpoint_writer.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "comm/agree.hpp"
#include "core/error.hpp"
#include "io/checkpoint_file.hpp"
#include "io/checksum.hpp"

namespace trident {

CheckpointWriter::CheckpointWriter(Communicator& comm, std::string path)
    : comm_(comm), path_(std::move(path)) {
  run_agreed(comm_, [&] {
    try {
      file_ = create_checkpoint_file(comm_, path_);
      transfer_ = collective_transfer();
    } catch (const RuntimeFailure& e) {
      throw RuntimeFailure(fmt::format("checkpoint {}: {}", path_, e.what()));
    }
  });
}

CheckpointWriter::~CheckpointWriter() {
  datasets_.clear();
  groups_.clear();
  file_.reset();
}

void CheckpointWriter::write_meta(const CheckpointMeta& meta) {
  run_agreed(comm_, [&] {
    try {
      write_checkpoint_meta(file_.get(), meta);
    } catch (const RuntimeFailure& e) {
      throw RuntimeFailure(fmt::format("checkpoint {}: {}", path_, e.what()));
    }
  });
}

hid_t CheckpointWriter::group_for(const std::string& dataset_path) {
  // Creates each missing group on the way ("/optim", then "/optim/exp_avg"),
  // tracking creation order so datasets list in the order they were written.
  hid_t parent = file_.get();
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
      it = groups_.end() - 1;
    }
    parent = it->second.get();
  }
  return parent;
}

void CheckpointWriter::write(const DatasetSpec& spec, const TensorSlice& slice) {
  run_agreed(comm_, [&] {
    try {
      group_for(spec.path);
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

      const std::size_t esz = dtype_size(spec.dtype);
      std::vector<SliceBox> boxes;
      const void* buf = &esz;  // any non-null address for an empty part
      std::uint64_t sum = 0;
      std::size_t n = 0;
      if (slice.counted && !slice.empty()) {
        boxes = slice_boxes(*slice.shard, slice.lo, slice.hi);
        n = boxes_numel(boxes);
        buf = slice.data;
        if (n != slice.hi - slice.lo) {  // padding inside the range: pack the rest
          staging_.resize(n * esz);
          pack_slice(slice, boxes, esz, staging_.data());
          buf = staging_.data();
        }
        sum = checksum_packed(*slice.shard, boxes, buf, esz);
      }
      H5Handle file_space = select_file_boxes(d.get(), boxes);
      H5Handle mem_space = packed_memory_space(n);
      h5_check(H5Dwrite(d.get(), memory_type(spec.dtype), mem_space.get(), file_space.get(),
                        transfer_.get(), buf),
               "write");
      std::uint64_t numel = 1;
      for (hsize_t x : dims) numel *= x;
      bytes_ += numel * esz;
      names_.push_back(spec.path);
      sums_.push_back(sum);
      sums_.push_back(n);
      numel_.push_back(numel);
      datasets_.push_back(std::move(d));
    } catch (const RuntimeFailure& e) {
      throw RuntimeFailure(fmt::format("checkpoint {}: dataset {}: {}", path_, spec.path, e.what()));
    }
  });
}

void CheckpointWriter::finish() {
  if (!sums_.empty()) comm_.all_reduce(sums_.data(), sums_.size(), DType::u64, ReduceOp::sum);
  run_agreed(comm_, [&] {
    for (std::size_t i = 0; i < names_.size(); ++i) {
      if (sums_[2 * i + 1] != numel_[i])  // a layout bug, never the user's input
        throw RuntimeFailure(fmt::format(
            "checkpoint {}: dataset {}: the ranks wrote {} of its {} elements (each element "
            "must have exactly one counted copy)", path_, names_[i], sums_[2 * i + 1], numel_[i]));
    }
    try {
      for (std::size_t i = 0; i < names_.size(); ++i)
        h5_write_attr(datasets_[i].get(), "checksum", sums_[2 * i]);
      datasets_.clear();
      groups_.clear();
      // Last: the marker that the file is whole. Readers refuse files without it.
      h5_write_attr(file_.get(), "complete", std::int64_t(1));
      h5_check(H5Fflush(file_.get(), H5F_SCOPE_GLOBAL), "flush");  // MPI_File_sync
      h5_check(H5Fclose(file_.release()), "close");
    } catch (const RuntimeFailure& e) {
      throw RuntimeFailure(fmt::format("checkpoint {}: {}", path_, e.what()));
    }
  });
}

}  // namespace trident
