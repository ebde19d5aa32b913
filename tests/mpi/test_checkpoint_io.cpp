// The generic sharded checkpoint path on synthetic tensors (run with 4 ranks):
// flat ranges of shards map to the right global boxes; tensors split along dim
// 0 or 1 with vocabulary-style padding, replicated, or cut into flat ZeRO-style
// ranges are written under one layout and read back under every other one,
// equal to the global tensor, whether written or read whole or in small pieces;
// padding is never written; checksums do not
// depend on the layout; corrupt, truncated and incomplete files are refused.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "comm/agree.hpp"
#include "comm/mpi_communicator.hpp"
#include "core/error.hpp"
#include "io/checkpoint_reader.hpp"
#include "io/checkpoint_writer.hpp"
#include "io/checksum.hpp"
#include "support/test_support.hpp"

using namespace trident;

namespace {

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

Part part_of(const Global& t, const Layout& l, int rank) {
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
std::uint32_t expected_bits(const Global& t, const Part& p, std::size_t i) {
  const std::int64_t g = p.shard.global_index(i);
  if (g < 0) return 0;
  if (t.dtype == DType::bf16) return value_u16(std::uint64_t(g));
  const float v = value_f32(t.name, std::uint64_t(g));
  std::uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}

void fill(const Global& t, Part& p) {
  for (std::size_t i = p.lo; i < p.hi; ++i) {
    std::uint32_t b = expected_bits(t, p, i);
    if (p.shard.global_index(i) < 0) std::memcpy(&b, &kPadding, 4);
    std::memcpy(reinterpret_cast<char*>(p.mem.data()) + (i - p.lo) * p.esz, &b, p.esz);
  }
}

std::uint64_t global_checksum(const Global& t) {
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

DatasetSpec spec_of(const Global& t) { return {"/params/" + t.name, t.shape, t.dtype}; }

class ShardedIo : public ::testing::Test {
 protected:
  MpiCommunicator world{MPI_COMM_WORLD, "world"};
  std::string dir = trident::testing::scratch_dir("ckpt_io");
  std::string file(const std::string& name) { return dir + "/" + name + ".h5"; }

  void write_under(const Layout& l, const std::string& path,
                   std::size_t piece_bytes = CheckpointWriter::kPieceBytes) {
    CheckpointWriter w(world, path, piece_bytes);
    w.write_meta(CheckpointMeta{});
    for (const Global& t : kTensors) {
      Part p = part_of(t, l, world.rank());
      fill(t, p);
      w.write(spec_of(t), p.slice());
    }
    w.finish();
  }
};

std::string agreed_message(const std::function<void()>& f, int* code) {
  try {
    f();
  } catch (const AgreedError& e) {
    *code = e.exit_code;
    return e.what();
  }
  *code = 0;
  return "";
}

}  // namespace

TEST(SliceBoxes, CoverExactlyTheRangeWithoutPaddingInOrder) {
  // Every range of every shard of a few shapes, against TensorInfo::global_index.
  const std::vector<std::vector<std::int64_t>> shapes = {{7}, {5, 3}, {3, 4, 5}, {2, 3, 2, 3}};
  for (const auto& global : shapes)
    for (int split = -1; split < int(global.size()); ++split)
      for (int shards : {1, 2, 3}) {
        TensorInfo t;
        t.global_shape = t.shape = global;
        if (split >= 0) t.split_dim = split, t.shape[split] = (global[split] + shards - 1) / shards;
        t.numel = 1;
        for (auto d : t.shape) t.numel *= std::size_t(d);
        for (int r = 0; r < (split >= 0 ? shards : 1); ++r) {
          t.shard_rank = r;
          for (std::size_t lo = 0; lo <= t.numel; ++lo)
            for (std::size_t hi = lo; hi <= t.numel; ++hi) {
              std::vector<std::pair<std::size_t, std::int64_t>> want, got;
              for (std::size_t i = lo; i < hi; ++i)
                if (t.global_index(i) >= 0) want.emplace_back(i, t.global_index(i));
              const auto boxes = slice_boxes(t, lo, hi);
              EXPECT_LE(boxes.size(), 2 * global.size() - 1);
              for (const SliceBox& b : boxes)
                for_each_run(t, b, [&](std::size_t l, std::uint64_t g, std::size_t len) {
                  for (std::size_t k = 0; k < len; ++k) got.emplace_back(l + k, g + k);
                });
              ASSERT_EQ(got, want) << "split " << split << " shards " << shards << " rank " << r
                                   << " range [" << lo << ", " << hi << ")";
              EXPECT_EQ(boxes_numel(boxes), want.size());
            }
        }
      }
}

TEST(SlicePieces, PartitionTheRangeAndCutContiguousRangesOnFileMultiples) {
  TensorInfo t;
  t.global_shape = t.shape = {40, 25};
  t.numel = 1000;
  for (std::uint64_t file_offset : {0, 4, 1000})
    for (std::size_t lo : {0, 3, 333})
      for (std::size_t piece_bytes : {16, 64, 4000, 1 << 20}) {
        TensorSlice s = whole_shard(t, &t, true);
        s.lo = lo;
        const auto pieces = slice_pieces(s, 4, file_offset, piece_bytes);
        std::size_t next = lo;
        for (const auto& [a, b] : pieces) {
          ASSERT_EQ(a, next);
          ASSERT_GT(b, a);
          ASSERT_LE((b - a) * 4, piece_bytes);
          if (a != lo) EXPECT_EQ((file_offset + a * 4) % piece_bytes, 0u) << a;
          next = b;
        }
        EXPECT_EQ(next, t.numel);
      }
  // A column shard is not contiguous in the file: plain cuts from lo.
  t.split_dim = 1, t.shape = {40, 13};
  t.numel = 520;
  const auto pieces = slice_pieces(whole_shard(t, &t, true), 4, 4, 64);
  ASSERT_EQ(pieces.front(), std::make_pair(std::size_t(0), std::size_t(16)));
}

TEST_F(ShardedIo, WrittenUnderOneLayoutReadsBackUnderEveryOther) {
  for (const Layout& w : kLayouts) {
    const std::string path = file(std::string("w_") + w.name);
    // Every other layout writes (and reads) in pieces of 20 bytes: many
    // independent writes per tensor, a different number on each rank,
    // padding inside pieces.
    write_under(w, path, (&w - kLayouts) % 2 ? 20 : CheckpointWriter::kPieceBytes);
    for (const Layout& r : kLayouts) {
      CheckpointReader reader(world, path,
                              (&r - kLayouts) % 2 ? 20 : CheckpointReader::kPieceBytes);
      std::vector<Part> parts;
      for (const Global& t : kTensors) {
        parts.push_back(part_of(t, r, world.rank()));
        std::fill(parts.back().mem.begin(), parts.back().mem.end(), 0xDEADBEEFu);
        reader.read(spec_of(t), parts.back().slice());
      }
      EXPECT_NO_THROW(reader.verify()) << w.name << " -> " << r.name;
      for (std::size_t k = 0; k < kTensors.size(); ++k)
        for (std::size_t i = parts[k].lo; i < parts[k].hi; ++i)
          ASSERT_EQ(parts[k].at(i - parts[k].lo), expected_bits(kTensors[k], parts[k], i))
              << "written " << w.name << ", read " << r.name << ", tensor " << kTensors[k].name
              << ", local element " << i;
    }
    // The stored checksums are the global tensors' own, whoever wrote them.
    CheckpointReader reader(world, path);
    const auto stored = reader.datasets();
    ASSERT_EQ(stored.size(), kTensors.size());
    for (std::size_t k = 0; k < kTensors.size(); ++k) {
      EXPECT_EQ(stored[k].spec.path, spec_of(kTensors[k]).path);
      EXPECT_EQ(stored[k].spec.shape, kTensors[k].shape);  // global, never padded
      EXPECT_EQ(stored[k].spec.dtype, kTensors[k].dtype);
      EXPECT_EQ(stored[k].checksum, global_checksum(kTensors[k])) << w.name << " " << k;
    }
  }
}

TEST_F(ShardedIo, ChecksumsCatchAFlippedByteTruncationAndIncompleteFiles) {
  const std::string good = file("good"), bad = file("flipped"), cut = file("truncated");
  write_under(kLayouts[1], good);
  if (world.rank() == 0) {
    std::filesystem::copy_file(good, bad, std::filesystem::copy_options::overwrite_existing);
    hid_t f = H5Fopen(good.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "/params/b", H5P_DEFAULT);
    const haddr_t at = H5Dget_offset(d);
    H5Dclose(d), H5Fclose(f);
    std::fstream io(bad, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(std::streamoff(at + 13));
    char c = 0;
    io.read(&c, 1);
    c ^= 0x10;
    io.seekp(std::streamoff(at + 13));
    io.write(&c, 1);
    io.close();
    std::filesystem::copy_file(good, cut, std::filesystem::copy_options::overwrite_existing);
    std::filesystem::resize_file(cut, std::filesystem::file_size(cut) / 2);
  }
  world.barrier();
  int code = 0;
  std::string msg = agreed_message(
      [&] {
        CheckpointReader reader(world, bad);
        for (const Global& t : kTensors) {
          Part p = part_of(t, kLayouts[2], world.rank());
          reader.read(spec_of(t), p.slice());
        }
        reader.verify();
      },
      &code);
  EXPECT_EQ(code, kExitBadInput);
  EXPECT_NE(msg.find(bad + ": dataset /params/b is corrupt"), std::string::npos) << msg;

  msg = agreed_message([&] { CheckpointReader reader(world, cut); }, &code);
  EXPECT_EQ(code, kExitBadInput);
  EXPECT_NE(msg.find(cut + ": not a readable checkpoint"), std::string::npos) << msg;

  // A writer that never finished leaves a file without the completion marker.
  const std::string partial = file("partial");
  {
    CheckpointWriter w(world, partial);
    w.write_meta(CheckpointMeta{});
  }
  msg = agreed_message([&] { CheckpointReader reader(world, partial); }, &code);
  EXPECT_EQ(code, kExitBadInput);
  EXPECT_NE(msg.find("the checkpoint is incomplete"), std::string::npos) << msg;

  msg = agreed_message([&] { CheckpointReader reader(world, file("nonexistent")); }, &code);
  EXPECT_EQ(code, kExitBadInput);
  EXPECT_NE(msg.find("no such checkpoint file"), std::string::npos) << msg;

  msg = agreed_message(
      [&] {
        CheckpointReader reader(world, good);
        Global wrong = kTensors[0];
        wrong.shape[0] += 1;
        Part p = part_of(wrong, kLayouts[0], world.rank());
        reader.read(spec_of(wrong), p.slice());
      },
      &code);
  EXPECT_EQ(code, kExitBadInput);
  EXPECT_NE(msg.find("dataset /params/a is f32 [10, 6] but the model needs f32 [11, 6]"),
            std::string::npos) << msg;
}

TEST_F(ShardedIo, SlicesThatDoNotCoverATensorExactlyOnceAreALayoutBug) {
  // Every rank counting its replica would write each element four times.
  int code = 0;
  const std::string msg = agreed_message(
      [&] {
        CheckpointWriter w(world, file("overlap"));
        Part p = part_of(kTensors[2], kLayouts[6], world.rank());
        fill(kTensors[2], p);
        p.counted = true;
        w.write(spec_of(kTensors[2]), p.slice());
        w.finish();
      },
      &code);
  EXPECT_EQ(code, kExitRuntime);
  EXPECT_NE(msg.find("the ranks wrote 52 of its 13 elements"), std::string::npos) << msg;
}
