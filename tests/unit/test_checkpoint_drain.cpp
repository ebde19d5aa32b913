// The checkpoint drain's waves: pieces that are not host memory (device or
// offloaded state) are read through their reader into a bounded staging, as
// many as it holds at a time, and land byte for byte with the checksums a
// direct copy gives; release_sources() reads on its own thread what the drain
// has not, so a source changed afterwards (the optimizer step) leaves the file
// as it was; a reader failing in the middle of a wave is the drain's error.
// Aligned training state is written in place, and released only once written.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/checkpoint_drain.hpp"
#include "checkpoint/checksum.hpp"
#include "checkpoint/direct_io.hpp"
#include "core/error.hpp"
#include "train/async_save.hpp"

using namespace trident;

namespace {

constexpr std::size_t kPieces = 12, kPieceBytes = 1000;  // floats: 250 a piece

class DrainWaves : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::current_path() / "drain_waves_test.bin").string();
    std::ofstream(path_, std::ios::binary).write(std::string(kPieces * kPieceBytes, '\0').data(),
                                                 kPieces * kPieceBytes);
    source_.resize(kPieces * kPieceBytes / sizeof(float));
    for (std::size_t i = 0; i < source_.size(); ++i) source_[i] = float(i) * 0.25f - 7.0f;
  }
  void TearDown() override { std::filesystem::remove(path_); }

  // Pieces whose src is an offset into source_, never dereferenced.
  std::vector<DrainPiece> pieces(const PieceReader* reader) const {
    std::vector<DrainPiece> out;
    for (std::size_t p = 0; p < kPieces; ++p) {
      DrainPiece d;
      d.src = reinterpret_cast<const char*>(std::uintptr_t(p * kPieceBytes + 1));
      d.bytes = kPieceBytes;
      d.at = p * kPieceBytes;
      d.first = p * kPieceBytes / sizeof(float);
      d.reader = reader;
      out.push_back(d);
    }
    return out;
  }
  void read_source(const char* src, std::size_t bytes, char* out) const {
    std::memcpy(out, reinterpret_cast<const char*>(source_.data()) + (std::uintptr_t(src) - 1),
                bytes);
  }
  std::vector<char> file() const {
    std::ifstream in(path_, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }

  std::string path_;
  std::vector<float> source_;
};

TEST_F(DrainWaves, ReadsInWavesTheStagingHolds) {
  const PieceReader reader = [&](const char* src, std::size_t n, char* out) {
    read_source(src, n, out);
  };
  std::vector<char> staging(2500);  // two pieces a wave
  CheckpointDrain drain(path_, nullptr, pieces(&reader), {"/d"}, 1, 1, staging.data(),
                        staging.size());
  drain.wait(30);
  ASSERT_FALSE(drain.error());
  EXPECT_EQ(drain.waves(), kPieces / 2);
  EXPECT_EQ(drain.staged_bytes(), kPieces * kPieceBytes);
  const std::vector<char> got = file();
  ASSERT_EQ(got.size(), kPieces * kPieceBytes);
  EXPECT_EQ(std::memcmp(got.data(), source_.data(), got.size()), 0);
  EXPECT_EQ(drain.sums().at(0), checksum_run(source_.data(), 4, 0, source_.size(), false));
}

TEST_F(DrainWaves, ReleaseReadsWhatTheDrainHasNot) {
  const std::thread::id main = std::this_thread::get_id();
  std::atomic<int> on_main{0};
  const PieceReader reader = [&](const char* src, std::size_t n, char* out) {
    if (std::this_thread::get_id() == main) ++on_main;
    // A slow device or disk: slow enough that the main thread reaches
    // release_sources() before the drain is through, even on a loaded machine.
    else std::this_thread::sleep_for(std::chrono::milliseconds(250));
    read_source(src, n, out);
  };
  const std::vector<float> saved = source_;
  std::vector<char> staging(kPieceBytes);  // one piece a wave
  CheckpointDrain drain(path_, nullptr, pieces(&reader), {"/d"}, 1, 1, staging.data(),
                        staging.size());
  drain.release_sources(kPieces * kPieceBytes, 30);
  for (float& x : source_) x = -1.0f;  // the optimizer step
  drain.wait(30);
  ASSERT_FALSE(drain.error());
  EXPECT_GT(on_main.load(), 0);
  EXPECT_EQ(drain.copied_bytes(), std::size_t(on_main.load()) * kPieceBytes);
  EXPECT_LT(drain.waves(), kPieces);
  const std::vector<char> got = file();
  EXPECT_EQ(std::memcmp(got.data(), saved.data(), got.size()), 0);
}

