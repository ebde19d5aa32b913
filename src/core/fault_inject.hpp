// Fault injection for tests of crash safety. TRIDENT_FAULT_INJECT=<site>:<phase>
// or <site>:<phase>@<step> makes every rank that reaches that named phase kill
// itself with SIGKILL (as a node failure or `scancel -s KILL` would), for any
// step or only at the given one. Sites and phases (docs/checkpoints.md):
//   ckpt: after_create, mid_datasets, before_complete, before_rename,
//   before_latest (with checkpoint.async, mid_datasets is in the background
//   write, before_complete at the later step boundary that completes it)
// fault_armed() only answers whether a site is named, for faults that are not
// a kill: grad:inf sets one gradient of this rank to inf before the update;
// ckpt:write_error[@N] fails this rank's write of dataset N (any, without @);
// ckpt:drain_error[@STEP] fails the background write of that step's save
// (checkpoint.async) halfway (EIO), ckpt:drain_stall[@STEP] stops it there
// for good, ckpt:drain_slow[@STEP] sleeps 5 ms before each of its pieces;
// ckpt:write_slow makes the direct-I/O write queue sleep 20 ms before each
// transfer (a slow disk);
// step:stall@N makes this rank sleep for an hour before step N (a stuck rank);
// swap:no_space@R makes world rank R's offload swap file find its disk full,
// swap:no_direct@R its file system refuse O_DIRECT, swap:io_error@R its
// transfers fail (EIO).
#pragma once

namespace trident {

// Kills the process if TRIDENT_FAULT_INJECT names this site, phase and step.
void fault_point(const char* site, const char* phase, long step);
bool fault_armed(const char* site, const char* phase, long step);

}  // namespace trident
