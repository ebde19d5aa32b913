#include "io/deck.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <toml++/toml.h>

#include "core/error.hpp"
#include "io/deck_reader.hpp"

namespace trident {
namespace {

// "is not a <noun>; use <every name of E>", the message for a name outside E.
template <class E>
std::string not_a(const char* noun) {
  return fmt::format("is not a {}; use {}", noun, choice_list<E>("\""));
}

void apply_override(toml::table& root, const std::string& item, const std::string& origin) {
  const auto eq = item.find('=');
  const auto dot = item.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot > eq) {
    throw InputError(fmt::format(
        "--set {}: expected section.key=value, e.g. --set train.steps=50", item));
  }
  const std::string section = item.substr(0, dot);
  const std::string key = item.substr(dot + 1, eq - dot - 1);
  const std::string value = item.substr(eq + 1);
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + value);
  } catch (const toml::parse_error&) {
    parsed.insert_or_assign("v", value);  // bare words are strings: --set data.train=x.bin
  }
  if (!root.contains(section)) root.insert(section, toml::table{});
  toml::table* sec = root[section].as_table();
  if (!sec) throw InputError(fmt::format("{}: [{}] is not a table", origin, section));
  sec->insert_or_assign(key, *parsed.get("v"));
}

// model.family sets the defaults of the architecture's choices; each key
// read after it may still change one.
void apply_family(DeckReader& r, GptConfig& m) {
  ModelFamily family = ModelFamily::gpt2;
  r.require(r.get_choice("model", "family", family), "model", "family",
            not_a<ModelFamily>("model family"));
  if (family == ModelFamily::llama) {
    m.positions = PositionEncoding::rope;
    m.norm = NormKind::rmsnorm;
    m.norm_eps = 1e-5;
    m.mlp = MlpKind::swiglu;
    m.bias = false;
    m.tied_embeddings = false;
  }
}

void read_architecture(DeckReader& r, GptConfig& m) {
  apply_family(r, m);
  r.get("model", "kv_heads", m.kv_heads);
  r.require(r.get_choice("model", "positions", m.positions), "model", "positions",
            not_a<PositionEncoding>("position encoding"));
  r.get("model", "rope_theta", m.rope_theta);
  r.require(r.get_choice("model", "norm", m.norm), "model", "norm", not_a<NormKind>("norm"));
  r.get("model", "norm_eps", m.norm_eps);
  r.require(r.get_choice("model", "mlp", m.mlp), "model", "mlp", not_a<MlpKind>("MLP"));
  r.get("model", "ffn_hidden", m.ffn_hidden);
  r.get("model", "bias", m.bias);
  r.get("model", "tied_embeddings", m.tied_embeddings);
  r.require(m.rope_theta > 1, "model", "rope_theta", "must be greater than 1");
  r.require(m.norm_eps > 0, "model", "norm_eps", "must be positive");
  r.require(m.ffn_hidden >= 0, "model", "ffn_hidden", "must be >= 0 (0: 4·d_model)");
  if (m.kv_heads == 0) m.kv_heads = m.heads;
  if (m.kv_heads < 1 || m.heads % m.kv_heads != 0) {
    std::vector<int> ok;
    for (int h = 1; h <= m.heads; ++h)
      if (m.heads % h == 0) ok.push_back(h);
    r.fail("model", "kv_heads",
           fmt::format("= {} does not divide model.heads = {}; choose kv_heads in {{{}}}",
                       m.kv_heads, m.heads, fmt::join(ok, ", ")));
  }
}

