// What a compute backend says about itself, apart from its math: its name and
// description for the run's header, the peak the MFU divides by, a warning
// for the user, and the per-kernel time table.
#pragma once
#include <string>

#include "core/dtype.hpp"

namespace trident {

class BackendInfo {
 public:
  virtual ~BackendInfo() = default;
  virtual std::string name() const = 0;
  virtual std::string describe() const = 0;  // threads, library versions
  // The device's peak dense FLOP/s for compute in `dtype` (the MFU
  // denominator) and where it comes from; 0 when unknown (MFU not printed).
  virtual double peak_flops(DType dtype) const = 0;
  virtual std::string peak_source(DType dtype) const = 0;
  // Something about the kernels in use the user should know (printed as a
  // warning by rank 0), else "".
  virtual std::string warning() const { return {}; }
  // Device time per op as a table, when the backend was asked to time its
  // kernels (the CUDA backend with TRIDENT_KERNEL_TIMES=1); otherwise empty.
  virtual std::string kernel_report() { return {}; }
  virtual void reset_kernel_times() {}  // from here on (the steady steps)
};

}  // namespace trident
