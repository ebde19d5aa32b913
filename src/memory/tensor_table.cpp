#include "memory/tensor_table.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace trident {

std::int64_t TensorInfo::global_index(std::size_t i) const {
  if (split_dim < 0) return std::int64_t(i);
  std::int64_t rem = std::int64_t(i), g = 0, stride = 1;
  for (int d = int(shape.size()) - 1; d >= 0; --d) {
    std::int64_t idx = rem % shape[d];
    rem /= shape[d];
    if (d == split_dim && (idx = global_split_index(idx)) < 0) return -1;
    g += idx * stride;
    stride *= global_shape[d];
  }
  return g;
}

std::int64_t TensorInfo::global_split_index(std::int64_t local) const {
  const std::int64_t d = split_dim;
  if (segments.empty()) {
    const std::int64_t g = local + std::int64_t(shard_rank) * shape[d];
    return g < global_shape[d] ? g : -1;
  }
  const std::int64_t ranks = global_shape[d] / shape[d];  // segments divide evenly, no padding
  std::int64_t global_start = 0;
  for (std::int64_t extent : segments) {
    const std::int64_t mine = extent / ranks;
    if (local < mine) return global_start + std::int64_t(shard_rank) * mine + local;
    local -= mine, global_start += extent;
  }
  return -1;
}

std::int64_t TensorInfo::segment_run(std::int64_t local) const {
  const std::int64_t d = split_dim;
  if (segments.empty()) return shape[d] - local;
  const std::int64_t ranks = global_shape[d] / shape[d];
  std::int64_t end = 0;
  for (std::int64_t extent : segments)
    if ((end += extent / ranks) > local) return end - local;
  return 0;
}

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

namespace {
thread_local std::uint64_t lookups_made = 0;
}  // namespace

std::uint64_t TensorTable::lookups() { return lookups_made; }

const TensorInfo* TensorTable::find(const std::string& name) const {
  ++lookups_made;
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& TensorTable::at(const std::string& name) const {
  const TensorInfo* t = find(name);
  if (!t) throw std::out_of_range(fmt::format("no tensor named '{}'", name));
  return *t;
}

std::vector<UnitRange> unit_ranges(const TensorTable& table) {
  std::vector<UnitRange> units;
  bool open = false;  // the last plain unit ends where the next unit begins
  auto close = [&](std::size_t end) {
    if (open) units.back().piece = units.back().stride = end - units.back().begin;
    open = false;
  };
  for (const TensorInfo& t : table.tensors()) {
    if (t.unit < int(units.size())) continue;
    close(t.offset);
    if (t.units > 1) {
      for (int k = 0; k < t.units; ++k)
        units.push_back({t.offset + k * t.piece, t.piece, t.units * t.piece,
                         std::size_t(t.pieces / t.units)});
    } else {
      units.push_back({units.empty() ? 0 : t.offset, 0, 0, 1});
      open = true;
    }
  }
  close(table.size());
  return units;
}

}  // namespace trident
