#include "checkpoint/h5.hpp"

#include <fmt/format.h>

#include <vector>

#include "core/error.hpp"

namespace trident {
namespace {

herr_t collect(unsigned, const H5E_error2_t* e, void* data) {
  auto* messages = static_cast<std::vector<std::string>*>(data);
  if (e->desc && *e->desc) messages->emplace_back(e->desc);
  return 0;
}

template <class T>
void write_scalar(hid_t obj, const std::string& name, hid_t file_type, hid_t mem_type,
                  const T& v) {
  H5Handle space(h5_check(H5Screate(H5S_SCALAR), "H5Screate"), H5Sclose);
  if (H5Aexists(obj, name.c_str()) > 0) H5Adelete(obj, name.c_str());
  H5Handle a(h5_check(H5Acreate2(obj, name.c_str(), file_type, space.get(), H5P_DEFAULT,
                                 H5P_DEFAULT),
                      "create attribute " + name),
             H5Aclose);
  h5_check(H5Awrite(a.get(), mem_type, &v), "write attribute " + name);
}

template <class T>
std::optional<T> read_scalar(hid_t obj, const std::string& name, hid_t mem_type) {
  if (!h5_has_attr(obj, name)) return std::nullopt;
  H5Handle a(h5_check(H5Aopen(obj, name.c_str(), H5P_DEFAULT), "open attribute " + name),
             H5Aclose);
  T v{};
  h5_check(H5Aread(a.get(), mem_type, &v), "read attribute " + name);
  return v;
}

}  // namespace

void h5_silence_errors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

std::string h5_error_text() {
  std::vector<std::string> messages;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect, &messages);
  H5Eclear2(H5E_DEFAULT);
  // The innermost two say what actually went wrong ("truncated file: eof = ...").
  const std::size_t from = messages.size() > 2 ? messages.size() - 2 : 0;
  std::string text;
  for (std::size_t i = from; i < messages.size(); ++i) text += (i > from ? "; " : "") + messages[i];
  return text.empty() ? "unknown HDF5 error" : text;
}

hid_t h5_check(hid_t status, const std::string& what) {
  if (status < 0) throw RuntimeFailure(fmt::format("{}: {}", what, h5_error_text()));
  return status;
}

void h5_write_attr(hid_t obj, const std::string& name, std::int64_t v) {
  write_scalar(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, v);
}
void h5_write_attr(hid_t obj, const std::string& name, std::uint64_t v) {
  write_scalar(obj, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, v);
}
void h5_write_attr(hid_t obj, const std::string& name, double v) {
  write_scalar(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, v);
}

void h5_write_attr(hid_t obj, const std::string& name, const std::string& v) {
  // Variable-length UTF-8: h5py reads it as str, h5dump prints it as text.
  H5Handle type(h5_check(H5Tcopy(H5T_C_S1), "H5Tcopy"), H5Tclose);
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  const char* p = v.c_str();
  write_scalar(obj, name, type.get(), type.get(), p);
}

bool h5_has_attr(hid_t obj, const std::string& name) {
  return h5_check(H5Aexists(obj, name.c_str()), "look up attribute " + name) > 0;
}

std::optional<std::int64_t> h5_read_i64(hid_t obj, const std::string& name) {
  return read_scalar<std::int64_t>(obj, name, H5T_NATIVE_INT64);
}
std::optional<std::uint64_t> h5_read_u64(hid_t obj, const std::string& name) {
  return read_scalar<std::uint64_t>(obj, name, H5T_NATIVE_UINT64);
}
std::optional<double> h5_read_f64(hid_t obj, const std::string& name) {
  return read_scalar<double>(obj, name, H5T_NATIVE_DOUBLE);
}

std::optional<std::string> h5_read_str(hid_t obj, const std::string& name) {
  if (!h5_has_attr(obj, name)) return std::nullopt;
  H5Handle a(h5_check(H5Aopen(obj, name.c_str(), H5P_DEFAULT), "open attribute " + name),
             H5Aclose);
  H5Handle stored(h5_check(H5Aget_type(a.get()), "attribute type " + name), H5Tclose);
  if (H5Tget_class(stored.get()) != H5T_STRING)
    throw RuntimeFailure(fmt::format("attribute {} is not a string", name));
  H5Handle type(h5_check(H5Tcopy(H5T_C_S1), "H5Tcopy"), H5Tclose);
  H5Tset_cset(type.get(), H5Tget_cset(stored.get()));  // HDF5 converts no character sets
  if (H5Tis_variable_str(stored.get()) > 0) {
    H5Tset_size(type.get(), H5T_VARIABLE);
    char* p = nullptr;
    h5_check(H5Aread(a.get(), type.get(), &p), "read attribute " + name);
    std::string s = p ? p : "";
    H5free_memory(p);
    return s;
  }
  const std::size_t size = H5Tget_size(stored.get());  // fixed length (other writers)
  H5Tset_size(type.get(), size + 1);
  std::vector<char> buf(size + 1, '\0');
  h5_check(H5Aread(a.get(), type.get(), buf.data()), "read attribute " + name);
  return std::string(buf.data());
}

}  // namespace trident
