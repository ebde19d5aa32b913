// The load side of checkpoint_state: every rank reads its slices of the
// training sets, the data replicas one part each of what they all hold.
#include <fmt/format.h>

#include "comm/agree.hpp"
#include "core/error.hpp"
#include "core/timer.hpp"
#include "io/checkpoint_reader.hpp"
#include "train/checkpoint_state.hpp"
#include "train/replica_exchange.hpp"

namespace trident {

CheckpointIo load_checkpoint(Grid& grid, const std::string& path, const GptConfig& model,
                             const TensorTable& global, const std::vector<TensorSet>& sets,
                             CheckpointMeta& meta) {
  Communicator& world = grid.world();
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
  // What the data replicas all hold is read once per data group: each set's
  // shared slices are cut into dp equal byte ranges in file order, replica r
  // reads the r-th (one long run of the file, while the others read theirs),
  // and the parts are exchanged over the data group while the next set is read.
  struct Staged {  // a device slice read into host memory
    ComputeBackend* backend;
    void* device;
    std::vector<char> host;
  };
  struct Item {
    DatasetSpec spec;
    TensorSlice whole;
    std::uint64_t shared_at = 0;  // offset among the shared bytes; kNotShared: not shared
  };
  constexpr std::uint64_t kNotShared = ~std::uint64_t(0);
  std::vector<Staged> staged;
  std::vector<std::vector<Item>> items(sets.size());
  std::vector<std::uint64_t> shared_bytes(sets.size(), 0);  // per set
  const int dp = grid.shape().dp;
  for (std::size_t k = 0; k < sets.size(); ++k) {
    const TensorSet& set = sets[k];
    const std::size_t esz = dtype_size(set.dtype);
    for (const TensorInfo& g : global.tensors()) {
      Item it{{dataset_path(set.group, g.name), g.global_shape, set.dtype}, set.slice_of(g),
              kNotShared};
      if (set.staged_through && !it.whole.empty()) {
        staged.push_back({set.staged_through, it.whole.data,
                          std::vector<char>((it.whole.hi - it.whole.lo) * esz)});
        it.whole.data = staged.back().host.data();  // stays put when `staged` grows
      }
      if (set.replicated_over_data && dp > 1 && !it.whole.empty()) {
        it.shared_at = shared_bytes[k];
        shared_bytes[k] += (it.whole.hi - it.whole.lo) * esz;
      }
      items[k].push_back(std::move(it));
    }
  }
  // Replica r's elements of a shared slice: those whose bytes start in the
  // r-th of dp equal parts of its set's shared bytes (every replica computes
  // the same cuts).
  auto cuts_of = [&](const Item& it, std::uint64_t total, std::size_t esz) {
    const std::uint64_t n = it.whole.hi - it.whole.lo;
    std::vector<std::size_t> cuts(dp + 1);
    for (int r = 0; r <= dp; ++r) {
      const std::uint64_t at = total / std::uint64_t(dp) * std::uint64_t(r) +
                               (r == dp ? total % std::uint64_t(dp) : 0);
      cuts[r] = at <= it.shared_at ? 0 : std::min(n, (at - it.shared_at + esz - 1) / esz);
    }
    return cuts;
  };
  ReplicaExchange exchange(grid);
  const int me = grid.coord().dp;
  try {
    for (std::size_t k = 0; k < sets.size(); ++k) {
      const std::size_t esz = dtype_size(sets[k].dtype);
      std::vector<CheckpointReader::SliceRead> reads;
      for (const Item& it : items[k]) {
        if (it.shared_at == kNotShared) {
          reads.push_back({it.spec, it.whole});
          continue;
        }
        const std::vector<std::size_t> cuts = cuts_of(it, shared_bytes[k], esz);
        TensorSlice part = sub_slice(it.whole, it.whole.lo + cuts[me], it.whole.lo + cuts[me + 1],
                                     esz);
        part.counted = counts_copy(*it.whole.shard, grid.coord(), false);
        reads.push_back({it.spec, part});
      }
      r.read_all(reads, [&] { exchange.progress(); });
      for (const Item& it : items[k])
        if (it.shared_at != kNotShared)
          exchange.add(it.whole, esz, cuts_of(it, shared_bytes[k], esz));
      exchange.progress();
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
  for (const Staged& st : staged)
    st.backend->copy_from_host(st.device, st.host.data(), st.host.size());
  io.seconds = now_seconds() - t0;
  return io;
}

}  // namespace trident
