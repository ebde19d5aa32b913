// Checkpoint write and read bandwidth on a synthetic model state: the
// parameters and both Adam moments of a GPT (GPT-2 124M by default), through
// the same save_checkpoint / load_checkpoint the trainer uses.
//   mpirun -np N bench_checkpoint write|read DIR [--layers L --d-model C --vocab V]
//                                                [--owner root|spread]
// owner root: every rank holds everything (plain data parallelism: the
// replicas share the writing and the reading); spread: each rank
// holds and writes a 1/N flat range of every tensor (what a ZeRO optimizer
// does). Reading checks every element and every checksum.
// Prints one line: "<mode> <bytes> bytes <seconds> s <GB/s> GB/s".
#include <fmt/format.h>
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <sys/resource.h>

#include <cstring>

#include "comm/agree.hpp"
#include "grid/grid.hpp"
#include "model/gpt_params.hpp"
#include "train/checkpoint_state.hpp"

using namespace trident;

namespace {

// Each rank owns the flat range [n*r/N, n*(r+1)/N) of every tensor.
TensorSet spread_set(std::string group, const TensorTable& table, Arena& arena, int rank,
                     int ranks) {
  TensorSet set;
  set.group = std::move(group);
  set.slice_of = [&table, &arena, rank, ranks](const TensorInfo& g) {
    const TensorInfo& t = table.at(g.name);
    TensorSlice s;
    s.shard = &t;
    s.lo = t.numel * rank / ranks, s.hi = t.numel * (rank + 1) / ranks;
    s.data = arena.f32(t) + s.lo;
    s.counted = true;
    return s;
  };
  return set;
}

// User + system seconds of this process (every thread) so far.
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

float value_at(std::size_t set, std::size_t i) { return float(set + 1) * 1e-3f * float(i % 9973); }

int run(int argc, char** argv) {
  CLI::App app{"checkpoint write/read bandwidth"};
  std::string mode, dir, owner = "root";
  bool phases = false;
  GptConfig cfg{12, 768, 12, 1024, 50257};
  app.add_option("mode", mode)->required()->check(CLI::IsMember({"write", "read"}));
  app.add_option("dir", dir)->required();
  app.add_option("--layers", cfg.layers);
  app.add_option("--d-model", cfg.d_model);
  app.add_option("--vocab", cfg.vocab);
  app.add_option("--owner", owner)->check(CLI::IsMember({"root", "spread"}));
  app.add_flag("--phases", phases, "print each rank's seconds per phase (to stderr)");
  CLI11_PARSE(app, argc, argv);

  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  Grid grid(MPI_COMM_WORLD, GridShape{1, world, 1});
  auto backend = make_cpu_backend(0);
  MemoryLedger ledger;
  const TensorTable table = build_gpt_param_table(cfg);
  std::vector<Arena> arenas;
  std::vector<TensorSet> sets;
  const char* groups[] = {kParamsGroup, kExpAvgGroup, kExpAvgSqGroup};
  for (std::size_t k = 0; k < 3; ++k) {
    arenas.emplace_back(*backend, ledger, MemCategory::parameters, table.size());
    float* p = arenas.back().f32();
    for (std::size_t i = 0; i < table.size(); ++i) p[i] = mode == "write" ? value_at(k, i) : 0.0f;
  }
  for (std::size_t k = 0; k < 3; ++k)
    sets.push_back(owner == "spread"
                       ? spread_set(groups[k], table, arenas[k], grid.rank(), world)
                       : dense_set(groups[k], table, &arenas[k], grid.coord(), true));
  grid.world().barrier();
  CheckpointIo io;
  const double cpu0 = cpu_seconds();
  double cpu = 0;
  if (mode == "write") {
    CheckpointMeta meta;
    meta.model = cfg;
    meta.layout = grid.shape();
    io = save_checkpoint(grid, dir, 0, meta, table, sets);
    cpu = cpu_seconds() - cpu0;
  } else {
    CheckpointMeta meta;
    io = load_checkpoint(grid, dir + "/step_000000.h5", cfg, table, sets, meta);
    cpu = cpu_seconds() - cpu0;
    std::size_t wrong = 0;
    for (std::size_t k = 0; k < 3; ++k)
      for (const TensorInfo& t : table.tensors()) {
        const TensorSlice s = sets[k].slice_of(t);  // what this rank reads
        for (std::size_t i = t.offset + s.lo; i < t.offset + s.hi; ++i)  // padding reads as 0
          if (t.global_index(i - t.offset) >= 0) wrong += arenas[k].f32()[i] != value_at(k, i);
      }
    wrong = grid.world().all_reduce_value(wrong, ReduceOp::sum);
    if (wrong) {
      if (grid.is_root()) fmt::print(stderr, "error: {} elements read back wrong\n", wrong);
      return 1;
    }
  }
  if (phases)
    fmt::print(stderr, "rank {} {}: {:.3f} s, cpu {:.3f} s (all threads): {}\n", grid.rank(), mode,
               io.seconds, cpu, io.phases.summary());
  if (grid.is_root())
    fmt::print("{} {} bytes {:.3f} s {:.3f} GB/s ({} ranks, owner {})\n", mode, io.bytes,
               io.seconds, double(io.bytes) / io.seconds / 1e9, world, owner);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int code = 0;
  try {
    code = run(argc, argv);
  } catch (const AgreedError& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    code = e.exit_code;
  }
  MPI_Finalize();
  return code;
}
