// What a checkpoint holds of training, and saving and loading it. The state is
// a list of tensor sets (parameters, each Adam moment; fp32 masters with mixed
// precision), each a dataset group of global tensors. A set says, for each
// global tensor, which slice this rank holds (TensorSlice), as each chunk's
// engine says: plain data parallelism holds whole shards of dense arenas,
// replicated over the data group; ZeRO gives each data rank a flat range of
// its shard; pipeline stages give empty slices for tensors they do not hold.
// The file does not depend on the layout.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "grid/grid.hpp"
#include "checkpoint/checkpoint_schema.hpp"
#include "checkpoint/checkpoint_writer.hpp"
#include "io/deck.hpp"
#include "checkpoint/io_phases.hpp"
#include "checkpoint/tensor_slice.hpp"
#include "memory/arena.hpp"
#include "train/trainer.hpp"

namespace trident {

struct TensorSet {
  std::string group;          // dataset group: "params", "optim/exp_avg"
  DType dtype = DType::f32;   // element type in memory and in the file
  // This rank's slice of a global tensor (empty when it holds none of it).
  std::function<TensorSlice(const TensorInfo& global)> slice_of;
  // Load only, when set: further slices of the same tensor on this rank, each
  // read as the first (a V placement holds both tied embedding copies).
  std::function<std::vector<TensorSlice>(const TensorInfo& global)> more_slices_of;
  // Every data rank holds the same slices (plain data parallelism, ZeRO 1-2
  // parameters). The replicas share the work: data rank r writes the r-th of
  // dp equal parts of each slice, and reads the r-th of dp equal byte ranges
  // of the set's slices in file order; the parts are then exchanged over the
  // data group (ReplicaExchange).
  bool replicated_over_data = false;
  // Non-null when the slices are in this backend's device memory: they pass
  // through host buffers, one tensor at a time on save, all of them on load
  // (the set's share of the state in host memory for the load's duration).
  ComputeBackend* staged_through = nullptr;
  // Around a set's reads or writes when set: the engines bring offloaded
  // state into memory (open) and store what a load wrote (close(true)).
  std::function<void()> open;
  std::function<void(bool changed)> close;
  // The slices stay where slice_of says, unchanged until the next optimizer
  // step: an asynchronous save reads them there while training goes on.
  // False (offloaded state): it reads them through open_reserved and
  // read_reserved below, or copies them at the save where those fail.
  bool in_place = true;
  // An asynchronous save of a set that is not in place: open_reserved, when
  // set and it returns true, stands in for open (the slices then point into
  // address space that is never touched) and read_reserved reads a piece of
  // them through the state's home when the drain comes to it.
  std::function<bool()> open_reserved;
  std::function<void(const void* at, std::size_t bytes, void* out)> read_reserved;
};

// Replica c's part of a slice every one of the dp x cp (data x context)
// replicas holds (see TensorSet::replicated_over_data), counted; replicas in
// the data-context group's order (context fastest).
TensorSlice replica_part(const TensorSlice& whole, const GridCoord& c, int dp,
                         std::size_t elem_bytes, int cp = 1);

// Whole shards of an arena laid out by `table` (arena null: this rank holds
// none of the set, e.g. Adam moments off data rank 0 in gather mode).
TensorSet dense_set(std::string group, const TensorTable& table, Arena* arena,
                    const GridCoord& coord, bool replicated_over_data);

// The sets training saves: parameters, both Adam moments and, with 16-bit
// weights, the f32 masters.
std::vector<TensorSet> training_sets(Trainer& trainer, const GridCoord& coord);
// The sets to read from a checkpoint whose meta is `file`. A 16-bit run reads
// the masters and moments, not its 16-bit parameters (they are the masters'
// rounding: the caller refreshes them), and takes an fp32 file's parameters
// as its masters; an fp32 run reads a 16-bit file's masters as its parameters.
std::vector<TensorSet> resume_sets(Trainer& trainer, const GridCoord& coord,
                                   const CheckpointMeta& file);
bool has_masters(const CheckpointMeta& meta);
// The loss scaler's state in meta.state, and back (fp16 runs).
void save_scaler_state(const Trainer& trainer, CheckpointMeta& meta);
void restore_scaler_state(Trainer& trainer, const CheckpointMeta& meta);

struct CheckpointIo {
  std::string path;
  std::uint64_t bytes = 0;
  double seconds = 0;
  IoPhases phases;  // this rank's time per phase
};

// Writes `meta` and the sets as the checkpoint of meta.step into `dir`:
// temporary name, complete marker, flush, rename, `latest`, pruning to `keep`
// (docs/checkpoints.md). Collective over the world; failures are agreed.
// `global` lists every global tensor (on every rank, whatever it holds).
CheckpointIo save_checkpoint(Grid& grid, const std::string& dir, int keep,
                             const CheckpointMeta& meta, const TensorTable& global,
                             const std::vector<TensorSet>& sets);

// The steps of save_checkpoint, for an asynchronous save (train/async_save.hpp).
// Creates the directory and the file under its temporary name, writes `meta`
// and creates every dataset of the sets. Collective.
std::unique_ptr<CheckpointWriter> begin_checkpoint(Grid& grid, const std::string& dir,
                                                   const CheckpointMeta& meta,
                                                   const TensorTable& global,
                                                   const std::vector<TensorSet>& sets);
// The slice of global tensor g this rank saves from `set` (its part of a
// replicated one).
TensorSlice saved_slice(const TensorSet& set, const TensorInfo& g, const Grid& grid);
// Finishes the file (checksums, complete, sync, close), renames it, points
// `latest` at it and prunes to `keep`. Collective; failures are agreed.
// `started`: when the save began (now_seconds()), for io.seconds. With
// `prunable`, the files to prune are listed there (rank 0) for the caller
// to delete later, instead of now (deleting a 1.5 GB file took 0.1-0.3 s).
CheckpointIo end_checkpoint(Grid& grid, const std::string& dir, int keep, long step,
                            std::unique_ptr<CheckpointWriter> writer, double started,
                            std::vector<std::string>* prunable = nullptr);

// Reads `path` into the sets and verifies every checksum. Checks the model
// dimensions against `model` first. Collective; a bad file is an agreed
// InputError (exit 2) naming the file, and the key or dataset.
CheckpointIo load_checkpoint(Grid& grid, const std::string& path, const GptConfig& model,
                             const TensorTable& global, const std::vector<TensorSet>& sets,
                             CheckpointMeta& meta);

// The meta of a checkpoint written after `step` steps of this run.
CheckpointMeta training_meta(const Deck& deck, Grid& grid, Trainer& trainer, int step,
                             std::int64_t tokens_seen);

}  // namespace trident
