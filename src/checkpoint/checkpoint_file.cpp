#include "checkpoint/checkpoint_file.hpp"

#include <fmt/format.h>

#include "comm/mpi_communicator.hpp"
#include "core/error.hpp"

namespace trident {
namespace {

MPI_Comm mpi_comm_of(Communicator& comm) {
  auto* mpi = dynamic_cast<MpiCommunicator*>(&comm);
  if (!mpi) throw RuntimeFailure("checkpoints need an MPI communicator (parallel HDF5)");
  return mpi->mpi_comm();
}

H5Handle file_access(Communicator& comm) {
  H5Handle fapl(h5_check(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate"), H5Pclose);
  h5_check(H5Pset_fapl_mpio(fapl.get(), mpi_comm_of(comm), MPI_INFO_NULL), "H5Pset_fapl_mpio");
  // Metadata is read by one rank and broadcast, and written collectively,
  // instead of every rank hitting the file system for every attribute.
  H5Pset_all_coll_metadata_ops(fapl.get(), 1);
  H5Pset_coll_metadata_write(fapl.get(), 1);
  // The 1.8+ object formats checksum all metadata: a flipped byte in a header
  // is an error on open, not garbage.
  H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V110);
  // Large datasets start on 1 MiB boundaries (file-system stripes and blocks);
  // small ones pack tightly.
  H5Pset_alignment(fapl.get(), 4u << 20, 1u << 20);
  // Object headers and attributes go together in 1 MiB blocks: a reader finds
  // them in a few reads instead of one small read per dataset across the file.
  H5Pset_meta_block_size(fapl.get(), 1u << 20);
  H5Pset_small_data_block_size(fapl.get(), 1u << 20);
  return fapl;
}

}  // namespace

H5Handle create_checkpoint_file(Communicator& comm, const std::string& path) {
  h5_silence_errors();
  H5Handle fapl = file_access(comm);
  H5Handle fcpl(h5_check(H5Pcreate(H5P_FILE_CREATE), "H5Pcreate"), H5Pclose);
  // Datasets list in the order they were written (the model's order).
  H5Pset_link_creation_order(fcpl.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
  return H5Handle(h5_check(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get()),
                           "cannot create " + path),
                  H5Fclose);
}

H5Handle open_checkpoint_file(Communicator& comm, const std::string& path) {
  h5_silence_errors();
  H5Handle fapl = file_access(comm);
  return H5Handle(h5_check(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()),
                           "cannot open the checkpoint"),
                  H5Fclose);
}

H5Handle independent_transfer() {
  H5Handle dxpl(h5_check(H5Pcreate(H5P_DATASET_XFER), "H5Pcreate"), H5Pclose);
  h5_check(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_INDEPENDENT), "H5Pset_dxpl_mpio");
  return dxpl;
}

hid_t memory_type(DType t) {
  switch (t) {
    case DType::f32: return H5T_NATIVE_FLOAT;
    case DType::u16: case DType::bf16: case DType::f16: return H5T_NATIVE_UINT16;
    default: throw RuntimeFailure(fmt::format("checkpoints do not store {}", dtype_name(t)));
  }
}

hid_t file_type(DType t) {
  switch (t) {
    case DType::f32: return H5T_IEEE_F32LE;
    case DType::u16: case DType::bf16: case DType::f16: return H5T_STD_U16LE;
    default: throw RuntimeFailure(fmt::format("checkpoints do not store {}", dtype_name(t)));
  }
}

std::optional<DType> dtype_named(const std::string& name) {
  for (DType t : {DType::f32, DType::u16, DType::bf16, DType::f16})
    if (name == dtype_name(t)) return t;
  return std::nullopt;
}

std::vector<hsize_t> h5_dims(const std::vector<std::int64_t>& shape) {
  if (shape.empty()) return {1};
  return std::vector<hsize_t>(shape.begin(), shape.end());
}

H5Handle select_file_boxes(hid_t dataset, const std::vector<SliceBox>& boxes) {
  H5Handle space(h5_check(H5Dget_space(dataset), "H5Dget_space"), H5Sclose);
  h5_check(H5Sselect_none(space.get()), "H5Sselect_none");
  bool first = true;
  for (const SliceBox& b : boxes) {
    const std::vector<hsize_t> start(b.global_start.begin(), b.global_start.end());
    const std::vector<hsize_t> count(b.count.begin(), b.count.end());
    h5_check(H5Sselect_hyperslab(space.get(), first ? H5S_SELECT_SET : H5S_SELECT_OR,
                                 start.data(), nullptr, count.data(), nullptr),
             "H5Sselect_hyperslab");
    first = false;
  }
  return space;
}

H5Handle packed_memory_space(std::size_t n) {
  const hsize_t dims = n > 0 ? n : 1;
  H5Handle space(h5_check(H5Screate_simple(1, &dims, nullptr), "H5Screate_simple"), H5Sclose);
  if (n == 0) H5Sselect_none(space.get());  // an empty part in a collective transfer
  return space;
}

}  // namespace trident
