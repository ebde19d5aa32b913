// The generic sharded checkpoint path on synthetic tensors (run with 4 ranks):
// flat ranges of shards map to the right global boxes; tensors split along dim
// 0 or 1 with vocabulary-style padding, replicated, or cut into flat ZeRO-style
// ranges are written under one layout and read back under every other one,
// equal to the global tensor, whether written or read whole or in small pieces;
// padding is never written; checksums do not depend on the layout.
#include "sharded_io_fixture.hpp"

using namespace trident;
using namespace trident::testing;

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
