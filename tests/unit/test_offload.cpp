// Offload's pieces on their own: the swap file (transfers round-trip, the file
// is gone from its directory, errors name the fix) and the optimizer homes
// (blocks cover the shard in order, writes persist, checkpoint windows store
// what a load wrote, the ledger holds exactly what arena_bytes() says).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <filesystem>
#include <numeric>
#include <vector>

#include "checkpoint/direct_queues.hpp"
#include "compute/backend.hpp"
#include "core/error.hpp"
#include "memory/ledger.hpp"
#include "offload/optimizer_home.hpp"
#include "offload/swap_file.hpp"

using namespace trident;

namespace {

std::string scratch(const char* name) {
  const auto dir = std::filesystem::temp_directory_path() / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(SwapFile, TransfersRoundTripAndLeaveNoFile) {
  const std::string dir = scratch("trident_swap_test");
  constexpr std::size_t kBlock = SwapFile::kAlign * 4, kBlocks = 16;
  SwapFile swap(dir, 0, kBlock * kBlocks, 4);
  EXPECT_TRUE(std::filesystem::is_empty(dir));  // unlinked once open
  AlignedBuffers out(int(kBlocks), kBlock, SwapFile::kAlign), in(int(kBlocks), kBlock,
                                                                   SwapFile::kAlign);
  for (std::size_t b = 0; b < kBlocks; ++b) {
    auto* p = reinterpret_cast<std::uint32_t*>(out[b]);
    std::iota(p, p + kBlock / 4, std::uint32_t(b * kBlock));
    swap.submit(true, out[b], kBlock, b * kBlock, int(b % 3));  // more than the queue holds
  }
  swap.wait();
  for (std::size_t b = kBlocks; b-- > 0;) swap.submit(false, in[b], kBlock, b * kBlock, 0);
  swap.wait(0);
  for (std::size_t b = 0; b < kBlocks; ++b)
    EXPECT_EQ(std::memcmp(out[b], in[b], kBlock), 0) << "block " << b;
}

TEST(SwapFile, ErrorsNameTheDirectoryAndTheFix) {
  EXPECT_NE(error_of([] { SwapFile("/nonexistent/trident", 0, 4096, 2); })
                .find("offload.nvme_path = \"/nonexistent/trident\": no such directory"),
            std::string::npos);
  EXPECT_NE(error_of([] { SwapFile("/proc", 0, 4096, 2); }).find("choose a writable directory"),
            std::string::npos);
  const std::string dir = scratch("trident_swap_full");
  setenv("TRIDENT_FAULT_INJECT", "swap:no_space@3", 1);
  const std::string full = error_of([&] { SwapFile(dir, 3, 1 << 20, 2); });
  unsetenv("TRIDENT_FAULT_INJECT");
  EXPECT_NE(full.find("cannot reserve 0.00 GB for this rank's swap file (No space left on "
                      "device); free space there"),
            std::string::npos)
      << full;
  EXPECT_TRUE(std::filesystem::is_empty(dir));  // nothing left behind by the failure
}

struct HomeCase {
  OffloadTarget target;
  double ratio;  // offload.ratio: with cpu < 1, the first elements stay in the arenas
};

class Homes : public ::testing::TestWithParam<HomeCase> {};

TEST_P(Homes, BlocksCoverTheShardAndStateRoundTrips) {
  auto backend = make_cpu_backend(1);
  MemoryLedger ledger;
  OffloadSection o;
  o.optimizer = GetParam().target;
  o.ratio = GetParam().ratio;
  o.nvme_path = scratch("trident_home_test");
  o.block_mb = 8192.0 / (1 << 20);  // 2048 elements: the shard is several blocks
  o.queue_depth = 2;
  constexpr std::size_t n = 2048 * 5 + 123;  // the last block partial
  const std::size_t device = OptimizerHome::device_elements(o, n);
  if (o.optimizer == OffloadTarget::cpu) EXPECT_EQ(device, o.ratio == 0.5 ? 5168u : 0u);
  {
    OptimizerHome home(o, *backend, ledger, n, 3, DType::bf16, 0);
    EXPECT_EQ(home.offloaded_first(), device);
    const auto bytes = OptimizerHome::arena_bytes(o, n, 3, true);
    EXPECT_EQ(ledger.current(MemCategory::optimizer), bytes.optimizer);
    EXPECT_EQ(bytes.optimizer, 3 * device * sizeof(float));
    EXPECT_EQ(ledger.current(MemCategory::buffers), bytes.buffers);
    EXPECT_EQ(home.swap_size(), OptimizerHome::swap_bytes(o, n, 3));  // the estimator's figure
    if (o.optimizer == OffloadTarget::nvme) EXPECT_GE(home.swap_size(), 3 * n * sizeof(float));
    // Host state as the estimator counts it, each allocation rounded up to a page.
    const std::size_t host = OptimizerHome::host_bytes(o, n, 3, DType::bf16);
    EXPECT_GE(home.host_state_bytes(), host);
    EXPECT_LE(home.host_state_bytes(), host + 4 * 4096);
    if (o.optimizer == OffloadTarget::cpu)
      EXPECT_GE(host, 3 * (n - device) * sizeof(float) + (n - device) * 2);
    std::vector<float> masters(n);
    std::iota(masters.begin(), masters.end(), 1.0f);
    home.write(OptimizerHome::masters, 0, 100, masters.data());  // unaligned pieces
    home.write(OptimizerHome::masters, 100, n - 100, masters.data() + 100);
    std::size_t next = 0;
    home.for_blocks([&](std::size_t first, std::size_t count, float* const* s) {
      EXPECT_EQ(first, next);
      next = first + count;
      if (first < device) EXPECT_EQ(count, device);  // the arenas' part: one block, first
      if (home.updates_on_host() && first >= device) {  // cpu: blocks the staging holds
        EXPECT_LE(count, OptimizerHome::block_elements(o));
        for (int b = 0; b < 3; ++b) std::fill_n(home.staging_block(b), count, 1.0f);
        EXPECT_LE(count, home.staging_elements());
        std::fill_n(static_cast<std::uint16_t*>(home.host_grads()) + (first - device), count,
                    0x3f80);
      }
      for (std::size_t i = 0; i < count; ++i) {
        EXPECT_EQ(s[OptimizerHome::exp_avg][i], 0.0f);  // the moments start at zero
        ASSERT_EQ(s[OptimizerHome::masters][i], masters[first + i]);
        s[OptimizerHome::exp_avg_sq][i] = 2.0f * masters[first + i];
      }
    });
    EXPECT_EQ(next, n);
    std::vector<float> v(n);
    home.read(OptimizerHome::exp_avg_sq, 0, n, v.data());
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(v[i], 2.0f * masters[i]) << i;
    float* w = home.open(OptimizerHome::exp_avg);  // a load writes the window
    for (std::size_t i = 0; i < n; ++i) w[i] = -float(i);
    home.close(OptimizerHome::exp_avg, true);
    home.read(OptimizerHome::exp_avg, 7, 1000, v.data());
    for (std::size_t i = 0; i < 1000; ++i) ASSERT_EQ(v[i], -float(i + 7)) << i;
    home.read(OptimizerHome::exp_avg, 5000, 300, v.data());  // across a split's boundary
    for (std::size_t i = 0; i < 300; ++i) ASSERT_EQ(v[i], -float(i + 5000)) << i;
    // Into page-aligned memory (an asynchronous save's staging): the whole
    // pages of the swap go straight there, the partial ones through the bounce.
    const std::size_t from = 1024, count = n - from - 3;
    std::unique_ptr<float, decltype(&std::free)> staged(
        static_cast<float*>(std::aligned_alloc(4096, (count * sizeof(float) + 4095) / 4096 * 4096)),
        &std::free);
    home.read(OptimizerHome::exp_avg, from, count, staged.get());
    for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(staged.get()[i], -float(i + from)) << i;
  }
  EXPECT_EQ(ledger.current(MemCategory::buffers), 0u);
  EXPECT_EQ(ledger.current(MemCategory::optimizer), 0u);
  EXPECT_TRUE(std::filesystem::is_empty(o.nvme_path));
}

INSTANTIATE_TEST_SUITE_P(Offload, Homes,
                         ::testing::Values(HomeCase{OffloadTarget::none, 1.0},
                                           HomeCase{OffloadTarget::cpu, 1.0},
                                           HomeCase{OffloadTarget::cpu, 0.5},
                                           HomeCase{OffloadTarget::nvme, 1.0}));
