#include "checkpoint/checkpoint_schema.hpp"

#include <fmt/format.h>

#include "core/error.hpp"
#include "checkpoint/h5.hpp"

namespace trident {
namespace {

// Root attributes named after deck keys ("model.d_model") hold the deck's
// values, so the check on resume can name the key.
template <class F>
void for_each_model_key(GptConfig& m, F&& f) {
  f("model.layers", m.layers);
  f("model.d_model", m.d_model);
  f("model.heads", m.heads);
  f("model.seq_len", m.seq_len);
  f("model.vocab", m.vocab);
}

template <class FInt, class FReal>
void for_each_train_key(TrainSection& t, FInt&& i, FReal&& r) {
  i("train.steps", t.steps);
  i("train.batch", t.batch);
  i("train.micro_batch", t.micro_batch);
  i("train.warmup", t.warmup);
  r("train.lr", t.lr);
  r("train.min_lr", t.min_lr);
  r("train.weight_decay", t.weight_decay);
  r("train.grad_clip", t.grad_clip);
  r("train.beta1", t.beta1);
  r("train.beta2", t.beta2);
  r("train.eps", t.eps);
}

template <class T>
T required(const std::optional<T>& v, const char* name) {
  if (!v) throw RuntimeFailure(fmt::format("the root attribute '{}' is missing", name));
  return *v;
}

}  // namespace

std::string dataset_path(const std::string& group, const std::string& tensor) {
  return "/" + group + "/" + tensor;
}

std::string format_shape(const std::vector<std::int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

void write_checkpoint_meta(hid_t f, const CheckpointMeta& meta) {
  CheckpointMeta m = meta;  // the key walkers take references
  h5_write_attr(f, "format_version", m.format_version);
  h5_write_attr(f, "step", m.step);
  h5_write_attr(f, "tokens_seen", m.tokens_seen);
  h5_write_attr(f, "optimizer_steps", m.optimizer_steps);
  h5_write_attr(f, "train_window", m.train_window);
  h5_write_attr(f, "val_window", m.val_window);
  h5_write_attr(f, "deck_path", m.deck_path);
  h5_write_attr(f, "deck", m.deck_text);
  h5_write_attr(f, "dp", std::int64_t(m.layout.dp));
  h5_write_attr(f, "tp", std::int64_t(m.layout.tp));
  h5_write_attr(f, "pp", std::int64_t(m.layout.pp));
  h5_write_attr(f, "dp_mode", m.dp_mode);
  h5_write_attr(f, "seed", std::uint64_t(m.train.seed));
  for_each_model_key(m.model, [&](const char* k, int v) { h5_write_attr(f, k, std::int64_t(v)); });
  for_each_train_key(
      m.train, [&](const char* k, int v) { h5_write_attr(f, k, std::int64_t(v)); },
      [&](const char* k, double v) { h5_write_attr(f, k, v); });
  // Extensible run state: a group of scalars, each present only when it exists.
  H5Handle gcpl(H5Pcreate(H5P_GROUP_CREATE), H5Pclose);
  H5Pset_link_creation_order(gcpl.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
  H5Handle state(h5_check(H5Gcreate2(f, "state", H5P_DEFAULT, gcpl.get(), H5P_DEFAULT),
                          "create group /state"),
                 H5Gclose);
  for (const auto& [k, v] : m.state) h5_write_attr(state.get(), k, v);
}

CheckpointMeta read_checkpoint_meta(hid_t f) {
  CheckpointMeta m;
  m.format_version = required(h5_read_i64(f, "format_version"), "format_version");
  if (m.format_version != kCheckpointFormatVersion) return m;  // the caller reports it
  m.step = required(h5_read_i64(f, "step"), "step");
  m.tokens_seen = required(h5_read_i64(f, "tokens_seen"), "tokens_seen");
  m.optimizer_steps = required(h5_read_i64(f, "optimizer_steps"), "optimizer_steps");
  m.train_window = required(h5_read_i64(f, "train_window"), "train_window");
  m.val_window = required(h5_read_i64(f, "val_window"), "val_window");
  m.deck_path = required(h5_read_str(f, "deck_path"), "deck_path");
  m.deck_text = required(h5_read_str(f, "deck"), "deck");
  m.layout.dp = int(required(h5_read_i64(f, "dp"), "dp"));
  m.layout.tp = int(required(h5_read_i64(f, "tp"), "tp"));
  m.layout.pp = int(required(h5_read_i64(f, "pp"), "pp"));
  m.dp_mode = required(h5_read_str(f, "dp_mode"), "dp_mode");
  m.train.seed = required(h5_read_u64(f, "seed"), "seed");
  for_each_model_key(m.model, [&](const char* k, int& v) { v = int(required(h5_read_i64(f, k), k)); });
  for_each_train_key(
      m.train, [&](const char* k, int& v) { v = int(required(h5_read_i64(f, k), k)); },
      [&](const char* k, double& v) { v = required(h5_read_f64(f, k), k); });
  if (H5Lexists(f, "state", H5P_DEFAULT) > 0) {
    H5Handle state(h5_check(H5Gopen2(f, "state", H5P_DEFAULT), "open /state"), H5Gclose);
    H5O_info_t info;
    h5_check(H5Oget_info2(state.get(), &info, H5O_INFO_NUM_ATTRS), "inspect /state");
    for (hsize_t i = 0; i < info.num_attrs; ++i) {
      char name[256] = {};
      H5Aget_name_by_idx(state.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof(name),
                         H5P_DEFAULT);
      m.state[name] = required(h5_read_f64(state.get(), name), name);
    }
  }
  return m;
}

}  // namespace trident