void read_model(DeckReader& r, GptConfig& m) {
  r.get("model", "layers", m.layers);
  r.get("model", "d_model", m.d_model);
  r.get("model", "heads", m.heads);
  r.get("model", "seq_len", m.seq_len);
  r.get("model", "vocab", m.vocab);
  r.require(m.layers >= 1, "model", "layers", "must be at least 1");
  r.require(m.d_model >= 1, "model", "d_model", "must be at least 1");
  r.require(m.heads >= 1, "model", "heads", "must be at least 1");
  r.require(m.seq_len >= 1, "model", "seq_len", "must be at least 1");
  // Shards hold uint32 tokens above 65,536 ids and the trainer's ids are
  // int32; 2^24 (64x Gemma's 262,144) keeps a vocabulary plus its padding
  // (to 64 * tp rows) or a piece's rows far from int overflow. The data's
  // ids are checked against model.vocab when train opens the shards.
  constexpr int kMaxVocab = 1 << 24;
  r.require(m.vocab >= 2 && m.vocab <= kMaxVocab, "model", "vocab",
            fmt::format("must be in [2, {}]", kMaxVocab));
  if (m.d_model % m.heads != 0) {
    std::vector<int> ok;
    for (int h = 1; h <= m.d_model && ok.size() < 8; ++h)
      if (m.d_model % h == 0) ok.push_back(h);
    r.fail("model", "heads",
           fmt::format("= {} does not divide model.d_model = {}; choose heads in {{{}}}", m.heads,
                       m.d_model, fmt::join(ok, ", ")));
  }
  read_architecture(r, m);
}

void read_train(DeckReader& r, TrainSection& t) {
  r.get("train", "steps", t.steps);
  r.get("train", "batch", t.batch);
  r.get("train", "micro_batch", t.micro_batch);
  r.get("train", "lr", t.lr);
  r.get("train", "warmup", t.warmup);
  r.get("train", "min_lr", t.min_lr);
  r.get("train", "weight_decay", t.weight_decay);
  r.get("train", "grad_clip", t.grad_clip);
  r.get("train", "beta1", t.beta1);
  r.get("train", "beta2", t.beta2);
  r.get("train", "eps", t.eps);
  r.get("train", "seed", t.seed);
  r.get("train", "eval_every", t.eval_every);
  r.get("train", "eval_sequences", t.eval_sequences);
  r.require(t.steps >= 1, "train", "steps", "must be at least 1");
  r.require(t.batch >= 1, "train", "batch", "must be at least 1");
  r.require(t.micro_batch >= 0, "train", "micro_batch", "must be >= 0 (0: batch / dp)");
  r.require(t.lr > 0, "train", "lr", "must be positive");
  r.require(t.warmup >= 0, "train", "warmup", "must be >= 0");
  r.require(t.min_lr >= 0 && t.min_lr <= t.lr, "train", "min_lr", "must be in [0, train.lr]");
  r.require(t.weight_decay >= 0, "train", "weight_decay", "must be >= 0");
  r.require(t.grad_clip >= 0, "train", "grad_clip", "must be >= 0 (0 disables clipping)");
  r.require(t.beta1 >= 0 && t.beta1 < 1, "train", "beta1", "must be in [0, 1)");
  r.require(t.beta2 >= 0 && t.beta2 < 1, "train", "beta2", "must be in [0, 1)");
  r.require(t.eps > 0, "train", "eps", "must be positive");
  r.require(t.eval_every >= 0, "train", "eval_every", "must be >= 0 (0: only at the end)");
  r.require(t.eval_sequences >= 0, "train", "eval_sequences", "must be >= 0");
  const bool recompute_named = r.get_choice("train", "recompute", t.recompute);
  r.get("train", "partition_activations", t.partition_activations);
  r.require(recompute_named, "train", "recompute", not_a<Recompute>("mode"));
}

