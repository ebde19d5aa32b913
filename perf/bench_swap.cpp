// Swap-file bandwidth as the NVMe offload moves its state (src/offload):
// sequential O_DIRECT writes and reads of BLOCK_MB blocks through io_uring with
// QUEUE_DEPTH in flight, then the optimizer's own stream (OptimizerHome::
// for_blocks: every block read, handed over and written back, three blocks in
// flight) over the same bytes. perf/offload.sh runs fio beside it.
//   bench_swap DIR GB [BLOCK_MB] [QUEUE_DEPTH]
// Prints one line per mode: "<mode> <bytes> bytes <seconds> s <GB/s> GB/s".
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "checkpoint/direct_queues.hpp"
#include "compute/backend.hpp"
#include "core/timer.hpp"
#include "memory/ledger.hpp"
#include "offload/optimizer_home.hpp"
#include "offload/swap_file.hpp"

using namespace trident;

int main(int argc, char** argv) {
  if (argc < 3) {
    fmt::print(stderr, "usage: bench_swap DIR GB [BLOCK_MB] [QUEUE_DEPTH]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const double gb = std::atof(argv[2]);
  const double block_mb = argc > 3 ? std::atof(argv[3]) : 4.0;
  const int depth = argc > 4 ? std::atoi(argv[4]) : 8;
  const std::size_t block = std::size_t(block_mb * (1 << 20)) / SwapFile::kAlign * SwapFile::kAlign;
  const std::size_t blocks = std::size_t(gb * 1e9) / block, bytes = blocks * block;
  auto report = [](const char* mode, std::size_t n, double s) {
    fmt::print("{} {} bytes {:.3f} s {:.3f} GB/s\n", mode, n, s, double(n) / s / 1e9);
  };
  try {
    {
      SwapFile swap(dir, 0, bytes, depth);
      AlignedBuffers buffers(depth, block, SwapFile::kAlign);
      for (int i = 0; i < depth; ++i) std::memset(buffers[std::size_t(i)], i + 1, block);
      for (bool write : {true, false}) {
        const double t0 = now_seconds();
        for (std::size_t b = 0; b < blocks; ++b) {
          const int slot = int(b % std::size_t(depth));
          swap.wait(slot);  // the buffer's last transfer is done
          swap.submit(write, buffers[std::size_t(slot)], block, b * block, slot);
        }
        swap.wait();
        report(write ? "write" : "read", bytes, now_seconds() - t0);
      }
    }
    auto backend = make_cpu_backend(1);
    MemoryLedger ledger;
    OffloadSection o;
    o.optimizer = OffloadTarget::nvme;
    o.nvme_path = dir;
    o.block_mb = block_mb;
    o.queue_depth = depth;
    OptimizerHome home(o, *backend, ledger, bytes / sizeof(float) / 3, 3, DType::f32, 0);
    for (int pass = 0; pass < 2; ++pass) {  // the first writes every block once
      const double t0 = now_seconds();
      home.for_blocks([](std::size_t, std::size_t, float* const*) {});
      if (pass) report("stream (read + write)", 2 * 3 * (bytes / sizeof(float) / 3) * 4,
                       now_seconds() - t0);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  }
  return 0;
}
