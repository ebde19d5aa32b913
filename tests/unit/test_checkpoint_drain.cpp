// The checkpoint drain's waves: pieces that are not host memory (device or
// offloaded state) are read through their reader into a bounded staging, as
// many as it holds at a time, and land byte for byte with the checksums a
// direct copy gives; release_sources() reads on its own thread what the drain
// has not, so a source changed afterwards (the optimizer step) leaves the file
// as it was; a reader failing in the middle of a wave is the drain's error.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/checkpoint_drain.hpp"
#include "checkpoint/checksum.hpp"
#include "core/error.hpp"

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

}  // namespace