void read_precision(DeckReader& r, PrecisionSection& p) {
  const bool dtype_named = r.get_choice("precision", "dtype", p.dtype);
  const bool reduce_named = r.get_choice("precision", "reduce_dtype", p.reduce_dtype);
  r.get("precision", "initial_scale", p.initial_scale);
  r.get("precision", "growth_interval", p.growth_interval);
  r.get("precision", "hysteresis", p.hysteresis);
  r.get("precision", "min_scale", p.min_scale);
  r.require(dtype_named, "precision", "dtype", not_a<Precision>("precision"));
  const char* dtype = choice_name(p.dtype);
  r.require(reduce_named && (p.reduce_dtype == Precision::fp32 || p.reduce_dtype == p.dtype),
            "precision", "reduce_dtype",
            fmt::format("with precision.dtype = \"{}\": gradients are stored and reduced "
                        "in fp32 or in the weights' own 16-bit type; use \"fp32\"{}",
                        dtype,
                        p.dtype == Precision::fp32 ? "" : fmt::format(" or \"{}\"", dtype)));
  r.require(p.initial_scale >= 1, "precision", "initial_scale", "must be >= 1");
  r.require(p.growth_interval >= 1, "precision", "growth_interval", "must be at least 1");
  r.require(p.hysteresis >= 1, "precision", "hysteresis", "must be at least 1");
  r.require(p.min_scale >= 1 && p.min_scale <= p.initial_scale, "precision", "min_scale",
            "must be in [1, precision.initial_scale]");
}

// Where the model computes and how its collectives move device buffers.
void read_devices(DeckReader& r, SystemSection& s) {
  const bool device_named = r.get_choice("system", "device", s.device);
  const bool comm_named = r.get_choice("system", "comm", s.comm);
  r.get("system", "allow_tf32", s.allow_tf32);
  r.require(device_named, "system", "device", not_a<Device>("device"));
  r.require(s.device != Device::cuda || TRIDENT_HAVE_CUDA, "system", "device",
            "but this trident was built without CUDA; rebuild with cmake --preset cuda");
  r.require(comm_named, "system", "comm", not_a<CommBackend>("backend"));
  r.require(s.device == Device::cuda || s.comm == CommBackend::automatic ||
                s.comm == CommBackend::mpi,
            "system", "comm",
            "moves device buffers and needs system.device = \"cuda\"; on the CPU use \"mpi\"");
  r.require(s.comm != CommBackend::nccl || TRIDENT_HAVE_NCCL || !TRIDENT_HAVE_CUDA, "system",
            "comm",
            "but this trident was built without NCCL; use \"staged\" or rebuild with NCCL");
}

// Offload is another home for ZeRO's shards, so it needs ZeRO.
void read_offload(DeckReader& r, const ZeroSection& z, OffloadSection& o) {
  const bool optimizer_named = r.get_choice("offload", "optimizer", o.optimizer);
  const bool params_named = r.get_choice("offload", "params", o.params);
  r.get("offload", "nvme_path", o.nvme_path);
  r.get("offload", "block_mb", o.block_mb);
  r.get("offload", "queue_depth", o.queue_depth);
  r.get("offload", "pin_memory", o.pin_memory);
  r.get("offload", "ratio", o.ratio);
  r.require(optimizer_named, "offload", "optimizer", not_a<OffloadTarget>("home"));
  r.require(params_named, "offload", "params", not_a<OffloadTarget>("home"));
  r.require(o.optimizer == OffloadTarget::none || z.stage >= 1, "offload", "optimizer",
            fmt::format("= \"{}\" needs ZeRO (it moves the sharded optimizer state); set "
                        "zero.stage = 1, 2 or 3", choice_name(o.optimizer)));
  r.require(o.params == OffloadTarget::none || z.stage == 3, "offload", "params",
            fmt::format("= \"{}\" needs zero.stage = 3 (only stage 3 shards the parameters)",
                        choice_name(o.params)));
  const bool nvme = o.optimizer == OffloadTarget::nvme || o.params == OffloadTarget::nvme;
  r.require(!nvme || !o.nvme_path.empty(), "offload", "nvme_path",
            "is required with \"nvme\" offload: a node-local directory for the swap files, "
            "e.g. \"/local/scratch\"");
  r.require(o.block_mb >= 1.0 / 256 && o.block_mb <= 1024, "offload", "block_mb",
            "must be in [1/256, 1024] (4 KiB to 1 GiB)");
  r.require(o.queue_depth >= 1 && o.queue_depth <= 256, "offload", "queue_depth",
            "must be in [1, 256]");
  r.require(o.ratio > 0 && o.ratio <= 1, "offload", "ratio",
            "must be in (0, 1]: the fraction of the optimizer state in host memory (for none, "
            "set offload.optimizer = \"none\")");
  r.require(o.ratio == 1 || o.optimizer == OffloadTarget::cpu, "offload", "ratio",
            fmt::format("needs offload.optimizer = \"cpu\" (it splits the state between the "
                        "device and host memory; optimizer is \"{}\"), or ratio = 1",
                        choice_name(o.optimizer)));
}

