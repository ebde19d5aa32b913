// The checkpoint directory: file names, the atomic `latest` pointer, keeping
// the last N checkpoints, and making renames durable. Only rank 0 calls these.
//   step_000100.h5        a complete checkpoint (it only gets this name whole)
//   .step_000100.h5.tmp   one being written (left behind if the writer died)
//   latest                the name of the newest complete checkpoint, one line
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace trident {

std::string checkpoint_name(long step);       // "step_000100.h5"
std::string checkpoint_temp_name(long step);  // ".step_000100.h5.tmp"

// Flushes a file, or a directory's entries, to stable storage (RuntimeFailure).
void fsync_path(const std::string& path);

// rename(from, to) in `dir`, then fsync of the directory: the new name survives a crash.
void durable_rename(const std::string& dir, const std::string& from, const std::string& to);

// Points `latest` at `name` atomically (write a temporary, fsync, rename).
void write_latest(const std::string& dir, const std::string& name);
// The path `latest` names, or nothing when there is no `latest`.
std::optional<std::string> read_latest(const std::string& dir);

// Steps of the complete checkpoints in `dir`, ascending.
std::vector<long> list_checkpoints(const std::string& dir);

// Deletes complete checkpoints beyond the newest `keep` (0: none), never the
// one `latest` names, and temporaries left by interrupted writers.
void prune_checkpoints(const std::string& dir, int keep);
// What prune_checkpoints deletes: the temporaries, then the checkpoints.
std::vector<std::string> prunable_files(const std::string& dir, int keep);
// Deletes them (those already gone are no error).
void remove_files(const std::vector<std::string>& paths);

}  // namespace trident
