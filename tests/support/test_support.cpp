#include "support/test_support.hpp"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>

#include "io/token_shard.hpp"
#include "io/tokenizer.hpp"
#include "train/trainer.hpp"

namespace trident::testing {

std::string scratch_dir(const std::string& name) {
  const auto p = std::filesystem::path(TRIDENT_TEST_TMP) / name;
  std::filesystem::create_directories(p);
  return p.string();
}

std::string make_text_shard(const std::string& dir, const std::string& name, std::size_t bytes) {
  static const char* words[] = {"the ", "model ", "trains ", "on ", "text ", "and ", "learns ",
                                "which ", "byte ", "comes ", "next. ", "A ", "parallel ", "job ",
                                "runs ", "fast.\n"};
  std::string text;
  std::uint64_t x = 88172645463325252ull;
  while (text.size() < bytes) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    text += words[x % 16];
  }
  text.resize(bytes);
  const std::string path = dir + "/" + name;
  write_token_shard(path, tokenize_bytes(text));
  return path;
}

std::string tiny_deck(const std::string& train, const std::string& val, const std::string& extra) {
  return fmt::format(R"([model]
layers = 2
d_model = 32
heads = 4
seq_len = 16
vocab = 257
[data]
train = "{}"
val = "{}"
[train]
lr = 1e-2
warmup = 3
min_lr = 1e-3
seed = 7
{})", train, val, extra);
}

int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

MPI_Comm first_ranks(int n) {
  const int r = world_rank();
  MPI_Comm c;
  MPI_Comm_split(MPI_COMM_WORLD, r < n ? 0 : MPI_UNDEFINED, r, &c);
  return c;
}

std::string rank_shard_dir(const std::string& prefix, std::size_t bytes) {
  const std::string dir = scratch_dir(prefix + "_r" + std::to_string(world_rank()));
  make_text_shard(dir, "train.bin", bytes);
  return dir;
}

std::vector<float> gather_global_params(Trainer& trainer, Grid& grid, const GptConfig& config,
                                        TensorTable& serial) {
  serial = build_gpt_param_table(config);
  std::vector<float> out(serial.size(), 0.0f);
  for (ModelChunk& ch : trainer.chunks()) {
    std::vector<float> host;
    ch.model->storage().gather_params_to_host(host);  // collective over the data group
    for (const TensorInfo& t : ch.model->param_table().tensors()) {
      // One copy of each element: data rank 0, tensor rank 0 for whole tensors.
      if (!t.primary || grid.coord().dp != 0 || (t.split_dim < 0 && grid.coord().tp != 0)) continue;
      const TensorInfo& g = serial.at(t.name);
      for (std::size_t i = 0; i < t.numel; ++i)
        if (auto gi = t.global_index(i); gi >= 0) out[g.offset + std::size_t(gi)] = host[t.offset + i];
    }
  }
  grid.world().all_reduce(out.data(), out.size(), DType::f32, ReduceOp::sum);
  return out;
}

double rel_diff(const float* a, const float* b, std::size_t n) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < n; ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

double rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

}  // namespace trident::testing
