// Where the model finds its parameters and gradients. The model names the unit
// (embeddings 0, block l -> l + 1, final norm L + 1) it is about to use and says
// when it is done, so a sharded storage (ZeRO-3) can gather parameters just in
// time and a windowed one (ZeRO-2/3) can reduce and recycle gradients as soon
// as backward leaves a unit. The full storage ignores the announcements.
#pragma once
#include <cstdint>
#include <vector>

#include "compute/backend.hpp"
#include "memory/arena.hpp"
#include "memory/tensor_table.hpp"
#include "memory/working_copies.hpp"

namespace trident {

enum class Pass { forward, backward };

class ModelStorage {
 public:
  virtual ~ModelStorage() = default;
  virtual float* param(const TensorInfo& t) = 0;
  virtual float* grad(const TensorInfo& t) = 0;
  // Element `element` of t, whose unit is held (a tensor cut into pieces over
  // several units, TensorInfo::units, is reached piece by piece this way).
  virtual float* param_at(const TensorInfo& t, std::size_t element) { return param(t) + element; }
  // t's bf16 bits where they are resident as they are (16-bit weights held
  // whole), for GEMMs that read them without an f32 copy; else null.
  virtual const std::uint16_t* param_bf16(const TensorInfo& t) { return nullptr; }
  // The model reads t only through param_bf16 (its GEMMs take the bits): a
  // storage that can skips t in the f32 working copies, and param(t) throws.
  virtual void read_as_bits(const TensorInfo& t) {}
  virtual float* grad_at(const TensorInfo& t, std::size_t element) { return grad(t) + element; }
  // The token embedding is read d_model rows at a time, each block through
  // param_rows (a 16-bit table, whole: converted block by block, never whole).
  virtual bool table_in_windows() const { return false; }
  // Its gradients likewise, through grad_rows (16-bit gradients); else
  // grad_rows reaches any number of rows at once.
  virtual bool table_grads_in_windows() const { return table_in_windows(); }
  // The whole windowed table's bf16 bits, where the head's GEMMs may read it
  // as it is (bf16 weights held whole, f32 gradients); else null.
  virtual const std::uint16_t* table_bf16(const TensorInfo& t) { return nullptr; }
  // f32 values of t's elements [element, element + n), valid until the next call.
  virtual const float* param_rows(const TensorInfo& t, std::size_t element, std::size_t n) {
    return param_at(t, element);
  }
  // The gradients of those elements, to add to; done_grad_rows keeps what was
  // added (16-bit table gradients are rounded back block by block).
  virtual float* grad_rows(const TensorInfo& t, std::size_t element, std::size_t n) {
    return grad_at(t, element);
  }
  virtual void done_grad_rows(const TensorInfo& t, std::size_t element, std::size_t n) {}
  // Parameters of `unit` are about to be read / no longer needed in this pass.
  virtual void need_params(int unit, Pass pass) {}
  virtual void done_params(int unit) {}
  // Gradients of `unit` are about to be accumulated / are final for this
  // micro-batch (`last`: the step's last micro-batch).
  virtual void need_grads(int unit) {}
  virtual void done_grads(int unit, bool last) {}
  // Gradients leave the model after every backward (reduced and zeroed per
  // micro-batch) instead of accumulating until the step's last one.
  virtual bool grads_leave_each_backward() const { return false; }
  // This rank's parameters in the table's layout (its tensor shards, whole),
  // and the reverse for table elements [first, first + n) (each storage
  // keeps its part).
  virtual void gather_params_to_host(std::vector<float>& out) = 0;
  virtual void set_params_from_host(std::size_t first, const float* in, std::size_t n) = 0;
};

// Every parameter and gradient resident in one arena each (no ZeRO). With
// 16-bit weights the parameter arena holds bf16/fp16 and a unit in use is
// unpacked into an f32 working copy (the token embedding block by block).
// Gradients are f32, or with a 16-bit
// precision.reduce_dtype stored in 16 bits: backward accumulates a unit's
// micro-batch into an f32 working copy, rounded back when it leaves the unit.
class FullStorage : public ModelStorage {
 public:
  FullStorage(const TensorTable& table, ComputeBackend& backend, MemoryLedger& ledger,
              DType weights = DType::f32, DType grads = DType::f32);
  float* param(const TensorInfo& t) override;
  float* grad(const TensorInfo& t) override;
  const std::uint16_t* param_bf16(const TensorInfo& t) override;
  void read_as_bits(const TensorInfo& t) override;
  bool table_in_windows() const override { return table_unit_ >= 0; }
  bool table_grads_in_windows() const override { return grad_table_unit_ >= 0; }
  const std::uint16_t* table_bf16(const TensorInfo& t) override;
  const float* param_rows(const TensorInfo& t, std::size_t element, std::size_t n) override;
  float* grad_rows(const TensorInfo& t, std::size_t element, std::size_t n) override;
  void done_grad_rows(const TensorInfo& t, std::size_t element, std::size_t n) override;
  void need_params(int unit, Pass pass) override;
  void done_params(int unit) override;
  void need_grads(int unit) override;
  void done_grads(int unit, bool last) override;
  void gather_params_to_host(std::vector<float>& out) override;
  void set_params_from_host(std::size_t first, const float* in, std::size_t n) override;
  Arena& params() { return params_; }  // resident, in the weights' type
  Arena& grads() { return grads_; }

 private:
  std::vector<UnitRange> units_;
  Arena params_, grads_;
  WorkingCopies working_, grad_working_;  // 16-bit weights, 16-bit gradients
  int table_unit_ = -1;       // the token embedding, read through a window
  int grad_table_unit_ = -1;  // its 16-bit gradients, added to through a window
  void* unit_bytes(Arena& a, int unit) {
    return static_cast<char*>(a.data()) + units_[unit].begin * dtype_size(a.dtype());
  }
  ComputeBackend& backend_;
};

// Host f32 values <-> a device range of type `type` (f32, bf16, f16; 16-bit
// values are rounded to nearest even on the way in).
void copy_to_host_as_f32(ComputeBackend& be, float* host, const void* dev, DType type,
                         std::size_t n);
void copy_from_host_as(ComputeBackend& be, void* dev, DType type, const float* host,
                       std::size_t n);

}  // namespace trident