TEST_F(DrainWaves, ReleaseWaitsWhenTheBoundIsSmall) {
  std::atomic<int> calls{0};
  const PieceReader reader = [&](const char* src, std::size_t n, char* out) {
    ++calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    read_source(src, n, out);
  };
  const std::vector<float> saved = source_;
  std::vector<char> staging(3 * kPieceBytes);
  CheckpointDrain drain(path_, nullptr, pieces(&reader), {"/d"}, 1, 1, staging.data(),
                        staging.size());
  drain.release_sources(0, 30);  // nothing may be copied: every piece read by the drain first
  for (float& x : source_) x = -1.0f;
  drain.wait(30);
  ASSERT_FALSE(drain.error());
  EXPECT_EQ(drain.copied_bytes(), 0u);
  EXPECT_EQ(drain.waves(), kPieces / 3);
  EXPECT_EQ(calls.load(), int(kPieces));
  const std::vector<char> got = file();
  EXPECT_EQ(std::memcmp(got.data(), saved.data(), got.size()), 0);
}

// pause(): the thread starts no piece (an update on the same disk has it to
// itself); wait() resumes it, so waiting for a paused drain never hangs.
TEST_F(DrainWaves, PausedDrainStartsNoPieceAndWaitResumes) {
  const PieceReader reader = [&](const char* src, std::size_t n, char* out) {
    read_source(src, n, out);
  };
  std::vector<char> staging(2 * kPieceBytes);
  CheckpointDrain drain(path_, nullptr, pieces(&reader), {"/d"}, 1, 1, staging.data(),
                        staging.size());
  drain.pause();  // the thread may be through one wave already, no further
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(drain.finished());
  EXPECT_LE(drain.waves(), 1u);
  drain.wait(30);
  ASSERT_FALSE(drain.error());
  EXPECT_EQ(drain.waves(), kPieces / 2);
  const std::vector<char> got = file();
  EXPECT_EQ(std::memcmp(got.data(), source_.data(), got.size()), 0);
}

TEST_F(DrainWaves, ReaderFailingMidWaveIsTheDrainsError) {
  std::atomic<int> calls{0};
  const PieceReader reader = [&](const char* src, std::size_t n, char* out) {
    if (++calls == 5) throw RuntimeFailure("swap: Input/output error");  // 2nd of wave 2
    read_source(src, n, out);
  };
  std::vector<char> staging(4 * kPieceBytes);
  CheckpointDrain drain(path_, nullptr, pieces(&reader), {"/d"}, 1, 1, staging.data(),
                        staging.size());
  drain.wait(30);
  ASSERT_TRUE(drain.error());
  try {
    std::rethrow_exception(drain.error());
  } catch (const RuntimeFailure& e) {
    EXPECT_NE(std::string(e.what()).find("Input/output error"), std::string::npos) << e.what();
  }
  EXPECT_EQ(drain.waves(), 1u);
  EXPECT_EQ(drain.release_sources(kPieces * kPieceBytes, 30) >= 0, true);  // returns at once
}

TEST_F(DrainWaves, PieceLargerThanTheStagingIsAnError) {
  const PieceReader reader = [&](const char* src, std::size_t n, char* out) {
    read_source(src, n, out);
  };
  std::vector<char> staging(kPieceBytes / 2);
  CheckpointDrain drain(path_, nullptr, pieces(&reader), {"/d"}, 1, 1, staging.data(),
                        staging.size());
  drain.wait(30);
  EXPECT_TRUE(drain.error());
}


// Training state aligned for direct I/O is written where it lies: the disk
// reads the source itself. release_sources() then also waits for those writes
// in flight, so a source changed right after it (the optimizer step) still
// leaves the file as it was; unaligned state goes through the queue's copies.
class DrainInPlace : public ::testing::TestWithParam<std::size_t> {
 protected:
  static constexpr std::size_t kCount = 24, kBytes = DirectFile::kPieceBytes;
  void SetUp() override {
    path_ = (std::filesystem::current_path() / "drain_in_place_test.bin").string();
    std::ofstream(path_, std::ios::binary).write(std::string(kCount * kBytes, '\0').data(),
                                                 kCount * kBytes);
    memory_.reset(static_cast<char*>(std::aligned_alloc(4096, kCount * kBytes + 4096)));
    source_ = reinterpret_cast<float*>(memory_.get() + GetParam());
    for (std::size_t i = 0; i < kCount * kBytes / 4; ++i) source_[i] = float(i % 9973) - 3.5f;
  }
  void TearDown() override { std::filesystem::remove(path_); }

