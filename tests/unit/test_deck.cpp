// Input decks: defaults, types, validation messages, overrides, every shipped deck.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.hpp"
#include "io/deck.hpp"

using namespace trident;

namespace {
const std::string kBase = R"([model]
layers = 2
d_model = 32
heads = 4
seq_len = 16
vocab = 257
[data]
train = "x.bin"
)";

// The InputError message for `text` (fails the test if it parses).
std::string error_of(const std::string& text, std::vector<std::string> sets = {}) {
  try {
    parse_deck(text, "t.toml", sets);
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "deck was accepted:\n" << text;
  return "";
}
}  // namespace

TEST(Deck, ReadsValuesAndDefaults) {
  Deck d = parse_deck(kBase + "[train]\nsteps = 7\nlr = 1\n", "t.toml", {});
  EXPECT_EQ(d.model.layers, 2);
  EXPECT_EQ(d.model.d_model, 32);
  EXPECT_EQ(d.train.steps, 7);
  EXPECT_DOUBLE_EQ(d.train.lr, 1.0);  // integers are accepted for floats
  EXPECT_EQ(d.train.batch, 8);
  EXPECT_EQ(d.parallel.dp_mode, DpMode::allreduce);
  EXPECT_EQ(d.parallel.schedule, ScheduleKind::one_f_one_b);
  EXPECT_EQ(d.train.recompute, Recompute::none);
  EXPECT_EQ(d.precision.dtype, Precision::fp32);
  EXPECT_EQ(d.data.train, std::vector<std::string>{"x.bin"});
}

