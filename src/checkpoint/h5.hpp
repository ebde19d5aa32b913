// Small helpers over the HDF5 C API for checkpoint files: owning handles,
// scalar and string attributes, and the text of HDF5's error stack for our
// own messages (HDF5's automatic printing is turned off: rank 0 reports once).
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace trident {

// An HDF5 identifier closed by the matching H5?close when the handle dies.
class H5Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  H5Handle() = default;
  H5Handle(hid_t id, Closer close) : id_(id), close_(close) {}
  ~H5Handle() { reset(); }
  H5Handle(H5Handle&& o) noexcept : id_(std::exchange(o.id_, -1)), close_(o.close_) {}
  H5Handle& operator=(H5Handle&& o) noexcept {
    if (this != &o) reset(), id_ = std::exchange(o.id_, -1), close_ = o.close_;
    return *this;
  }
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  hid_t release() { return std::exchange(id_, -1); }  // the caller closes it
  void reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = -1;
  }

 private:
  hid_t id_ = -1;
  Closer close_ = nullptr;
};

// Stops HDF5 from printing its error stacks (we report the error ourselves).
void h5_silence_errors();
// The innermost messages of the current HDF5 error stack, then clears it.
std::string h5_error_text();
// Throws RuntimeFailure("<what>: <HDF5 error text>") when status < 0; returns it.
hid_t h5_check(hid_t status, const std::string& what);

// Attributes on a file, group or dataset. Writing is collective in parallel
// HDF5 (every rank passes the same value); reading is local.
void h5_write_attr(hid_t obj, const std::string& name, std::int64_t v);
void h5_write_attr(hid_t obj, const std::string& name, std::uint64_t v);
void h5_write_attr(hid_t obj, const std::string& name, double v);
void h5_write_attr(hid_t obj, const std::string& name, const std::string& v);
bool h5_has_attr(hid_t obj, const std::string& name);
// Each returns nothing when the attribute is absent; throws if it cannot be read.
std::optional<std::int64_t> h5_read_i64(hid_t obj, const std::string& name);
std::optional<std::uint64_t> h5_read_u64(hid_t obj, const std::string& name);
std::optional<double> h5_read_f64(hid_t obj, const std::string& name);
std::optional<std::string> h5_read_str(hid_t obj, const std::string& name);

}  // namespace trident