  std::vector<DrainPiece> pieces() const {
    std::vector<DrainPiece> out;
    for (std::size_t p = 0; p < kCount; ++p) {
      DrainPiece d;
      d.src = reinterpret_cast<const char*>(source_) + p * kBytes;
      d.bytes = kBytes;
      d.at = p * kBytes;
      d.first = p * kBytes / 4;
      d.direct = d.in_place = true;
      out.push_back(d);
    }
    return out;
  }

  std::string path_;
  std::unique_ptr<char, decltype(&std::free)> memory_{nullptr, &std::free};
  float* source_ = nullptr;
};

TEST_P(DrainInPlace, ReleaseWaitsForTheWritesReadingTheSource) {
  // A slow disk: the writes reading the source are still in flight at the release.
  ::setenv("TRIDENT_FAULT_INJECT", "ckpt:write_slow", 1);
  DirectFile direct(path_, true);
  if (!direct.ok()) GTEST_SKIP() << "no O_DIRECT where the test runs";
  const std::vector<float> saved(source_, source_ + kCount * kBytes / 4);
  CheckpointDrain drain(path_, &direct, pieces(), {"/d"}, 1, 1);
  // Once the drain has taken a third (the queue's depth in flight), the rest is copied.
  drain.release_sources(kCount * kBytes * 2 / 3, 30);
  std::fill(source_, source_ + saved.size(), -1.0f);  // the optimizer step
  drain.wait(30);
  ::unsetenv("TRIDENT_FAULT_INJECT");
  ASSERT_FALSE(drain.error());
  const bool aligned = GetParam() % 512 == 0;
  EXPECT_EQ(drain.written_in_place() > 0, aligned);
  EXPECT_LE(drain.written_in_place() + drain.copied_bytes(), kCount * kBytes);
  std::ifstream in(path_, std::ios::binary);
  const std::vector<char> got{std::istreambuf_iterator<char>(in), {}};
  ASSERT_EQ(got.size(), kCount * kBytes);
  EXPECT_EQ(std::memcmp(got.data(), saved.data(), got.size()), 0);
  EXPECT_EQ(drain.sums().at(0), checksum_run(saved.data(), 4, 0, saved.size(), false));
}

// Staged pieces (device or offloaded state) are written from the staging
// itself, and the next wave waits for those writes before it refills it.
TEST_P(DrainInPlace, NextWaveWaitsForTheWritesFromTheStaging) {
  ::setenv("TRIDENT_FAULT_INJECT", "ckpt:write_slow", 1);
  DirectFile direct(path_, true);
  if (!direct.ok()) GTEST_SKIP() << "no O_DIRECT where the test runs";
  const PieceReader reader = [](const char* src, std::size_t n, char* out) {
    std::memcpy(out, src, n);
  };
  std::vector<DrainPiece> staged = pieces();
  for (DrainPiece& d : staged) d.in_place = false, d.reader = &reader;
  std::unique_ptr<char, decltype(&std::free)> staging(
      static_cast<char*>(std::aligned_alloc(4096, 2 * kBytes)), &std::free);
  CheckpointDrain drain(path_, &direct, staged, {"/d"}, 1, 1, staging.get(), 2 * kBytes);
  drain.wait(30);
  ::unsetenv("TRIDENT_FAULT_INJECT");
  ASSERT_FALSE(drain.error());
  EXPECT_EQ(drain.waves(), kCount / 2);
  std::ifstream in(path_, std::ios::binary);
  const std::vector<char> got{std::istreambuf_iterator<char>(in), {}};
  ASSERT_EQ(got.size(), kCount * kBytes);
  EXPECT_EQ(std::memcmp(got.data(), source_, got.size()), 0);
}

// 0: on a page boundary (written in place); 64: a tensor's alignment in an
// arena that is not the disk's (copied through the queue).
INSTANTIATE_TEST_SUITE_P(Offsets, DrainInPlace, ::testing::Values(0, 64));

}  // namespace

TEST(SaveStaging, KeptFromOneSaveToTheNextOnWholeHugePages) {
  constexpr std::size_t kHuge = std::size_t{2} << 20;
  SaveStaging staging;
  char* first = staging.get(3 * kHuge / 2, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(first) % kHuge, 0u);
  std::memset(first, 7, 2 * kHuge);  // rounded up to whole huge pages
  EXPECT_EQ(staging.get(3 * kHuge / 2, nullptr), first);  // the next save's: the same
  EXPECT_EQ(staging.get(kHuge, nullptr), first);          // a smaller one too
  char* larger = staging.get(3 * kHuge, nullptr);         // a larger one: replaced
  std::memset(larger, 7, 3 * kHuge);
  EXPECT_EQ(staging.get(kHuge, nullptr), larger);
  SaveStaging small;
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(small.get(1000, nullptr)) % 4096, 0u);
}