TEST(Deck, OverridesApplyAndAreTyped) {
  Deck d = parse_deck(kBase, "t.toml", {"train.steps=42", "parallel.dp_mode=gather",
                                        "data.val=v.bin", "train.lr=0.5"});
  EXPECT_EQ(d.train.steps, 42);
  EXPECT_EQ(d.parallel.dp_mode, DpMode::gather);
  EXPECT_EQ(d.data.val, std::vector<std::string>{"v.bin"});
  EXPECT_DOUBLE_EQ(d.train.lr, 0.5);
  EXPECT_NE(error_of(kBase, {"train.steps=many"}).find("[train] steps = \"many\" must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of(kBase, {"nodot=3"}).find("expected section.key=value"), std::string::npos);
}

TEST(Deck, UnknownKeysAndSectionsSuggestTheFix) {
  EXPECT_NE(error_of(kBase + "[train]\nstpes = 3\n").find("unknown key 'stpes' in [train]; did you "
                                                          "mean 'steps'?"),
            std::string::npos);
  EXPECT_NE(error_of(kBase + "[trian]\nsteps = 3\n").find("unknown section [trian]; did you mean "
                                                          "[train]?"),
            std::string::npos);
  EXPECT_NE(error_of("steps = 3\n" + kBase).find("must be inside a section"), std::string::npos);
}

TEST(Deck, ImpossibleValuesNameKeyAndFix) {
  EXPECT_NE(error_of(kBase + "[train]\nsteps = \"10\"\n").find("[train] steps = \"10\" must be an "
                                                               "integer"),
            std::string::npos);
  const std::string heads = error_of(kBase, {"model.heads=5"});
  EXPECT_NE(heads.find("[model] heads = 5 does not divide model.d_model = 32"), std::string::npos);
  EXPECT_NE(heads.find("choose heads in {1, 2, 4, 8, 16, 32}"), std::string::npos);
  EXPECT_NE(error_of(kBase, {"train.steps=0"}).find("[train] steps = 0 must be at least 1"),
            std::string::npos);
  EXPECT_NE(error_of(kBase, {"parallel.dp_mode=\"ring\""}).find("use \"allreduce\" or \"gather\""),
            std::string::npos);
  // Vocabularies above uint16 are the data's business (32-bit shards), not the deck's.
  EXPECT_EQ(parse_deck(kBase, "t.toml", {"model.vocab=128256"}).model.vocab, 128256);
  EXPECT_EQ(parse_deck(kBase, "t.toml", {"model.vocab=16777216"}).model.vocab, 16777216);
  EXPECT_NE(error_of(kBase, {"model.vocab=16777217"}).find("[model] vocab = 16777217 must be in "
                                                           "[2, 16777216]"),
            std::string::npos);
  EXPECT_NE(error_of(kBase, {"model.vocab=1"}).find("must be in [2, 16777216]"), std::string::npos);
  EXPECT_NE(error_of("[model]\nlayers = 2\n").find("[data] train is required"), std::string::npos);
  EXPECT_NE(error_of(kBase + "[model\n").find("TOML syntax error"), std::string::npos);
  // Gradients are reduced in fp32 or in the weights' own 16-bit type.
  const std::string reduce =
      error_of(kBase, {"precision.dtype=\"bf16\"", "precision.reduce_dtype=\"fp16\""});
  EXPECT_NE(reduce.find("[precision] reduce_dtype = \"fp16\" with precision.dtype = \"bf16\""),
            std::string::npos) << reduce;
  EXPECT_NE(reduce.find("use \"fp32\" or \"bf16\""), std::string::npos) << reduce;
  EXPECT_NE(error_of(kBase, {"precision.reduce_dtype=\"bf16\""}).find("use \"fp32\""),
            std::string::npos);
  EXPECT_EQ(parse_deck(kBase, "t.toml", {"precision.dtype=\"fp16\"",
                                         "precision.reduce_dtype=\"fp16\""}).precision.reduce_dtype,
            Precision::fp16);
  // A reduce_dtype that names no precision gets the same advice.
  EXPECT_NE(error_of(kBase, {"precision.reduce_dtype=\"fp8\""})
                .find("[precision] reduce_dtype = \"fp8\" with precision.dtype = \"fp32\""),
            std::string::npos);
}

// Each string-valued key: every name in its table reads back as its enum, and
// a name outside it is refused with the whole table listed.
template <class E>
void expect_choices(const std::string& key, const std::string& message_tail) {
  for (const auto& c : choices(E{})) {
    EXPECT_EQ(parse_choice<E>(c.name), c.value) << c.name;
    EXPECT_STREQ(choice_name(c.value), c.name);
  }
  EXPECT_FALSE(parse_choice<E>("nonsense").has_value());
  const std::string error = error_of(kBase, {key + "=nonsense"});
  EXPECT_NE(error.find(" = \"nonsense\" " + message_tail), std::string::npos) << error;
}

TEST(Deck, ChoicesReadEveryNameAndListThemWhenRefused) {
  expect_choices<ScheduleKind>("parallel.schedule",
                               "is not a schedule; use \"naive\", \"gpipe\", \"1f1b\", \"zb-h1\", "
                               "\"zb-h2\", \"zb-v\", \"interleaved\" or \"pipedream\"");
  expect_choices<Recompute>("train.recompute",
                            "is not a mode; use \"none\", \"selective\" or \"full\"");
  expect_choices<Precision>("precision.dtype",
                            "is not a precision; use \"fp32\", \"bf16\" or \"fp16\"");
  expect_choices<DpMode>("parallel.dp_mode", "is not a mode; use \"allreduce\" or \"gather\"");
  expect_choices<PartitionMethod>(
      "parallel.partition", "is not a partition; use \"uniform\", \"parameters\" or \"profile\"");
  expect_choices<Device>("system.device", "is not a device; use \"cpu\" or \"cuda\"");
  expect_choices<CommBackend>("system.comm",
                              "is not a backend; use \"auto\", \"mpi\", \"nccl\" or \"staged\"");
  const Deck d = parse_deck(kBase, "t.toml", {"parallel.schedule=zb-h2", "train.recompute=full",
                                              "parallel.partition=profile", "system.comm=mpi"});
  EXPECT_EQ(d.parallel.schedule, ScheduleKind::zb_h2);
  EXPECT_EQ(d.train.recompute, Recompute::full);
  EXPECT_EQ(d.parallel.partition, PartitionMethod::profile);
  EXPECT_EQ(d.system.comm, CommBackend::mpi);
}

TEST(Deck, CheckpointKeys) {
  Deck d = parse_deck(kBase, "t.toml", {});
  EXPECT_TRUE(d.checkpoint.dir.empty());  // off unless asked for
  EXPECT_EQ(d.checkpoint.keep, 2);
  d = parse_deck(kBase + "[checkpoint]\ndir = \"ck\"\nevery = 50\nminutes = 30\nkeep = 3\n",
                 "t.toml", {});
  EXPECT_EQ(d.checkpoint.dir, "ck");
  EXPECT_EQ(d.checkpoint.every, 50);
  EXPECT_DOUBLE_EQ(d.checkpoint.minutes, 30.0);
  EXPECT_EQ(d.checkpoint.keep, 3);
  EXPECT_NE(error_of(kBase, {"checkpoint.every=5"}).find("[checkpoint] dir is required"),
            std::string::npos);
  EXPECT_NE(error_of(kBase, {"checkpoint.dir=ck", "checkpoint.keep=-1"})
                .find("[checkpoint] keep = -1 must be >= 0"),
            std::string::npos);
}

TEST(Deck, LayoutIsResolvedAgainstTheWorld) {
  Deck d = parse_deck(kBase + "[train]\nbatch = 8\n", "t.toml", {});
  GridShape s = resolve_layout(d, 4);
  EXPECT_EQ(s.dp, 4);
  EXPECT_EQ(d.train.micro_batch, 2);  // batch / dp when left out
  EXPECT_EQ(d.train.eval_sequences, 8);

  auto layout_error = [&](std::vector<std::string> sets, int world) {
    Deck x = parse_deck(kBase, "t.toml", sets);
    try {
      resolve_layout(x, world);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(layout_error({"parallel.dp=4"}, 2).find("dp * tp * pp = 4 * 1 * 1 = 4 but the job has "
                                                    "2 ranks"),
            std::string::npos);
  EXPECT_EQ(layout_error({"parallel.tp=2"}, 2), "");
  EXPECT_NE(layout_error({"parallel.tp=3"}, 3).find("tp = 3 does not divide model.heads = 4 (each "
                                                    "tensor rank owns whole heads); choose tp in {1, 2, 4}"),
            std::string::npos);
  EXPECT_NE(layout_error({"parallel.tp=4", "parallel.sequence_parallel=true", "train.batch=4",
                          "train.micro_batch=1", "model.seq_len=6"}, 4)
                .find("sequence_parallel splits the micro_batch * seq_len = 6 tokens over tp = 4"),
            std::string::npos);
  EXPECT_NE(error_of(kBase, {"parallel.sequence_parallel=1"}).find("must be true or false"),
            std::string::npos);
  EXPECT_EQ(layout_error({"parallel.pp=2"}, 2), "");
  EXPECT_NE(layout_error({"parallel.pp=4"}, 4).find("model.layers = 2 is not divisible by pp * "
                                                   "virtual_stages = 4 * 1"),
            std::string::npos);
  EXPECT_NE(layout_error({"parallel.pp=4", "parallel.partition=\"parameters\""}, 4)
                .find("model.layers = 2 is fewer than the 4 pipeline"),
            std::string::npos);
  EXPECT_NE(layout_error({"parallel.pp=2", "parallel.schedule=\"interleaved\"",
                          "parallel.virtual_stages=2", "model.layers=4", "train.batch=3",
                          "train.micro_batch=1"}, 2)
                .find("needs the 3 micro-batches per step"),
            std::string::npos);
  EXPECT_NE(layout_error({"train.batch=6", "train.micro_batch=2"}, 2)
                .find("batch = 6 is not a multiple of dp * micro_batch = 2 * 2"),
            std::string::npos);
}

TEST(Deck, EveryShippedDeckLoads) {
  int decks = 0;
  for (const auto& e : std::filesystem::directory_iterator(TRIDENT_INPUT_DIR)) {
    if (e.path().extension() != ".toml") continue;
    SCOPED_TRACE(e.path().string());
    Deck d = load_deck(e.path().string(), {});
    // Four replicas where the deck leaves dp to the launch (real-size decks
    // name a model-parallel layout of many ranks).
    const int world = (d.parallel.dp > 0 ? d.parallel.dp : 4) * d.parallel.tp * d.parallel.pp *
                      d.parallel.cp;
    EXPECT_NO_THROW(resolve_layout(d, world));
    ++decks;
  }
  EXPECT_GE(decks, 1);
}

TEST(Deck, DeviceAndCollectivesKeys) {
  Deck d = parse_deck(kBase, "t.toml", {});
  EXPECT_EQ(d.system.device, Device::cpu);
  EXPECT_EQ(d.system.comm, CommBackend::automatic);
  EXPECT_FALSE(d.system.allow_tf32);
  EXPECT_NE(error_of(kBase, {"system.device=gpu"}).find("[system] device = \"gpu\" is not a device; "
                                                         "use \"cpu\" or \"cuda\""),
            std::string::npos);
  EXPECT_NE(error_of(kBase, {"system.comm=gloo"}).find("[system] comm = \"gloo\" is not a backend"),
            std::string::npos);
  EXPECT_NE(error_of(kBase, {"system.comm=nccl"}).find("needs system.device = \"cuda\""),
            std::string::npos);
  EXPECT_NO_THROW(parse_deck(kBase, "t.toml", {"system.comm=mpi", "system.allow_tf32=true"}));
#if TRIDENT_HAVE_CUDA
  Deck g = parse_deck(kBase, "t.toml", {"system.device=cuda", "system.comm=staged"});
  EXPECT_EQ(g.system.device, Device::cuda);
  EXPECT_EQ(g.system.comm, CommBackend::staged);
#else
  EXPECT_NE(error_of(kBase, {"system.device=cuda"}).find("[system] device = \"cuda\" but this trident "
                                                          "was built without CUDA; rebuild with "
                                                          "cmake --preset cuda"),
            std::string::npos);
#endif
}

TEST(Deck, PipeDreamRefusesWhatItDoesNotSupport) {
  auto error = [](std::vector<std::string> sets, int world) {
    sets.insert(sets.begin(), "parallel.schedule=\"pipedream\"");
    try {
      Deck d = parse_deck(kBase, "t.toml", sets);
      resolve_layout(d, world);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error({"parallel.pp=2"}, 2), "");
  EXPECT_EQ(error({"parallel.pp=2", "precision.dtype=\"bf16\""}, 2), "");
  EXPECT_NE(error({"zero.stage=1"}, 2).find("[zero] stage = 1 is not supported with "
                                            "parallel.schedule = \"pipedream\""),
            std::string::npos);
  EXPECT_NE(error({"parallel.dp_mode=\"gather\""}, 2)
                .find("[parallel] dp_mode = \"gather\" is not supported with parallel.schedule"),
            std::string::npos);
  EXPECT_NE(error({"precision.dtype=\"fp16\""}, 1).find("[precision] dtype = \"fp16\" is not "
                                                        "supported"),
            std::string::npos);
  EXPECT_NE(error({"precision.dtype=\"bf16\"", "precision.reduce_dtype=\"bf16\""}, 1)
                .find("[precision] reduce_dtype = \"bf16\" is not supported"),
            std::string::npos);
  EXPECT_NE(error({"parallel.pp=2", "parallel.virtual_stages=2"}, 2)
                .find("virtual_stages = 2 needs schedule = \"interleaved\""),
            std::string::npos);
  EXPECT_NE(error({"parallel.schedule=\"pipedrem\""}, 1).find("\"interleaved\" or \"pipedream\""),
            std::string::npos);
}

TEST(Deck, OffloadKeysAndImpossibleCombinations) {
  expect_choices<OffloadTarget>("offload.optimizer",
                                "is not a home; use \"none\", \"cpu\" or \"nvme\"");
  Deck d = parse_deck(kBase, "t.toml", {});
  EXPECT_EQ(d.offload.optimizer, OffloadTarget::none);
  EXPECT_EQ(d.offload.params, OffloadTarget::none);
  d = parse_deck(kBase, "t.toml",
                 {"zero.stage=2", "offload.optimizer=nvme", "offload.nvme_path=\"/scratch\"",
                  "offload.block_mb=0.5", "offload.queue_depth=4", "offload.pin_memory=false"});
  EXPECT_EQ(d.offload.optimizer, OffloadTarget::nvme);
  EXPECT_EQ(d.offload.nvme_path, "/scratch");
  EXPECT_DOUBLE_EQ(d.offload.block_mb, 0.5);
  EXPECT_EQ(d.offload.queue_depth, 4);
  EXPECT_FALSE(d.offload.pin_memory);
  auto refused = [](std::vector<std::string> sets, const std::string& message) {
    const std::string e = error_of(kBase, std::move(sets));
    EXPECT_NE(e.find(message), std::string::npos) << e;
  };
  refused({"offload.optimizer=cpu"},
          "[offload] optimizer = \"cpu\" needs ZeRO (it moves the sharded optimizer state); set "
          "zero.stage = 1, 2 or 3");
  refused({"zero.stage=2", "offload.params=cpu"},
          "[offload] params = \"cpu\" needs zero.stage = 3");
  refused({"zero.stage=3", "offload.params=nvme"},
          "[offload] nvme_path is required with \"nvme\" offload");
  const Deck params = parse_deck(kBase, "t.toml", {"zero.stage=3", "offload.params=nvme",
                                                   "offload.nvme_path=\"/s\""});
  EXPECT_EQ(params.offload.params, OffloadTarget::nvme);
  refused({"zero.stage=1", "offload.optimizer=nvme"},
          "[offload] nvme_path is required with \"nvme\" offload");
  refused({"zero.stage=1", "offload.optimizer=cpu", "offload.block_mb=0"},
          "[offload] block_mb = 0 must be in [1/256, 1024]");
  refused({"zero.stage=1", "offload.optimizer=cpu", "offload.queue_depth=0"},
          "[offload] queue_depth = 0 must be in [1, 256]");
}
