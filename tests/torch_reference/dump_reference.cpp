// Writes REF.h5 for compare_with_torch.py: the initial weights, the batches,
// the step-0 loss and gradients of Trident's model, and the losses, gradient
// norms and final weights of 10 steps of Trident's real training loop.
//   usage: dump_reference OUT.h5 SCRATCH_DIR [section.key=value ...]
// The overrides change the small GPT-2 below, e.g. model.family=llama
// model.heads=4 model.kv_heads=2: each choice of the architecture is checked
// by a ctest entry of its own (tests/CMakeLists.txt).
#include <hdf5.h>
#include <mpi.h>

#include <cstdio>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "io/deck.hpp"
#include "io/deck_choices.hpp"
#include "io/token_shard.hpp"
#include "train/trainer.hpp"

using namespace trident;

namespace {

void attr(hid_t obj, const char* name, double v) {
  hid_t s = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(obj, name, H5T_NATIVE_DOUBLE, s, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_DOUBLE, &v);
  H5Aclose(a), H5Sclose(s);
}
void attr_int(hid_t obj, const char* name, int v) {
  hid_t s = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(obj, name, H5T_NATIVE_INT, s, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_INT, &v);
  H5Aclose(a), H5Sclose(s);
}
void attr_str(hid_t obj, const char* name, const std::string& v) {
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, v.size());
  hid_t s = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, t, v.data());
  H5Aclose(a), H5Sclose(s), H5Tclose(t);
}
template <class T>
void dataset(hid_t loc, const std::string& name, const std::vector<hsize_t>& dims, const T* data) {
  const hid_t type = std::is_same_v<T, float> ? H5T_NATIVE_FLOAT : H5T_NATIVE_INT;
  hid_t s = dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(int(dims.size()), dims.data(), nullptr);
  hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  hid_t d = H5Dcreate2(loc, name.c_str(), type, s, lcpl, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
  H5Dclose(d), H5Pclose(lcpl), H5Sclose(s);
}
// Tensors in PyTorch's shapes: the global shape (the serial model's padding
// rows at the end of the tables are left out), its leading dims folded into
// rows ([3, C, C] to [3C, C]: the serial arena holds the parts one after
// another) and a bias folded to one dim.
void tensors(hid_t f, const std::string& group, const TensorTable& t, const float* base) {
  for (const TensorInfo& ti : t.tensors()) {
    std::vector<hsize_t> dims(ti.global_shape.begin(), ti.global_shape.end());
    const bool bias = ti.name.size() > 2 && ti.name.compare(ti.name.size() - 2, 2, ".b") == 0;
    while (dims.size() > (bias ? 1u : 2u)) {
      dims[1] *= dims[0];
      dims.erase(dims.begin());
    }
    dataset(f, group + "/" + ti.name, dims, base + ti.offset);
  }
}

// The architecture, for the PyTorch rebuild to follow.
void model_attrs(hid_t f, const GptConfig& m) {
  attr_int(f, "layers", m.layers), attr_int(f, "d_model", m.d_model), attr_int(f, "heads", m.heads);
  attr_int(f, "seq_len", m.seq_len), attr_int(f, "vocab", m.vocab);
  attr_int(f, "kv_heads", m.kv_head_count()), attr_int(f, "ffn_hidden", m.d_ff());
  attr_str(f, "positions", choice_name(m.positions)), attr(f, "rope_theta", m.rope_theta);
  attr_str(f, "norm", choice_name(m.norm)), attr(f, "norm_eps", m.norm_eps);
  attr_str(f, "mlp", choice_name(m.mlp));
  attr_int(f, "bias", m.bias), attr_int(f, "tied_embeddings", m.tied_embeddings);
}

void dump(const std::string& out, const std::string& dir, const std::vector<std::string>& overrides) {
  const int steps = 10, B = 4, T = 16;
  // A random token stream; step s of batch B reads windows s*B .. s*B+B-1.
  std::mt19937 gen(2024);
  std::vector<std::uint16_t> stream(std::size_t(steps) * B * T + 1);
  for (auto& t : stream) t = std::uint16_t(gen() % 64);
  write_token_shard(dir + "/ref_tokens.bin", stream);

  const std::string deck_text =
      "[model]\nlayers = 2\nd_model = 32\nheads = 2\nseq_len = 16\nvocab = 64\n"
      "[data]\ntrain = \"" + dir + "/ref_tokens.bin\"\n"
      "[train]\nsteps = 10\nbatch = 4\nmicro_batch = 2\nlr = 1e-2\nwarmup = 2\nmin_lr = 1e-3\n"
      "weight_decay = 0.1\ngrad_clip = 1.0\nbeta1 = 0.9\nbeta2 = 0.95\neps = 1e-8\nseed = 11\n";
  Deck d = parse_deck(deck_text, "reference.toml", overrides);
  Grid grid(MPI_COMM_SELF, resolve_layout(d, 1));
  auto be = make_cpu_backend(1);
  MemoryLedger ledger;
  TokenDataset data(d.data.train, T, "data.train");
  Trainer trainer(d, grid, *be, ledger, data, nullptr);
  GptModel& model = trainer.model();
  const TensorTable& table = model.param_table();

  hid_t f = H5Fcreate(out.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const auto& m = d.model;
  model_attrs(f, m);
  attr_int(f, "micro_batch", B);
  attr_int(f, "steps", steps), attr_int(f, "warmup", d.train.warmup);
  attr(f, "lr", d.train.lr), attr(f, "min_lr", d.train.min_lr), attr(f, "weight_decay", d.train.weight_decay);
  attr(f, "grad_clip", d.train.grad_clip), attr(f, "beta1", d.train.beta1), attr(f, "beta2", d.train.beta2);
  attr(f, "eps", d.train.eps);
  tensors(f, "init", table, model.params().f32());

  std::vector<std::int32_t> tokens(std::size_t(steps) * B * T), targets(tokens.size());
  for (int w = 0; w < steps * B; ++w) data.read_window(w, &tokens[std::size_t(w) * T], &targets[std::size_t(w) * T]);
  dataset(f, "batch/tokens", {hsize_t(steps), hsize_t(B), hsize_t(T)}, tokens.data());
  dataset(f, "batch/targets", {hsize_t(steps), hsize_t(B), hsize_t(T)}, targets.data());

  // Step-0 loss and unclipped gradients, one pass over the whole batch.
  {
    GptModel probe(m, B, *be, ledger);
    MicroBatchStorage storage(probe, *be, ledger);
    probe.params().zero();
    be->copy_from_host(probe.params().data(), model.params().data(), model.params().bytes());
    probe.grads().zero();
    const float loss = float(probe.forward(storage.acts(), tokens.data(), targets.data(), 1.0f / (B * T)) / (B * T));
    probe.backward(storage.acts(), nullptr);
    dataset(f, "step0/loss", {}, &loss);
    tensors(f, "step0/grad", table, probe.grads().f32());
  }
  std::vector<float> losses, norms;
  for (int s = 0; s < steps; ++s) {
    StepStats st = trainer.step(s);
    losses.push_back(float(st.loss));
    norms.push_back(float(st.grad_norm));
  }
  dataset(f, "train/losses", {hsize_t(steps)}, losses.data());
  dataset(f, "train/grad_norms", {hsize_t(steps)}, norms.data());
  tensors(f, "final", table, model.params().f32());
  H5Fclose(f);
  std::printf("wrote %s\n", out.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: dump_reference OUT.h5 SCRATCH_DIR [section.key=value ...]\n");
    return 2;
  }
  MPI_Init(&argc, &argv);
  try {
    dump(argv[1], argv[2], std::vector<std::string>(argv + 3, argv + argc));
  } catch (const std::exception& e) {  // a refused deck or model: say why, exit 2
    std::fprintf(stderr, "dump_reference: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }  // the grid and arenas are gone before MPI_Finalize
  MPI_Finalize();
  return 0;
}
