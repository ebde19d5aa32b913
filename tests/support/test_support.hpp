// Helpers shared by the tests: a scratch directory, a token shard made from
// text, and a small deck as TOML text.
#pragma once
#include <mpi.h>

#include <string>
#include <vector>

namespace trident::testing {

// A fresh directory under the build tree's tmp/, same name on every rank.
std::string scratch_dir(const std::string& name);

// Writes a byte-level shard of `bytes` bytes of deterministic pseudo-English.
std::string make_text_shard(const std::string& dir, const std::string& name, std::size_t bytes);

// A tiny model deck reading `train` and `val` shards; extra TOML appended.
std::string tiny_deck(const std::string& train, const std::string& val,
                      const std::string& extra = "");

// Helpers for tests under mpirun.
int world_size();
int world_rank();
// The first n ranks of MPI_COMM_WORLD as a communicator (MPI_COMM_NULL on the
// others); collective over the world.
MPI_Comm first_ranks(int n);
// A per-rank scratch directory holding a text shard `train.bin` of `bytes` bytes.
std::string rank_shard_dir(const std::string& prefix, std::size_t bytes);

}  // namespace trident::testing

namespace trident {
class Trainer;
class Grid;
class TensorTable;
struct GptConfig;
}  // namespace trident

namespace trident::testing {

// Every parameter of the global model, gathered from whatever layout trained
// it (pipeline chunks, tensor shards, ZeRO slices), in the serial model's
// layout `serial` (build_gpt_param_table(config)). Collective over the grid.
std::vector<float> gather_global_params(Trainer& trainer, Grid& grid, const GptConfig& config,
                                        TensorTable& serial);

// Norm-wise relative difference ||a - b|| / ||b||.
double rel_diff(const float* a, const float* b, std::size_t n);
double rel_diff(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace trident::testing
