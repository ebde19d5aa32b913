// The parameter shard's home on its own (offload.params): values stored in
// unaligned pieces come back from staging at any offset, a full pool refuses
// a prefetch and gives way to a required slice by dropping read-aheads, an
// update sees and keeps exactly its range, the ledger holds what
// arena_bytes() says, and a checkpoint's reader on another thread reads the
// home right while the gathers stage from it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <thread>
#include <vector>

#include "compute/backend.hpp"
#include "memory/ledger.hpp"
#include "offload/param_home.hpp"

using namespace trident;

namespace {

constexpr std::size_t kLarge = 1500, kSmall = 1000;
constexpr std::size_t kN = 2048 * 3 + 37;  // bf16: 4 KiB pages hold 2048, the last partial

OffloadSection section(OffloadTarget params, const char* name) {
  OffloadSection o;
  o.params = params;
  o.nvme_path = (std::filesystem::temp_directory_path() / name).string();
  std::filesystem::remove_all(o.nvme_path);
  std::filesystem::create_directories(o.nvme_path);
  o.block_mb = 8192.0 / (1 << 20);  // 4096 bf16 elements: the shard is two blocks
  o.queue_depth = 2;
  return o;
}

std::vector<std::uint16_t> pattern() {
  std::vector<std::uint16_t> v(kN);
  std::iota(v.begin(), v.end(), std::uint16_t(11));
  return v;
}

bool same(const void* got, const std::vector<std::uint16_t>& want, std::size_t first,
          std::size_t count) {
  return std::memcmp(got, want.data() + first, count * 2) == 0;
}

}  // namespace

TEST(ParamHome, StagingServesAnyOffsetAndTheUpdateKeepsItsRange) {
  auto backend = make_cpu_backend(1);
  MemoryLedger ledger;
  const OffloadSection o = section(OffloadTarget::nvme, "trident_param_home_test");
  std::vector<std::uint16_t> want = pattern();
  {
    ParamHome home(o, *backend, ledger, kN, DType::bf16, kLarge, kSmall, 0);
    EXPECT_EQ(ledger.current(MemCategory::buffers),
              ParamHome::arena_bytes(o, DType::bf16, kLarge, kSmall, true));
    EXPECT_EQ(home.in_place(), nullptr);
    home.store(0, 101, want.data());  // unaligned pieces
    home.store(101, kN - 101, want.data() + 101);

    ASSERT_TRUE(home.stage(1, 777, kLarge, false));  // only the large buffer fits
    EXPECT_TRUE(same(home.staged(1), want, 777, kLarge));
    ASSERT_TRUE(home.stage(2, 3001, kSmall, true));
    ASSERT_TRUE(home.stage(3, kN - 900, 900, true));   // up to the partial last page
    EXPECT_FALSE(home.stage(4, 0, 10, true));          // every buffer held: a prefetch waits
    EXPECT_TRUE(same(home.staged(3), want, kN - 900, 900));
    ASSERT_TRUE(home.stage(5, 5, 10, false));  // required: the read-ahead of 2 gives way
    EXPECT_FALSE(home.holds(2));
    EXPECT_TRUE(same(home.staged(5), want, 5, 10));
    home.release(1);
    home.release(3);
    home.release(5);

    std::size_t next = 100;
    home.update(100, 5000, [&](std::size_t first, std::size_t count, void* p) {
      EXPECT_EQ(first, next);  // pieces in order, covering the range once
      next = first + count;
      ASSERT_TRUE(same(p, want, first, count));
      auto* v = static_cast<std::uint16_t*>(p);
      for (std::size_t i = 0; i < count; ++i) v[i] = std::uint16_t(v[i] * 3 + 1);
    });
    EXPECT_EQ(next, 5100u);
    for (std::size_t i = 100; i < 5100; ++i) want[i] = std::uint16_t(want[i] * 3 + 1);
    std::vector<std::uint16_t> got(kN);
    home.load(0, kN, got.data());
    EXPECT_EQ(got, want);  // outside [100, 5100) untouched
    ASSERT_TRUE(home.stage(6, 4000, 900, false));
    EXPECT_TRUE(same(home.staged(6), want, 4000, 900));
  }
  EXPECT_EQ(ledger.current(MemCategory::buffers), 0u);
  EXPECT_TRUE(std::filesystem::is_empty(o.nvme_path));  // the swap file is gone
}

TEST(ParamHome, HostMemoryOnTheCpuBackendIsUsedInPlace) {
  auto backend = make_cpu_backend(1);
  MemoryLedger ledger;
  const OffloadSection o = section(OffloadTarget::cpu, "trident_param_home_cpu");
  const std::vector<std::uint16_t> want = pattern();
  ParamHome home(o, *backend, ledger, kN, DType::bf16, kLarge, kSmall, 0);
  EXPECT_EQ(ParamHome::arena_bytes(o, DType::bf16, kLarge, kSmall, true), 0u);
  EXPECT_EQ(ledger.current(MemCategory::buffers), 0u);
  home.store(3, kN - 3, want.data() + 3);
  ASSERT_NE(home.in_place(), nullptr);
  EXPECT_TRUE(same(home.in_place() + 2 * 3, want, 3, kN - 3));
  home.update(10, 20, [&](std::size_t first, std::size_t, void* p) {
    EXPECT_EQ(p, home.in_place() + 2 * first);  // one piece: the home itself
  });
  // On a device backend the same home stages and streams through device buffers.
  EXPECT_GT(ParamHome::arena_bytes(o, DType::bf16, kLarge, kSmall, false), 2 * (kLarge + kSmall));
}

// An asynchronous checkpoint's drain reads the home on its own thread while
// the main thread stages slices for its gathers (through the swap's queue):
// unaligned pieces of any size come back exact, from host memory or the swap.
TEST(ParamHome, ACheckpointReadsBesideTheGathers) {
  auto backend = make_cpu_backend(1);
  for (OffloadTarget target : {OffloadTarget::nvme, OffloadTarget::cpu}) {
    MemoryLedger ledger;
    const OffloadSection o = section(target, "trident_param_home_beside");
    const std::vector<std::uint16_t> want = pattern();
    ParamHome home(o, *backend, ledger, kN, DType::bf16, kLarge, kSmall, 0);
    home.store(0, kN, want.data());
    std::vector<std::uint16_t> got(kN, 0);
    std::thread drain([&] {
      for (int pass = 0; pass < 20; ++pass)
        for (std::size_t first = 0, k = 1; first < kN; first += k, k = k * 7 % 4999 + 1)
          home.read_beside_gathers(first, std::min(k, kN - first), got.data() + first);
    });
    if (!home.in_place())
      for (int i = 0; i < 200; ++i) {
        const std::size_t first = std::size_t(i) * 131 % (kN - kSmall);
        EXPECT_TRUE(home.stage(i, first, kSmall, false));  // no ASSERT: the drain is running
        EXPECT_TRUE(same(home.staged(i), want, first, kSmall));
        home.release(i);
      }
    drain.join();
    EXPECT_EQ(got, want) << (target == OffloadTarget::nvme ? "nvme" : "cpu");
  }
}
