// The load side of checkpoint_state: every rank reads its slices of the
// training sets, the data replicas one part each of what they all hold.
#include <fmt/format.h>

#include "comm/agree.hpp"
#include "core/error.hpp"
#include "core/timer.hpp"
#include "checkpoint/checkpoint_reader.hpp"
#include "train/checkpoint_state.hpp"
#include "train/checkpoint_load_exchange.hpp"

namespace trident {

namespace {

struct StagedSlice {  // a device slice read into host memory
  ComputeBackend* backend;
  void* device;
  std::vector<char> host;
};

// One dataset to load and this rank's slice of it (in host memory). Slices
// every data replica holds are shared: `cuts` (dp + 1 element offsets into
// the slice) give replica r elements [cuts[r], cuts[r + 1]) to read.
struct LoadItem {
  DatasetSpec spec;
  TensorSlice whole;
  std::vector<std::size_t> cuts;  // empty: read whole by this rank
  std::vector<TensorSlice> copies;  // further copies on this rank, read whole
};

// What the data replicas all hold is read once per data group: each set's
// shared slices are cut into dp equal byte ranges in file order, so replica
// r reads one long run of the file while the others read theirs. Replica r's
// elements of a slice are those whose bytes start in the r-th range.
std::vector<LoadItem> plan_set(Grid& grid, const TensorTable& global, const TensorSet& set,
                               std::vector<StagedSlice>& staged) {
  const std::uint64_t dp = std::uint64_t(grid.shape().replicas());  // data x context
  std::vector<LoadItem> items;
  const std::size_t esz = dtype_size(set.dtype);
  std::vector<std::uint64_t> shared_at;  // per item: byte offset among the set's shared bytes
  std::uint64_t total = 0;
  for (const TensorInfo& g : global.tensors()) {
    LoadItem it{{dataset_path(set.group, g.name), g.global_shape, set.dtype}, set.slice_of(g), {},
                set.more_slices_of ? set.more_slices_of(g) : std::vector<TensorSlice>{}};
    const std::uint64_t bytes = (it.whole.hi - it.whole.lo) * esz;
    auto stage = [&](TensorSlice& s) {
      if (!set.staged_through || s.empty()) return;
      staged.push_back({set.staged_through, s.data, std::vector<char>((s.hi - s.lo) * esz)});
      s.data = staged.back().host.data();  // stays put when `staged` grows
    };
    stage(it.whole);
    for (TensorSlice& copy : it.copies) stage(copy);
    const bool shared = set.replicated_over_data && dp > 1 && !it.whole.empty();
    shared_at.push_back(total);
    if (shared) {
      it.cuts.resize(dp + 1);
      total += bytes;
    }
    items.push_back(std::move(it));
  }
  for (std::size_t i = 0; i < items.size(); ++i) {
    LoadItem& it = items[i];
    const std::uint64_t n = it.whole.hi - it.whole.lo;
    for (std::uint64_t r = 0; r < it.cuts.size(); ++r) {
      const std::uint64_t at = r == dp ? total : total / dp * r;
      it.cuts[r] = at <= shared_at[i] ? 0 : std::min(n, (at - shared_at[i] + esz - 1) / esz);
    }
  }
  return items;
}

}  // namespace

CheckpointIo load_checkpoint(Grid& grid, const std::string& path, const GptConfig& model,
                             const TensorTable& global, const std::vector<TensorSet>& sets,
                             CheckpointMeta& meta) {
  Communicator& world = grid.host();
  const double t0 = now_seconds();
  CheckpointReader r(world, path);
  meta = r.meta();
  run_agreed(world, [&] {
    const GptConfig& m = meta.model;
    const std::pair<const char*, std::pair<int, int>> keys[] = {
        {"layers", {m.layers, model.layers}},    {"d_model", {m.d_model, model.d_model}},
        {"heads", {m.heads, model.heads}},       {"seq_len", {m.seq_len, model.seq_len}},
        {"vocab", {m.vocab, model.vocab}}};
    for (const auto& [key, v] : keys)
      if (v.first != v.second)
        throw InputError(fmt::format("{}: model.{} = {} in the checkpoint but {} in the deck; the "
                                     "model must match the checkpoint to resume (train keys may "
                                     "change)", path, key, v.first, v.second));
  });
  std::vector<StagedSlice> staged;
  std::vector<std::vector<LoadItem>> items(sets.size());
  std::vector<const TensorSet*> to_close;  // offloaded state stored once the values are final
  ReplicaExchange exchange(grid);
  const int me = grid.coord().replica(grid.shape());
  try {
    for (std::size_t k = 0; k < sets.size(); ++k) {
      // Planned set by set, so offloaded state is in memory one set at a time.
      if (sets[k].open) sets[k].open();
      items[k] = plan_set(grid, global, sets[k], staged);
      const std::size_t esz = dtype_size(sets[k].dtype);
      std::vector<CheckpointReader::SliceRead> reads;
      for (const LoadItem& it : items[k]) {
        if (it.cuts.empty()) {
          reads.push_back({it.spec, it.whole, it.copies});
          continue;
        }
        TensorSlice part = sub_slice(it.whole, it.whole.lo + it.cuts[me],
                                     it.whole.lo + it.cuts[me + 1], esz);
        part.counted = counts_copy(*it.whole.shard, grid.coord(), false);
        reads.push_back({it.spec, part, it.copies});
      }
      r.read_all(reads, [&] { exchange.progress(); });
      for (const LoadItem& it : items[k])
        if (!it.cuts.empty()) exchange.add(it.whole, esz, it.cuts);
      exchange.progress();
      if (!sets[k].close) continue;
      if (sets[k].staged_through || sets[k].replicated_over_data) to_close.push_back(&sets[k]);
      else sets[k].close(true);  // complete now
    }
  } catch (...) {
    exchange.finish();  // the peers' parts are in flight to and from this rank
    throw;
  }
  const double shared_from = now_seconds();
  const bool sharing = !exchange.empty();
  exchange.finish();
  r.verify();
  CheckpointIo io{path, r.bytes(), 0, r.phases()};
  if (sharing) io.phases.add("share replicas (after the reads)", now_seconds() - shared_from);
  for (const StagedSlice& st : staged)
    st.backend->copy_from_host(st.device, st.host.data(), st.host.size());
  for (const TensorSet* set : to_close) set->close(true);
  io.seconds = now_seconds() - t0;
  return io;
}

}  // namespace trident
