#include "model/model_storage.hpp"

#include <algorithm>
#include <stdexcept>

#include "core/half.hpp"

namespace trident {

FullStorage::FullStorage(const TensorTable& table, ComputeBackend& backend, MemoryLedger& ledger,
                         DType weights, DType grads)
    : units_(unit_ranges(table)),
      params_(backend, ledger, MemCategory::parameters, table.size(), weights),
      grads_(backend, ledger, MemCategory::gradients, table.size(), grads),
      backend_(backend) {
  if (weights != DType::f32) {
    const bool window = WorkingCopies::can_window_table(table);
    working_ = WorkingCopies(backend, ledger, table, window);
    if (window) table_unit_ = table.at("wte").unit;
  }
  if (grads != DType::f32) {
    const bool window = WorkingCopies::can_window_table(table);
    grad_working_ = WorkingCopies(backend, ledger, table, window);
    if (window) grad_table_unit_ = table.at("wte").unit;
  }
}

float* FullStorage::grad(const TensorInfo& t) {
  if (grads_.dtype() == DType::f32) return grads_.f32(t);
  if (t.unit == grad_table_unit_)
    throw std::logic_error("gradients of " + t.name + " are reached through grad_rows");
  float* g = grad_working_.find(t.unit);
  if (!g) throw std::logic_error("gradients of " + t.name + " used before need_grads");
  return g + (t.offset - units_[t.unit].begin);
}

void FullStorage::need_grads(int unit) {
  // The first stage's embedding gradients are announced at both ends of
  // backward: the copy stays from the first announcement to done_grads.
  if (grads_.dtype() == DType::f32 || unit == grad_table_unit_ || grad_working_.find(unit)) return;
  grad_working_.acquire(unit, unit_bytes(grads_, unit), grads_.dtype(), units_[unit].size());
}

void FullStorage::done_grads(int unit, bool) {
  if (grads_.dtype() == DType::f32 || unit == grad_table_unit_) return;
  grad_working_.write_back_and_release(unit, unit_bytes(grads_, unit), grads_.dtype(),
                                       units_[unit].size());
}

float* FullStorage::param(const TensorInfo& t) {
  if (params_.dtype() == DType::f32) return params_.f32(t);
  if (t.unit == table_unit_)
    throw std::logic_error("parameters of " + t.name + " are read through param_rows");
  if (working_.skipped(t.unit, t.offset - units_[t.unit].begin))
    throw std::logic_error("parameters of " + t.name + " are read as bf16 bits (param_bf16)");
  float* w = working_.find(t.unit);
  if (!w) throw std::logic_error("parameters of " + t.name + " used before need_params");
  return w + (t.offset - units_[t.unit].begin);
}

const std::uint16_t* FullStorage::param_bf16(const TensorInfo& t) {
  if (params_.dtype() != DType::bf16 || t.unit == table_unit_) return nullptr;
  return static_cast<const std::uint16_t*>(params_.data()) + t.offset;
}

const std::uint16_t* FullStorage::table_bf16(const TensorInfo& t) {
  if (params_.dtype() != DType::bf16 || t.unit != table_unit_ || grad_table_unit_ >= 0)
    return nullptr;
  return static_cast<const std::uint16_t*>(params_.data()) + t.offset;
}

const float* FullStorage::param_rows(const TensorInfo& t, std::size_t element, std::size_t n) {
  if (t.unit != table_unit_) return param(t) + element;
  return working_.window(static_cast<char*>(params_.data()) +
                             (t.offset + element) * dtype_size(params_.dtype()),
                         params_.dtype(), n);
}

float* FullStorage::grad_rows(const TensorInfo& t, std::size_t element, std::size_t n) {
  if (t.unit != grad_table_unit_) return grad(t) + element;
  return grad_working_.window(static_cast<char*>(grads_.data()) +
                                  (t.offset + element) * dtype_size(grads_.dtype()),
                              grads_.dtype(), n);
}

void FullStorage::done_grad_rows(const TensorInfo& t, std::size_t element, std::size_t n) {
  if (t.unit != grad_table_unit_) return;
  grad_working_.window_back(static_cast<char*>(grads_.data()) +
                                (t.offset + element) * dtype_size(grads_.dtype()),
                            grads_.dtype(), n);
}

void FullStorage::read_as_bits(const TensorInfo& t) {
  if (param_bf16(t)) working_.skip(t.unit, t.offset - units_[t.unit].begin, t.numel);
}

void FullStorage::need_params(int unit, Pass) {
  if (params_.dtype() == DType::f32 || unit == table_unit_) return;
  working_.acquire(unit, unit_bytes(params_, unit), params_.dtype(), units_[unit].size());
}

void FullStorage::done_params(int unit) {
  if (params_.dtype() != DType::f32 && unit != table_unit_) working_.release(unit);
}

void FullStorage::gather_params_to_host(std::vector<float>& out) {
  out.resize(params_.numel());
  copy_to_host_as_f32(backend_, out.data(), params_.data(), params_.dtype(),
                      params_.numel());
}

void FullStorage::set_params_from_host(std::size_t first, const float* in, std::size_t n) {
  copy_from_host_as(backend_,
                    static_cast<char*>(params_.data()) + first * dtype_size(params_.dtype()),
                    params_.dtype(), in, n);
}

// Converted on the host: a checkpoint or initialisation should not need a
// device buffer of the whole arena.
void copy_to_host_as_f32(ComputeBackend& be, float* host, const void* dev, DType type,
                         std::size_t n) {
  if (type == DType::f32) return be.copy_to_host(host, dev, n * sizeof(float));
  std::vector<std::uint16_t> bits(n);
  be.copy_to_host(bits.data(), dev, n * sizeof(std::uint16_t));
  const bool bf = type == DType::bf16;
  for (std::size_t i = 0; i < n; ++i) host[i] = bf ? bf16_to_f32(bits[i]) : f16_to_f32(bits[i]);
}

void copy_from_host_as(ComputeBackend& be, void* dev, DType type, const float* host,
                       std::size_t n) {
  if (type == DType::f32) return be.copy_from_host(dev, host, n * sizeof(float));
  std::vector<std::uint16_t> bits(n);
  const bool bf = type == DType::bf16;
  for (std::size_t i = 0; i < n; ++i) bits[i] = bf ? f32_to_bf16(host[i]) : f32_to_f16(host[i]);
  be.copy_from_host(dev, bits.data(), n * sizeof(std::uint16_t));
}

}  // namespace trident
