#include "checkpoint/tensor_slice.hpp"

#include <algorithm>
#include <cstring>

namespace trident {
namespace {

// Shapes as used here: a 0-d tensor is one element.
std::vector<std::int64_t> dims_of(const std::vector<std::int64_t>& shape) {
  return shape.empty() ? std::vector<std::int64_t>{1} : shape;
}

// Appends the boxes of flat range [lo, hi) of the sub-array at `prefix` (whose
// dimensions before d are fixed) of an array of shape `s`, in flat order.
void decompose(const std::vector<std::int64_t>& s, std::size_t d,
               std::vector<std::int64_t>& prefix, std::int64_t lo, std::int64_t hi,
               std::vector<SliceBox>& out) {
  if (lo >= hi) return;
  const std::size_t n = s.size();
  auto box = [&](std::int64_t first, std::int64_t rows) {
    SliceBox b;
    b.local_start = prefix;
    b.local_start.push_back(first);
    b.count.assign(d, 1);
    b.count.push_back(rows);
    for (std::size_t j = d + 1; j < n; ++j) b.local_start.push_back(0), b.count.push_back(s[j]);
    out.push_back(std::move(b));
  };
  if (d + 1 == n) return box(lo, hi - lo);
  std::int64_t row = 1;  // elements per index of dimension d
  for (std::size_t j = d + 1; j < n; ++j) row *= s[j];
  auto within_row = [&](std::int64_t r, std::int64_t a, std::int64_t b) {
    prefix.push_back(r);
    decompose(s, d + 1, prefix, a, b, out);
    prefix.pop_back();
  };
  std::int64_t first = lo / row;
  const std::int64_t last = (hi - 1) / row;
  if (first == last) return within_row(first, lo - first * row, hi - first * row);
  if (lo % row != 0) within_row(first, lo % row, row), ++first;  // partial first row
  const std::int64_t end = hi / row;                              // rows [first, end) are whole
  if (end > first) box(first, end - first);
  if (hi % row != 0) within_row(end, 0, hi % row);  // partial last row
}

}  // namespace

TensorSlice whole_shard(const TensorInfo& t, void* data, bool counted) {
  TensorSlice s;
  s.shard = &t;
  s.lo = 0;
  s.hi = t.numel;
  s.data = data;
  s.counted = counted;
  return s;
}

std::int64_t SliceBox::numel() const {
  std::int64_t n = 1;
  for (auto c : count) n *= c;
  return n;
}

std::size_t boxes_numel(const std::vector<SliceBox>& boxes) {
  std::size_t n = 0;
  for (const auto& b : boxes) n += std::size_t(b.numel());
  return n;
}

std::vector<SliceBox> slice_boxes(const TensorInfo& t, std::size_t lo, std::size_t hi) {
  std::vector<SliceBox> boxes, out;
  if (lo >= hi) return out;
  const auto shape = dims_of(t.shape);
  const auto global = dims_of(t.global_shape);
  std::vector<std::int64_t> prefix;
  decompose(shape, 0, prefix, std::int64_t(lo), std::int64_t(hi), boxes);
  const int split = t.split_dim;
  for (SliceBox& b : boxes) {
    b.global_start = b.local_start;
    if (split >= 0 && !t.segments.empty()) {
      // One box per segment it crosses (split_dim is 0: the boxes stay in flat order).
      for (std::int64_t at = b.local_start[0], end = at + b.count[0]; at < end;) {
        const std::int64_t n = std::min(t.segment_run(at), end - at);
        SliceBox part = b;
        part.local_start[0] = at;
        part.global_start[0] = t.global_split_index(at);
        part.count[0] = n;
        out.push_back(std::move(part));
        at += n;
      }
      continue;
    }
    if (split >= 0) {
      // Shift to the shard's place along split_dim and clip the padding off.
      const std::int64_t g0 = b.local_start[split] + std::int64_t(t.shard_rank) * shape[split];
      const std::int64_t g1 = std::min(g0 + b.count[split], global[split]);
      if (g1 <= g0) continue;
      b.global_start[split] = g0;
      b.count[split] = g1 - g0;
    }
    out.push_back(std::move(b));
  }
  return out;
}

void for_each_run(const TensorInfo& t, const SliceBox& b, const RunFn& fn) {
  const auto shape = dims_of(t.shape);
  const auto global = dims_of(t.global_shape);
  const std::size_t n = shape.size();
  // Trailing dimensions the box spans whole in both the shard and the global
  // tensor are contiguous in both: a run covers them and the next one in.
  std::size_t k = n - 1;
  while (k > 0 && b.count[k] == shape[k] && b.count[k] == global[k]) --k;
  std::size_t len = 1;
  for (std::size_t j = k; j < n; ++j) len *= std::size_t(b.count[j]);
  std::vector<std::int64_t> lstride(n, 1), gstride(n, 1);
  for (std::size_t j = n - 1; j > 0; --j) {
    lstride[j - 1] = lstride[j] * shape[j];
    gstride[j - 1] = gstride[j] * global[j];
  }
  std::vector<std::int64_t> idx(k, 0);  // position among the runs (dimensions before k)
  while (true) {
    std::int64_t l = 0, g = 0;
    for (std::size_t j = 0; j < n; ++j) {
      const std::int64_t off = j < k ? idx[j] : 0;
      l += (b.local_start[j] + off) * lstride[j];
      g += (b.global_start[j] + off) * gstride[j];
    }
    fn(std::size_t(l), std::uint64_t(g), len);
    std::size_t j = k;
    while (j > 0 && ++idx[j - 1] == b.count[j - 1]) idx[--j] = 0;
    if (j == 0) break;
  }
}

TensorSlice sub_slice(const TensorSlice& s, std::size_t lo, std::size_t hi, std::size_t esz) {
  TensorSlice part = s;
  part.lo = lo, part.hi = hi;
  part.data = static_cast<char*>(s.data) + (lo - s.lo) * esz;
  return part;
}

std::optional<FileRun> contiguous_run(const TensorSlice& s) {
  if (s.empty()) return std::nullopt;
  std::optional<FileRun> run;
  bool contiguous = true;
  for (const SliceBox& b : slice_boxes(*s.shard, s.lo, s.hi))
    for_each_run(*s.shard, b, [&](std::size_t l, std::uint64_t g, std::size_t len) {
      if (!run) run = FileRun{l, l, g};
      // Consecutive in memory and in the global tensor: no gap on either side.
      else if (l != run->hi || g != run->first + (run->hi - run->lo)) contiguous = false;
      run->hi = l + len;
    });
  return contiguous ? run : std::nullopt;
}

std::vector<std::pair<std::size_t, std::size_t>> slice_pieces(const TensorSlice& s,
                                                              std::size_t esz,
                                                              std::uint64_t file_offset,
                                                              std::size_t piece_bytes) {
  std::vector<std::pair<std::size_t, std::size_t>> pieces;
  if (s.empty()) return pieces;
  const std::optional<FileRun> run = contiguous_run(s);
  const std::size_t per_piece = std::max<std::size_t>(1, piece_bytes / esz);
  std::size_t lo = s.lo;
  if (run && run->lo == s.lo) {  // a first, shorter piece up to a piece boundary in the file
    const std::uint64_t at = file_offset + run->first * esz, to_boundary = piece_bytes - at % piece_bytes;
    const std::size_t head = std::size_t(to_boundary / esz);
    if (to_boundary % piece_bytes != 0 && head > 0 && head < s.hi - lo)
      pieces.emplace_back(lo, lo + head), lo += head;
  }
  for (; lo < s.hi; lo += std::min(per_piece, s.hi - lo))
    pieces.emplace_back(lo, lo + std::min(per_piece, s.hi - lo));
  return pieces;
}

void pack_slice(const TensorSlice& s, const std::vector<SliceBox>& boxes, std::size_t esz,
                void* packed) {
  auto* dst = static_cast<char*>(packed);
  const auto* src = static_cast<const char*>(s.data);
  for (const SliceBox& b : boxes)
    for_each_run(*s.shard, b, [&](std::size_t l, std::uint64_t, std::size_t len) {
      std::memcpy(dst, src + (l - s.lo) * esz, len * esz);
      dst += len * esz;
    });
}

void unpack_slice(const TensorSlice& s, const std::vector<SliceBox>& boxes, std::size_t esz,
                  const void* packed) {
  auto* dst = static_cast<char*>(s.data);
  std::memset(dst, 0, (s.hi - s.lo) * esz);  // padding reads back as zero
  const auto* src = static_cast<const char*>(packed);
  for (const SliceBox& b : boxes)
    for_each_run(*s.shard, b, [&](std::size_t l, std::uint64_t, std::size_t len) {
      std::memcpy(dst + (l - s.lo) * esz, src, len * esz);
      src += len * esz;
    });
}

}  // namespace trident