void read_rest(DeckReader& r, Deck& d) {
  r.get_paths("data", "train", d.data.train);
  r.get_paths("data", "val", d.data.val);
  r.require(!d.data.train.empty(), "data", "train",
            "is required: a token shard path or glob, e.g. \"data/corpus_train.bin\"");
  auto& p = d.parallel;
  r.get("parallel", "dp", p.dp);
  r.get("parallel", "tp", p.tp);
  r.get("parallel", "pp", p.pp);
  r.get("parallel", "sequence_parallel", p.sequence_parallel);
  const bool schedule_named = r.get_choice("parallel", "schedule", p.schedule);
  r.get("parallel", "virtual_stages", p.virtual_stages);
  const bool partition_named = r.get_choice("parallel", "partition", p.partition);
  r.get("parallel", "p2p_gbps", p.p2p_gbps);
  r.require(schedule_named, "parallel", "schedule", not_a<ScheduleKind>("schedule"));
  r.require(partition_named, "parallel", "partition", not_a<PartitionMethod>("partition"));
  r.require(p.virtual_stages >= 1, "parallel", "virtual_stages", "must be at least 1");
  r.require(p.p2p_gbps > 0, "parallel", "p2p_gbps", "must be positive");
  const bool dp_mode_named = r.get_choice("parallel", "dp_mode", p.dp_mode);
  r.get("parallel", "bucket_mb", p.bucket_mb);
  r.require(p.dp >= 0, "parallel", "dp", "must be >= 0 (0 or absent: derived from the world)");
  r.require(p.tp >= 1, "parallel", "tp", "must be at least 1");
  r.require(p.pp >= 1, "parallel", "pp", "must be at least 1");
  r.require(dp_mode_named, "parallel", "dp_mode", not_a<DpMode>("mode"));
  r.require(p.bucket_mb > 0, "parallel", "bucket_mb", "must be positive");
  r.get("parallel", "post_validation", p.post_validation);
  r.get("zero", "stage", d.zero.stage);
  r.get("zero", "persistence_threshold", d.zero.persistence_threshold);
  r.require(d.zero.stage >= 0 && d.zero.stage <= 3, "zero", "stage",
            "must be 0 (off), 1 (optimizer state), 2 (+ gradients) or 3 (+ parameters)");
  r.require(d.zero.persistence_threshold >= 0, "zero", "persistence_threshold", "must be >= 0");
  r.get("zero", "table_units", d.zero.table_units);
  r.require(d.zero.table_units >= 0, "zero", "table_units",
            "must be >= 0 (0: as many as keep each no larger than a block)");
  r.require(d.zero.stage == 0 || p.dp_mode == DpMode::allreduce, "zero", "stage",
            "needs parallel.dp_mode = \"allreduce\" (gather mode keeps everything on rank 0)");
  if (p.schedule == ScheduleKind::pipedream) {
    // Each stage updates alone after every micro-batch: nothing may need the
    // other stages (fp16's overflow vote) or a whole step's gradients (ZeRO).
    const std::string why = "with parallel.schedule = \"pipedream\" (asynchronous per-micro-batch "
                            "updates); ";
    r.require(d.zero.stage == 0, "zero", "stage",
              fmt::format("= {} is not supported {}set zero.stage = 0", d.zero.stage, why));
    r.require(p.dp_mode == DpMode::allreduce, "parallel", "dp_mode",
              fmt::format("= \"{}\" is not supported {}use \"allreduce\"",
                          choice_name(p.dp_mode), why));
    r.require(d.precision.dtype != Precision::fp16, "precision", "dtype",
              fmt::format("= \"fp16\" is not supported {}its loss scaler skips whole steps on "
                          "every rank; use \"bf16\" or \"fp32\"", why));
    // The head's share of the tied embedding's gradient travels as f32.
    r.require(d.precision.reduce_dtype == Precision::fp32, "precision", "reduce_dtype",
              fmt::format("= \"{}\" is not supported {}use \"fp32\"",
                          choice_name(d.precision.reduce_dtype), why));
  }
  read_offload(r, d.zero, d.offload);
  if (p.post_validation) {
    // The undo copies the state a data-parallel engine's step changes; ZeRO's
    // shards and gathers are not copied (yet).
    r.require(d.zero.stage == 0, "parallel", "post_validation",
              "needs zero.stage = 0 (a ZeRO step cannot be undone yet); set it false");
    r.require(p.schedule != ScheduleKind::pipedream, "parallel", "post_validation",
              "needs a synchronous schedule (pipedream updates per micro-batch); set it false");
  }
  r.get("output", "metrics", d.output.metrics);
  r.get("output", "log_every", d.output.log_every);
  r.require(d.output.log_every >= 1, "output", "log_every", "must be at least 1");
  auto& c = d.checkpoint;
  r.get("checkpoint", "dir", c.dir);
  r.get("checkpoint", "every", c.every);
  r.get("checkpoint", "minutes", c.minutes);
  r.get("checkpoint", "keep", c.keep);
  r.get("checkpoint", "async", c.async);
  r.get("checkpoint", "staging_mb", c.staging_mb);
  r.require(c.every >= 0, "checkpoint", "every", "must be >= 0 (0: not by step count)");
  r.require(c.minutes >= 0, "checkpoint", "minutes", "must be >= 0 (0: not by time)");
  r.require(c.keep >= 0, "checkpoint", "keep", "must be >= 0 (0: keep every checkpoint)");
  r.require(c.staging_mb >= 0, "checkpoint", "staging_mb",
            "must be >= 0 (0: the optimizer step waits until the save has read the state)");
  r.require(!c.dir.empty() || (c.every == 0 && c.minutes == 0), "checkpoint", "dir",
            "is required when checkpoint.every or checkpoint.minutes is set");
  r.get("system", "threads", d.system.threads);
  r.get("system", "peak_tflops", d.system.peak_tflops);
  r.get("system", "comm_timeout_s", d.system.comm_timeout_s);
  r.require(d.system.threads >= 0, "system", "threads", "must be >= 0 (0: automatic)");
  r.require(d.system.peak_tflops >= 0, "system", "peak_tflops", "must be >= 0");
  r.require(d.system.comm_timeout_s > 0, "system", "comm_timeout_s", "must be positive");
  read_devices(r, d.system);
}

}  // namespace

