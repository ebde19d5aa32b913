// The input deck's sections, each what one concern reads (docs/decks.md has
// every key): a layer is given the sections it uses, not the whole Deck
// (io/deck.hpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/deck_choices.hpp"
#include "model/gpt_config.hpp"  // the [model] section

namespace trident {

struct DataSection {
  std::vector<std::string> train;  // paths or globs of token shards
  std::vector<std::string> val;
};

struct TrainSection {
  int steps = 100;
  int batch = 8;         // sequences per optimizer step, over all data-parallel ranks
  int micro_batch = 0;   // sequences per forward/backward on one rank; 0: batch / dp
  double lr = 3e-4;
  int warmup = 0;        // steps of linear warm-up
  double min_lr = 0.0;   // cosine decay floor
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // global L2 norm; 0 disables clipping
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  std::uint64_t seed = 1234;
  int eval_every = 0;      // steps between validation passes; 0: only at the end
  int eval_sequences = 0;  // validation sequences per pass; 0: train.batch
  Recompute recompute = Recompute::none;  // activation checkpointing
  bool partition_activations = true;  // full recompute, tp > 1 without SP: 1/tp of block inputs
};

// Mixed precision (docs/parallelism.md): 16-bit activations and weights
// as the model computes with them, f32 master weights and Adam moments.
struct PrecisionSection {
  Precision dtype = Precision::fp32;
  Precision reduce_dtype = Precision::fp32;  // gradient accumulation and reduction
  // fp16 dynamic loss scaling.
  double initial_scale = 65536.0;
  int growth_interval = 1000;  // clean steps before the scale doubles
  int hysteresis = 2;          // overflows tolerated before the scale halves
  double min_scale = 1.0;
};

struct ParallelSection {
  int dp = 0;  // 0: derived from the world size
  int tp = 1;
  int pp = 1;
  bool sequence_parallel = false;     // shard norm/residual activations over the tensor group
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  int virtual_stages = 1;             // model chunks per pipeline rank (interleaved)
  PartitionMethod partition = PartitionMethod::uniform;
  double p2p_gbps = 10.0;             // link speed the profile partitioner assumes
  DpMode dp_mode = DpMode::allreduce;  // bucketed and overlapped, or through rank 0
  double bucket_mb = 25.0;            // gradient bucket size for allreduce mode
  // Optimizer post-validation (Qi et al. 2024, section 4): step before the
  // global gradient norm and overflow check arrive, undo and redo if they say so.
  bool post_validation = false;
};

struct ZeroSection {
  int stage = 0;  // 0: plain data parallel; 1: optimizer state; 2: + gradients; 3: + parameters
  std::int64_t persistence_threshold = 100000;  // units smaller than this (elements) stay whole
  int table_units = 0;  // stage 3: units the token embedding is cut into; 0: none larger than a block
};

// ZeRO-Offload and ZeRO-Infinity (docs/offload.md): where the optimizer's
// state (and at stage 3 the parameter shards) live, and the swap file's I/O.
struct OffloadSection {
  OffloadTarget optimizer = OffloadTarget::none;  // fp32 masters, Adam moments
  OffloadTarget params = OffloadTarget::none;     // stage 3 parameter shards
  std::string nvme_path;  // node-local directory for the per-rank swap files
  double block_mb = 4.0;  // MiB per swap transfer (rounded down to 4 KiB pages)
  int queue_depth = 8;    // swap transfers in flight
  bool pin_memory = true;  // cuda: page-locked host buffers
  double ratio = 1.0;      // cpu: fraction of the optimizer shard in host memory
};

struct OutputSection {
  std::string metrics;  // JSONL path; empty: none
  int log_every = 1;
};

// Periodic, signal-triggered and final checkpoints (docs/checkpoints.md).
struct CheckpointSection {
  std::string dir;       // where checkpoints go; empty: no checkpoints
  int every = 0;         // steps between checkpoints; 0: none by step count
  double minutes = 0.0;  // wall-clock minutes between checkpoints; 0: none by time
  int keep = 2;          // complete checkpoints kept (older ones are deleted); 0: keep all
  bool async = false;    // write in the background while training goes on
  double staging_mb = 512;  // async: unread state the optimizer step may copy instead of waiting
};

struct SystemSection {
  int threads = 0;            // OpenMP/BLAS threads per rank; 0: cores / ranks on the node
  double peak_tflops = 0.0;   // per-rank peak for MFU; 0: MFU not reported
  double comm_timeout_s = 600.0;
  Device device = Device::cpu;
  CommBackend comm = CommBackend::automatic;  // auto: nccl on cuda, mpi on cpu
  bool allow_tf32 = false;     // cuda: TF32 tensor cores for fp32 GEMMs
};

}  // namespace trident
