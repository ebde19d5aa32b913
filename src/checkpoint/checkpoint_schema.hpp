// The checkpoint file format (docs/checkpoints.md): one HDF5 file per
// checkpoint. Each global tensor is one dataset in its global shape:
//   /params/<name>, /optim/exp_avg/<name>, /optim/exp_avg_sq/<name>
// (fp32 masters and other sets follow the same pattern), each with attributes
// `dtype` and `checksum`. The root carries the run's state and provenance;
// /state holds optional scalars (loss_scale, ...). `complete = 1` is the last
// thing written before the file is closed.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "grid/grid_shape.hpp"
#include "io/deck.hpp"
#include "model/gpt_config.hpp"

namespace trident {

// Bump when a reader of the old format could misread the new one.
constexpr std::int64_t kCheckpointFormatVersion = 1;

// Dataset groups of the tensor sets training saves.
inline const char* const kParamsGroup = "params";
inline const char* const kExpAvgGroup = "optim/exp_avg";
inline const char* const kExpAvgSqGroup = "optim/exp_avg_sq";
// bf16/fp16 runs: the f32 master weights (/params then holds their rounding).
inline const char* const kMasterGroup = "master";

// One dataset: its path, global shape (never padded) and element type.
// 16-bit types are stored as uint16 and named by the `dtype` attribute.
struct DatasetSpec {
  std::string path;  // "/params/h.0.attn.qkv.w"
  std::vector<std::int64_t> shape;
  DType dtype = DType::f32;
};
std::string dataset_path(const std::string& group, const std::string& tensor);
std::string format_shape(const std::vector<std::int64_t>& shape);  // "[257, 32]"

// Everything but the tensors: what resuming needs besides them, and provenance.
struct CheckpointMeta {
  std::int64_t format_version = kCheckpointFormatVersion;
  std::int64_t step = 0;             // optimizer steps done (training continues at this step)
  std::int64_t tokens_seen = 0;      // training tokens consumed so far
  std::int64_t optimizer_steps = 0;  // AdamW's step count (bias correction)
  std::int64_t train_window = 0;     // next global training window (step * batch)
  std::int64_t val_window = 0;       // first window of the next validation pass
  std::string deck_path, deck_text;  // the deck as given, overrides listed
  GridShape layout;                  // the layout that wrote the file
  std::string dp_mode;
  GptConfig model;                   // must match to resume
  TrainSection train;                // may change on resume (a warning says so)
  std::map<std::string, double> state;  // extensible scalars: loss_scale when present, ...
};

// Collective in parallel HDF5: every rank passes the same meta.
void write_checkpoint_meta(hid_t file, const CheckpointMeta& meta);
// Throws RuntimeFailure naming the attribute when one is missing.
CheckpointMeta read_checkpoint_meta(hid_t file);

}  // namespace trident
