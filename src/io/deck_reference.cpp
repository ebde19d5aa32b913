// The deck reference (docs/decks.md): every key the deck reader reads, with
// the type and default the reader itself reports (deck_keys()), and its
// meaning from the table below. A key read without a meaning, a meaning for a
// key nobody reads, or a choice's meaning that leaves out one of the names the
// reader accepts (io/deck_choices.hpp) is a logic error, so the reference
// cannot drift.
#include "io/deck_reference.hpp"

#include <fmt/format.h>

#include <map>
#include <set>
#include <stdexcept>

#include "io/deck.hpp"

namespace trident {
namespace {

const std::map<std::string, std::string>& meanings() {
  static const std::map<std::string, std::string> m = {
      {"model.layers", "transformer blocks"},
      {"model.d_model", "hidden size"},
      {"model.heads", "attention heads; must divide d_model"},
      {"model.seq_len", "tokens per sequence (context length; also the position table's size)"},
      {"model.family", "`gpt2` or `llama`: the defaults of the keys below (llama: rope, rmsnorm, swiglu, no biases, untied embeddings)"},
      {"model.kv_heads", "key/value heads of grouped-query attention; must divide heads (1: multi-query; default: heads)"},
      {"model.positions", "`learned` (a position table) or `rope` (rotary queries and keys)"},
      {"model.rope_theta", "RoPE's base (Llama 2: 10000, Llama 3: 500000)"},
      {"model.norm", "`layernorm` (weight and bias) or `rmsnorm` (weight)"},
      {"model.norm_eps", "the norms' epsilon"},
      {"model.mlp", "`gelu` (d → ffn_hidden → d) or `swiglu` (gate and up d → ffn_hidden, down ffn_hidden → d)"},
      {"model.ffn_hidden", "the MLP's hidden width (0: 4·d_model)"},
      {"model.bias", "biases of the linear layers"},
      {"model.tied_embeddings", "the output head reads the token embedding's table (false: a head of its own)"},
      {"model.vocab", "vocabulary size (≤ 16777216; shards hold uint32 tokens above 65536); ≥ 257 for byte-level `trident tokenize` shards"},
      {"data.train", "token shard path, glob, or array of them (required); the matches are sorted and read as one concatenation"},
      {"data.val", "validation shards; without them no validation loss is computed"},
      {"train.steps", "optimizer steps"},
      {"train.batch", "sequences per step over **all** data-parallel ranks (the global batch)"},
      {"train.micro_batch", "sequences per forward/backward on one rank (0: batch/dp); batch/(dp·micro_batch) micro-batches are accumulated per step"},
      {"train.lr", "peak learning rate"},
      {"train.min_lr", "floor of the cosine decay"},
      {"train.warmup", "steps of linear warm-up"},
      {"train.weight_decay", "AdamW decoupled decay on matrices and embeddings (not on biases or norm weights)"},
      {"train.grad_clip", "clip the global L2 norm to this (0: off); the factor is clip/(norm+1e-6), as in PyTorch"},
      {"train.beta1", "AdamW β1"},
      {"train.beta2", "AdamW β2"},
      {"train.eps", "AdamW ε"},
      {"train.seed", "initialisation seed (layout-independent: any layout draws the same model)"},
      {"train.eval_every", "steps between validation passes (0: only at the end)"},
      {"train.eval_sequences", "validation sequences per pass (0: batch; a multiple of dp·micro_batch)"},
      {"train.recompute", "activation checkpointing: `none`, `selective` (the same as `none`: attention never keeps its T x T probabilities, which selective would drop), `full` (keep only each block's input)"},
      {"train.partition_activations", "with `full`, tp > 1 and no SP: each tensor rank keeps 1/tp of every saved block input and the group all-gathers it for the recompute (ZeRO-R); micro_batch·seq_len divisible by tp"},
      {"precision.dtype", "`fp32`, `bf16` or `fp16`: the type weights are stored and computed with and activations stored in; fp32 masters and Adam moments are kept"},
      {"precision.reduce_dtype", "the type gradients are stored, accumulated and reduced in: `fp32`, or the weights' own 16-bit type, `bf16` or `fp16` (half the gradient memory and traffic; sums rounded at every addition)"},
      {"precision.initial_scale", "fp16 dynamic loss scaling: the starting scale"},
      {"precision.growth_interval", "fp16: clean steps before the scale doubles"},
      {"precision.hysteresis", "fp16: overflows tolerated before the scale halves"},
      {"precision.min_scale", "fp16: the scale's floor"},
      {"parallel.dp", "data-parallel ranks (0: ranks/(tp·pp)); dp·tp·pp must equal the number of ranks"},
      {"parallel.tp", "tensor-parallel ranks (Megatron); must divide `model.heads` and 4·d_model"},
      {"parallel.pp", "pipeline stages"},
      {"parallel.cp", "context-parallel ranks: each sequence split into 2·cp chunks, rank i holding chunks i and 2·cp−1−i, attention as a ring over them; seq_len divisible by 2·cp"},
      {"parallel.sequence_parallel", "with tp > 1: norms and residuals hold 1/tp of the tokens (all-gather / reduce-scatter instead of all-reduce); micro_batch·seq_len divisible by tp"},
      {"parallel.schedule", "`naive`, `gpipe`, `1f1b` (PipeDream-Flush), `interleaved` (virtual_stages chunks per rank; micro-batches a multiple of pp), `zb-h1`, `zb-h2`, `zb-v` (zero bubble: backward split into B and W; pp ≥ 2; zb-v: two chunks per rank in a V, layers divisible by 2·pp), `pipedream` (asynchronous, weight stashing; not serial training)"},
      {"parallel.virtual_stages", "model chunks per pipeline rank (≥ 2 only with `interleaved`; layers divisible by pp·v)"},
      {"parallel.partition", "`uniform` (layers divisible by pp·v), `parameters` (balance parameter counts), `profile` (measure each part, then minimise the slowest stage)"},
      {"parallel.p2p_gbps", "link speed the `profile` partitioner charges for a stage boundary"},
      {"parallel.dp_mode", "`allreduce`: bucketed all-reduce overlapped with backward (DDP); `gather`: reduce to rank 0, update there, broadcast (the DataParallel baseline)"},
      {"parallel.bucket_mb", "gradient bucket size in `allreduce` mode"},
      {"parallel.post_validation", "`true`: each pipeline rank takes its optimizer step as soon as its own gradients are final, before the global gradient norm and fp16 overflow check arrive; a step they say should have been clipped or skipped is undone from a saved copy and redone (results bit for bit the synchronous step's; the copy costs the chunk's parameters, Adam moments and masters once more); the step ends without waiting for the other stages and the next step settles its checks, so its line and metrics come a step later (with checkpoints on, every step settles first and the barrier comes back); needs zero.stage = 0, a synchronous schedule"},
      {"zero.stage", "0: plain data parallelism; 1: optimizer state partitioned over the data group; 2: + gradients; 3: + parameters (needs dp_mode `allreduce`)"},
      {"zero.persistence_threshold", "units (embeddings, a block, the final norm) with fewer elements stay whole on every rank and are all-reduced: each costs its whole size in parameters and gradients on every rank (not 1/dp) and an all-reduce"},
      {"zero.table_units", "stages 2-3: units the token embedding is cut into (row pieces); 0: as many as keep each no larger than a block"},
      {"offload.optimizer", "where ZeRO's optimizer state (fp32 masters, Adam moments of the owned slices) lives: `none` (beside the model), `cpu` (host memory; pinned on CUDA; on the CPU backend the same memory, for correctness), `nvme` (a per-rank swap file in offload.nvme_path, streamed through the step in blocks); needs zero.stage ≥ 1; trajectories are bit-identical to `none`"},
      {"offload.params", "where ZeRO-3's parameter shard (this rank's slices of the partitioned units, in precision.dtype) lives: `none` (beside the model), `cpu` (host memory), `nvme` (a per-rank swap file in offload.nvme_path); each slice is read into a staging buffer before its all-gather, one unit ahead; persistent units stay in memory; needs zero.stage = 3; trajectories are bit-identical to `none`"},
      {"offload.nvme_path", "node-local directory for the swap files (one per rank, unlinked once open so nothing is left behind); must exist, be writable and have room for the state; a file system refusing O_DIRECT falls back to buffered I/O with a warning"},
      {"offload.block_mb", "MiB per swap transfer: the step reads, updates and writes back the state in blocks of this size, three blocks in flight"},
      {"offload.queue_depth", "swap transfers in flight at the disk (io_uring)"},
      {"offload.pin_memory", "CUDA: page-locked host memory for the offloaded state and staging buffers"},
      {"offload.ratio", "with `cpu`: the fraction of each rank's optimizer shard (its last elements) in host memory, updated by the host; the rest stays in the arenas and the device updates it meanwhile (DeepSpeed's ZeRO-Offload++ `ratio`): less host time per step for more device memory; trajectories are bit-identical"},
      {"output.metrics", "JSONL metrics path (one object per step)"},
      {"output.log_every", "steps between printed lines"},
      {"checkpoint.dir", "directory for checkpoints; when set, training also saves after the last step and on SIGUSR1/SIGTERM"},
      {"checkpoint.every", "steps between checkpoints (0: not by step count)"},
      {"checkpoint.minutes", "wall-clock minutes between checkpoints, by rank 0's clock (0: not by time)"},
      {"checkpoint.keep", "complete checkpoints kept; older ones are deleted, never the one `latest` names (0: keep all)"},
      {"checkpoint.async", "write each periodic checkpoint in the background while the next steps compute, completed at a later step boundary (same file, checksums and crash safety; one save in flight; saves on a signal and after the last step stay synchronous); see docs/checkpoints.md"},
      {"checkpoint.staging_mb", "with `async`: MiB of state not yet written that the next optimizer step may copy to host memory instead of waiting for the background write to read it (0: it waits), and the size of the staging buffer through which device memory and offloaded state (optimizer state, ZeRO-3 parameter shards) are read in waves (at least one 2 MiB piece)"},
      {"system.threads", "OpenMP/BLAS threads per rank; 0: the cores this rank is bound to, or cores/ranks-per-node if unbound"},
      {"system.peak_tflops", "per-rank peak TFLOP/s for MFU, overriding the backend's (0: the backend's: CPU from its vector ISA, clock and threads, or FMAs measured back to back where that is faster (bf16 runs: the AMX tile unit's rate, measured back to back, or else a GEMM on the bf16 kernels their linears use); GPU from a table by device name)"},
      {"system.comm_timeout_s", "seconds a collective may wait before the job is aborted with a diagnosis naming the ranks elsewhere"},
      {"system.device", "`cpu` or `cuda` (one GPU per rank: node-local rank mod the GPUs it sees); `cuda` needs a build with `--preset cuda`"},
      {"system.comm", "`mpi`, `nccl`, `staged` (MPI through pinned host copies) or `auto`: `mpi` on the CPU; on CUDA `nccl`, or `staged` when ranks share a GPU or NCCL is missing"},
      {"system.allow_tf32", "CUDA: let cuBLAS use TF32 tensor cores for fp32 GEMMs (faster, ~1e-3 relative error per product)"},
  };
  return m;
}

// The type column: a choice lists the names the reader accepts, each of
// which its meaning must explain.
std::string type_column(const DeckKey& k, const std::string& meaning) {
  std::string out = k.type;
  for (std::size_t i = 0; i < k.choices.size(); ++i) {
    const std::string code = "`" + k.choices[i] + "`";
    if (meaning.find(code) == std::string::npos)
      throw std::logic_error(fmt::format(
          "io/deck_reference.cpp: the meaning of {}.{} leaves out {}", k.section, k.key, code));
    out += i == 0 ? ": " : i + 1 == k.choices.size() ? " or " : ", ";
    out += code;
  }
  return out;
}

}  // namespace

std::string deck_reference_markdown() {
  const std::vector<DeckKey> keys = deck_keys();
  std::set<std::string> described;
  std::string out =
      "# Input deck reference\n\n"
      "Generated by `trident deck --reference` from the deck reader itself (types and defaults as\n"
      "it reads them); a test fails when this file differs. Paths are relative to the working\n"
      "directory; unknown sections or keys are errors naming the closest known one. Any key can be\n"
      "overridden on the command line with `--set section.key=value` (the value is parsed as TOML).\n";
  std::string section;
  for (const DeckKey& k : keys) {
    const std::string name = k.section + "." + k.key;
    auto it = meanings().find(name);
    if (it == meanings().end())
      throw std::logic_error("deck key " + name + " has no meaning in io/deck_reference.cpp");
    described.insert(name);
    if (k.section != section) {
      section = k.section;
      out += fmt::format("\n## [{}]\n\n| key | type | default | meaning |\n|---|---|---|---|\n",
                         section);
    }
    out += fmt::format("| `{}` | {} | `{}` | {} |\n", k.key, type_column(k, it->second),
                       k.default_value, it->second);
  }
  for (const auto& [name, meaning] : meanings())
    if (!described.count(name))
      throw std::logic_error("io/deck_reference.cpp describes " + name + ", which no deck reads");
  return out;
}

}  // namespace trident
