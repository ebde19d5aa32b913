// trident inspect FILE.h5: what a checkpoint holds, and whether its data is
// intact. Runs on rank 0 alone (parallel HDF5 over MPI_COMM_SELF).
#include <fmt/format.h>
#include <mpi.h>

#include <cstdio>
#include <sstream>

#include "app/commands.hpp"
#include "comm/agree.hpp"
#include "comm/mpi_communicator.hpp"
#include "core/error.hpp"
#include "checkpoint/checkpoint_reader.hpp"
#include "memory/ledger.hpp"

namespace trident {
namespace {

void print_meta(const CheckpointReader& r) {
  const CheckpointMeta& m = r.meta();
  fmt::print("checkpoint {} (format {}, complete)\n", r.path(), m.format_version);
  fmt::print("step {} | tokens seen {} | optimizer steps {} | next train window {} | "
             "val window {}\n", m.step, m.tokens_seen, m.optimizer_steps, m.train_window,
             m.val_window);
  fmt::print("layout: {} ranks TP({})-PP({})-DP({}), dp mode {}\n", m.layout.size(), m.layout.tp,
             m.layout.pp, m.layout.dp, m.dp_mode);
  fmt::print("model: {} layers, d_model {}, {} heads, seq_len {}, vocab {} | seed {}\n",
             m.model.layers, m.model.d_model, m.model.heads, m.model.seq_len, m.model.vocab,
             m.train.seed);
  std::string state;
  for (const auto& [k, v] : m.state) state += fmt::format(" {} {:g}", k, v);
  fmt::print("state:{}\n", state.empty() ? " (none)" : state);
  fmt::print("deck ({}):\n", m.deck_path);
  std::istringstream lines(m.deck_text);
  for (std::string line; std::getline(lines, line);) fmt::print("  | {}\n", line);
}

// Reads every dataset whole and checks it against its stored checksum.
int print_datasets(CheckpointReader& r) {
  const auto stored = r.datasets();
  std::size_t width = 4;
  for (const StoredDataset& s : stored) width = std::max(width, s.spec.path.size());
  fmt::print("{:<{}}  {:<16} {:<5} checksum\n", "dataset", width, "shape", "dtype");
  std::vector<char> buf;
  int bad = 0;
  std::uint64_t bytes = 0;
  for (const StoredDataset& s : stored) {
    TensorInfo whole;
    whole.name = s.spec.path;
    whole.shape = whole.global_shape = s.spec.shape;
    whole.numel = 1;
    for (auto d : s.spec.shape) whole.numel *= std::size_t(d);
    buf.resize(whole.numel * dtype_size(s.spec.dtype));
    r.read(s.spec, whole_shard(whole, buf.data(), /*counted=*/true));
    const ChecksumResult c = r.checksums().front();
    bad += !c.ok();
    bytes += buf.size();
    fmt::print("{:<{}}  {:<16} {:<5} {}\n", s.spec.path, width, format_shape(s.spec.shape),
               dtype_name(s.spec.dtype),
               c.ok() ? "ok" : c.stored.has_checksum ? fmt::format("BAD (stored {:#018x}, data "
                                                               "{:#018x})", c.stored.checksum,
                                                               c.computed)
                                                     : std::string("BAD (none stored)"));
  }
  fmt::print("{} datasets, {}, {}\n", stored.size(), format_bytes(double(bytes)),
             bad ? fmt::format("{} failed their checksum", bad) : "all checksums ok");
  return bad;
}

}  // namespace

int inspect_command(const InspectOptions& o) {
  auto self = make_communicator(MPI_COMM_SELF, "self");
  try {
    CheckpointReader r(*self, o.checkpoint);
    print_meta(r);
    const int bad = print_datasets(r);
    std::fflush(stdout);  // the table first, then the verdict on its own line
    if (bad == 0) return kExitOk;
    fmt::print(stderr, "error: {}: the checkpoint is corrupt (see the datasets marked BAD)\n",
               o.checkpoint);
    return kExitBadInput;
  } catch (const AgreedError& e) {
    std::fflush(stdout);
    fmt::print(stderr, "error: {}\n", e.what());
    return e.exit_code;
  }
}

}  // namespace trident
