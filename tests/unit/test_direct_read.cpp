// The direct read stream: many ranges of one file, at any offsets and
// lengths, given in any order, land byte for byte where they belong; each
// range's pieces tile it in order; a range past the end of the file is named.
// And the write queue: what it writes lands, and its thread's CPU time is counted.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "checkpoint/direct_io.hpp"
#include "core/timer.hpp"

using namespace trident;

namespace {

class DirectRead : public ::testing::Test {
 protected:
  void SetUp() override {
    // The build tree, not /tmp: tmpfs has no O_DIRECT.
    path_ = (std::filesystem::current_path() / "direct_read_test.bin").string();
    std::mt19937_64 rng(7);
    bytes_.resize(9 * DirectFile::kPieceBytes + 1234);  // not a whole block at the end
    for (auto& b : bytes_) b = char(rng());
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(bytes_.data(), 1, bytes_.size(), f), bytes_.size());
    std::fclose(f);
  }
  void TearDown() override { std::filesystem::remove(path_); }

  std::string path_;
  std::vector<char> bytes_;
};

}  // namespace

TEST_F(DirectRead, RangesInAnyOrderLandWhole) {
  DirectFile file(path_, false);
  if (!file.ok()) GTEST_SKIP() << "no O_DIRECT on this file system";
  // Disjoint ranges: tiny, odd, adjacent, block-sized, across pieces, far
  // apart (past kMaxGap), the file's last byte; then shuffled.
  const std::vector<std::pair<std::uint64_t, std::size_t>> spans = {
      {0, 1}, {1, 4095}, {4096, 4096}, {8192, 3}, {8200, 3 * DirectFile::kPieceBytes},
      {4 * DirectFile::kPieceBytes + 17, 100}, {6 * DirectFile::kPieceBytes + 5, 2 * DirectFile::kPieceBytes},
      {bytes_.size() - 1, 1}, {bytes_.size() - 900, 0}};
  std::vector<std::vector<char>> out;
  std::vector<DirectFile::ReadRange> ranges;
  for (const auto& [at, len] : spans) out.emplace_back(len + 1, '\x5a');  // one guard byte
  for (std::size_t i = 0; i < spans.size(); ++i)
    ranges.push_back({spans[i].first, spans[i].second, out[i].data()});
  std::shuffle(ranges.begin(), ranges.end(), std::mt19937(3));
  std::vector<std::size_t> seen(ranges.size(), 0);
  file.read_ranges(ranges, [&](std::size_t r, const char* p, std::size_t from, std::size_t n) {
    ASSERT_LT(r, ranges.size());
    EXPECT_EQ(from, seen[r]) << "range " << r << ": pieces out of order or overlapping";
    EXPECT_EQ(p, ranges[r].dst + from);
    EXPECT_GT(n, 0u);
    seen[r] += n;
  });
  for (std::size_t r = 0; r < ranges.size(); ++r) {
    EXPECT_EQ(seen[r], ranges[r].len) << "range " << r;
    const std::vector<char> want(bytes_.begin() + ranges[r].at,
                                 bytes_.begin() + ranges[r].at + ranges[r].len);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), ranges[r].dst)) << "range " << r;
    EXPECT_EQ(ranges[r].dst[ranges[r].len], '\x5a') << "range " << r << " wrote past its end";
  }
}

TEST_F(DirectRead, ARangePastTheEndOfTheFileIsNamed) {
  DirectFile file(path_, false);
  if (!file.ok()) GTEST_SKIP() << "no O_DIRECT on this file system";
  std::vector<char> a(1000), b(5000);
  const std::vector<DirectFile::ReadRange> ranges = {{bytes_.size() - 100, b.size(), b.data()},
                                                     {10, a.size(), a.data()}};
  try {
    file.read_ranges(ranges, [](std::size_t, const char*, std::size_t, std::size_t) {});
    FAIL() << "read past the end of the file";
  } catch (const ReadRangeError& e) {
    EXPECT_EQ(e.range, 0u);
    EXPECT_NE(std::string(e.what()).find("the file ends at byte " + std::to_string(bytes_.size())),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(std::equal(a.begin(), a.end(), bytes_.begin() + 10));  // read before the failure
}

TEST_F(DirectRead, ReadersHandTransfersBackInOrderAndAFailureWhereItHappened) {
  const int fd = ::open(path_.c_str(), O_RDONLY | O_DIRECT);
  if (fd < 0) GTEST_SKIP() << "no O_DIRECT on this file system";
  // Twelve transfers through three buffers on three readers; transfer 7 is
  // not block-aligned, so O_DIRECT refuses it (EINVAL) and only it fails.
  std::vector<Transfer> transfers;
  for (std::uint64_t t = 0; t < 12; ++t)
    transfers.push_back({t * DirectFile::kPieceBytes / 2 + (t == 7 ? 512 + 1 : 0),
                         DirectFile::kPieceBytes / 2});
  const AlignedBuffers buffers(3, DirectFile::kPieceBytes / 2, DirectFile::kBlock);
  {
    ReadAhead ahead(fd, transfers, buffers, 3);
    for (std::size_t t = 0; t < 7; ++t) {
      const auto [data, got] = ahead.wait(t);
      ASSERT_EQ(got, transfers[t].len) << t;
      EXPECT_TRUE(std::equal(data, data + got, bytes_.begin() + transfers[t].at)) << t;
      ahead.release(t);
    }
    EXPECT_THROW(ahead.wait(7), RuntimeFailure);
  }  // the destructor stops the readers still waiting for buffers
  ::close(fd);
}

TEST_F(DirectRead, TheWriteQueueLandsItsBuffersAndCountsItsCpuTime) {
  DirectFile file(path_, true);
  if (!file.ok()) GTEST_SKIP() << "no O_DIRECT on this file system";
  EXPECT_EQ(file.write_cpu_seconds(), 0.0);
  const std::size_t pieces = 8, n = DirectFile::kPieceBytes;
  const double wall0 = now_seconds();
  for (std::size_t p = 0; p < pieces; ++p) {
    char* buf = file.acquire_buffer();
    std::memset(buf, int('a' + p), n);
    file.submit_buffer(buf, p * n, n);
  }
  file.drain();
  const double wall = now_seconds() - wall0, cpu = file.write_cpu_seconds();
  EXPECT_GT(cpu, 0.0);  // eight system calls of 2 MiB take some
  EXPECT_LE(cpu, wall);
  std::ifstream in(path_, std::ios::binary);
  const std::vector<char> got{std::istreambuf_iterator<char>(in), {}};
  ASSERT_GE(got.size(), pieces * n);
  for (std::size_t p = 0; p < pieces; ++p)
    EXPECT_EQ(got[p * n + n / 2], char('a' + p)) << "piece " << p;
}
