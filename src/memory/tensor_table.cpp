#include "memory/tensor_table.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace trident {

const TensorInfo& TensorTable::add(TensorInfo info) {
  if (index_.count(info.name)) throw std::logic_error("duplicate tensor " + info.name);
  std::size_t n = 1;
  for (auto d : info.shape) n *= static_cast<std::size_t>(d);
  if (info.global_shape.empty()) info.global_shape = info.shape;
  info.numel = n;
  info.offset = (end_ + kAlign - 1) / kAlign * kAlign;
  end_ = info.offset + n;
  numel_ += n;
  index_[info.name] = tensors_.size();
  tensors_.push_back(std::move(info));
  return tensors_.back();
}

const TensorInfo* TensorTable::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& TensorTable::at(const std::string& name) const {
  const TensorInfo* t = find(name);
  if (!t) throw std::out_of_range(fmt::format("no tensor named '{}'", name));
  return *t;
}

}  // namespace trident
