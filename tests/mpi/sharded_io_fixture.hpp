// Synthetic sharded tensors for the checkpoint I/O tests (run with 4 ranks):
// layouts that split tensors along a dimension with vocabulary-style
// padding, replicate them, or cut them into flat ZeRO-style ranges; each
// element's expected bits; a fixture that writes them under one layout.
#pragma once
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "comm/agree.hpp"
#include "comm/mpi_communicator.hpp"
#include "core/error.hpp"
#include "checkpoint/checkpoint_reader.hpp"
#include "checkpoint/checkpoint_writer.hpp"
#include "checkpoint/checksum.hpp"
#include "support/test_support.hpp"

namespace trident::testing {


constexpr float kPadding = -777.0f;  // what padding holds in memory: must never reach a file

// How the 4 ranks hold each tensor: `shards` shards along split_dim (padded,
// like a vocabulary split over tensor ranks), each held by 4/shards ranks that
// are either replicas (only the first is counted) or ZeRO-style owners of
// consecutive flat ranges of the shard.
struct Layout {
  const char* name;
  int split_dim;  // -1: not split; 1 on a 1-d tensor means dim 0
  int shards;
  bool zero;
};
const Layout kLayouts[] = {
    {"dim0x4", 0, 4, false},      {"dim1x4", 1, 4, false},      {"dim0x2_replicas", 0, 2, false},
    {"dim1x2_zero", 1, 2, true},  {"dim0x2_zero", 0, 2, true},  {"flat_zero4", -1, 1, true},
    {"replicated", -1, 1, false},
};

struct Global {
  std::string name;
  std::vector<std::int64_t> shape;
  DType dtype;
};
const std::vector<Global> kTensors = {{"a", {10, 6}, DType::f32}, {"b", {7, 9}, DType::f32},
                                      {"c", {13}, DType::f32},    {"d", {3, 4, 5}, DType::f32},
                                      {"e", {5, 6}, DType::bf16},
                                      // Large enough for direct I/O of whole file blocks
                                      // (DirectFile::kMinBytes), with buffered ends.
                                      {"f", {70, 1001}, DType::f32}};

float value_f32(const std::string& name, std::uint64_t g) { return float(name[0]) + 0.25f * g; }
std::uint16_t value_u16(std::uint64_t g) { return std::uint16_t(g * 7 + 3); }

// This rank's part of one tensor under one layout, with its own memory.
struct Part {
  TensorInfo shard;
  std::size_t lo = 0, hi = 0;
  bool counted = false;
  std::vector<std::uint32_t> mem;  // hi - lo elements (16-bit ones use the low half)
  std::size_t esz = 4;

  TensorSlice slice() {
    TensorSlice s;
    s.shard = &shard, s.lo = lo, s.hi = hi, s.counted = counted;
    s.data = mem.data();
    return s;
  }
  // Element i of the range as stored bits.
  std::uint32_t at(std::size_t i) const {
    std::uint32_t v = 0;
    std::memcpy(&v, reinterpret_cast<const char*>(mem.data()) + i * esz, esz);
    return v;
  }
};

inline Part part_of(const Global& t, const Layout& l, int rank) {
  Part p;
  p.esz = dtype_size(t.dtype);
  p.shard.name = t.name;
  p.shard.global_shape = p.shard.shape = t.shape;
  const int split = l.split_dim < 0 ? -1 : std::min<int>(l.split_dim, int(t.shape.size()) - 1);
  const int per_shard = 4 / l.shards;
  const int shard = rank % l.shards, member = rank / l.shards;
  if (split >= 0) {
    p.shard.split_dim = split;
    p.shard.shard_rank = shard;
    p.shard.shape[split] = (t.shape[split] + l.shards - 1) / l.shards;  // padded
  }
  p.shard.numel = 1;
  for (auto d : p.shard.shape) p.shard.numel *= std::size_t(d);
  const std::size_t n = p.shard.numel;
  if (l.zero) {
    p.lo = n * member / per_shard, p.hi = n * (member + 1) / per_shard;
    p.counted = true;
  } else {
    p.lo = 0, p.hi = n;
    p.counted = member == 0;
  }
  p.mem.assign(p.hi - p.lo, 0);
  return p;
}

// The element the global tensor has at local position i, as bits (padding: 0).
inline std::uint32_t expected_bits(const Global& t, const Part& p, std::size_t i) {
  const std::int64_t g = p.shard.global_index(i);
  if (g < 0) return 0;
  if (t.dtype == DType::bf16) return value_u16(std::uint64_t(g));
  const float v = value_f32(t.name, std::uint64_t(g));
  std::uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}

inline void fill(const Global& t, Part& p) {
  for (std::size_t i = p.lo; i < p.hi; ++i) {
    std::uint32_t b = expected_bits(t, p, i);
    if (p.shard.global_index(i) < 0) std::memcpy(&b, &kPadding, 4);
    std::memcpy(reinterpret_cast<char*>(p.mem.data()) + (i - p.lo) * p.esz, &b, p.esz);
  }
}

inline std::uint64_t global_checksum(const Global& t) {
  std::size_t n = 1;
  for (auto d : t.shape) n *= std::size_t(d);
  std::vector<std::uint32_t> f(n);
  std::vector<std::uint16_t> h(n);
  for (std::size_t g = 0; g < n; ++g) {
    const float v = value_f32(t.name, g);
    std::memcpy(&f[g], &v, 4);
    h[g] = value_u16(g);
  }
  return t.dtype == DType::bf16 ? checksum_run(h.data(), 2, 0, n) : checksum_run(f.data(), 4, 0, n);
}

inline DatasetSpec spec_of(const Global& t) { return {"/params/" + t.name, t.shape, t.dtype}; }

class ShardedIo : public ::testing::Test {
 protected:
  MpiCommunicator world{MPI_COMM_WORLD, "world"};
  std::string dir = trident::testing::scratch_dir("ckpt_io");
  std::string file(const std::string& name) { return dir + "/" + name + ".h5"; }

  void write_under(const Layout& l, const std::string& path,
                   std::size_t piece_bytes = CheckpointWriter::kPieceBytes) {
    CheckpointWriter w(world, path, piece_bytes);
    w.write_meta(CheckpointMeta{});
    std::vector<DatasetSpec> specs;
    for (const Global& t : kTensors) specs.push_back(spec_of(t));
    w.create(specs);
    for (std::size_t i = 0; i < specs.size(); ++i) {
      Part p = part_of(kTensors[i], l, world.rank());
      fill(kTensors[i], p);
      w.write(i, p.slice());
    }
    w.finish();
  }
};

inline std::string agreed_message(const std::function<void()>& f, int* code) {
  try {
    f();
  } catch (const AgreedError& e) {
    *code = e.exit_code;
    return e.what();
  }
  *code = 0;
  return "";
}

}  // namespace trident::testing