Deck parse_deck(const std::string& text, const std::string& origin,
                const std::vector<std::string>& overrides) {
  toml::table root;
  try {
    root = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    throw InputError(fmt::format("{}:{}:{}: TOML syntax error: {}", origin,
                                 e.source().begin.line, e.source().begin.column,
                                 e.description()));
  }
  for (const auto& o : overrides) apply_override(root, o, origin);
  Deck d;
  d.path = origin;
  d.text = text;
  for (const auto& o : overrides) d.text += "\n# --set " + o;
  DeckReader r(root, origin);
  read_model(r, d.model);
  read_train(r, d.train);
  read_precision(r, d.precision);
  read_rest(r, d);
  r.finish();
  return d;
}

std::vector<DeckKey> deck_keys() {
  // The same reading code over an empty deck: every key, in order, with its default.
  const toml::table empty;
  DeckReader r(empty, "(defaults)");
  Deck d;
  read_model(r, d.model);
  read_train(r, d.train);
  read_precision(r, d.precision);
  read_rest(r, d);
  return r.keys_read();
}

Deck load_deck(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw InputError(fmt::format("{}: is a directory, not a deck; give the deck's .toml file, "
                                 "e.g. input/default.toml", path));
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("{}: cannot open the deck (does the file exist?)", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_deck(ss.str(), path, overrides);
}

}  // namespace trident
