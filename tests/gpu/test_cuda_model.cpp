// The whole GPT on the GPU against the CPU: the loss and every gradient from
// the same weights and batches (two micro-batches accumulated), and 20
// training steps whose losses must track the CPU's.
#include <gtest/gtest.h>

#include <random>

#include "gpu/gpu_test_support.hpp"
#include "io/deck.hpp"
#include "model/gpt.hpp"
#include "plan/estimate.hpp"
#include "support/test_support.hpp"

using namespace trident;
using namespace trident::testing;

namespace {

std::vector<std::int32_t> tokens(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> t(n);
  for (auto& x : t) x = std::int32_t(rng() % 257);
  return t;
}

}  // namespace

TEST(CudaModel, LossAndGradientsMatchTheCpu) {
  const GptConfig c{2, 64, 4, 32, 257};  // vocab padded to 320: padding rows stay zero
  const int B = 2, BT = B * c.seq_len;
  auto cpu = make_cpu_backend(1);
  auto gpu = make_test_gpu();
  MemoryLedger lc, lg;
  GptModel mc(c, B, *cpu, lc), mg(c, B, *gpu, lg);
  MicroBatchStorage sc(mc, *cpu, lc), sg(mg, *gpu, lg);
  mc.init_parameters(7);
  mg.init_parameters(7);
  mc.grads().zero();
  mg.grads().zero();
  const float dloss = 1.0f / float(2 * BT);
  for (int micro = 0; micro < 2; ++micro) {
    const auto tok = tokens(BT, 10 + micro), tgt = tokens(BT, 20 + micro);
    const double loss_c = mc.forward(sc.acts(), tok.data(), tgt.data(), dloss);
    const double loss_g = mg.forward(sg.acts(), tok.data(), tgt.data(), dloss);
    EXPECT_NEAR(loss_g, loss_c, 1e-5 * std::abs(loss_c)) << "micro-batch " << micro;
    mc.backward(sc.acts(), nullptr, micro == 1);
    mg.backward(sg.acts(), nullptr, micro == 1);
  }
  const Arena& gc = mc.grads();
  std::vector<float> cpu_grads(gc.f32(), gc.f32() + gc.numel()), gpu_grads(gc.numel());
  gpu->copy_to_host(gpu_grads.data(), mg.grads().data(), mg.grads().bytes());
  EXPECT_TRUE(matches_cpu(gpu_grads, cpu_grads, 1e-5)) << "the whole gradient arena";
  for (const TensorInfo& t : mc.param_table().tensors()) {
    const std::vector<float> a(gpu_grads.begin() + t.offset, gpu_grads.begin() + t.offset + t.numel);
    const std::vector<float> b(cpu_grads.begin() + t.offset, cpu_grads.begin() + t.offset + t.numel);
    EXPECT_TRUE(matches_cpu(a, b, 1e-4)) << t.name;
  }
  // Evaluation (no gradient) gives the same loss again.
  const auto tok = tokens(BT, 30), tgt = tokens(BT, 31);
  const double eval_c = mc.forward(sc.acts(), tok.data(), tgt.data(), 0.0f);
  EXPECT_NEAR(mg.forward(sg.acts(), tok.data(), tgt.data(), 0.0f), eval_c, 1e-5 * std::abs(eval_c));
}

// Batch 4 in micro-batches of 2 (accumulation), AdamW, clipping, cosine LR.
// The limit is 1e-4 per step: fp32 summation orders differ between cuBLAS and
// oneDNN, and 20 Adam steps amplify that; a wrong kernel is off by far more.
TEST(CudaModel, TwentyStepsTrackTheCpuLosses) {
  auto cpu = make_cpu_backend(1);
  auto gpu = make_test_gpu();
  const std::vector<std::string> sets = {"train.batch=4", "train.micro_batch=2"};
  const auto want = train_losses(MPI_COMM_SELF, sets, *cpu, "mpi", 20);
  const auto got = train_losses(MPI_COMM_SELF, sets, *gpu, "staged", 20);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t s = 0; s < want.size(); ++s)
    EXPECT_NEAR(got[s], want[s], 1e-4 * std::abs(want[s])) << "step " << s;
  EXPECT_LT(got.back(), got.front() - 0.5) << "the model did not learn on the GPU";
}

// ZeRO-3 at one data rank still gathers and reduce-scatters through the
// storage seam: device buffers through the collectives.
TEST(CudaModel, ZeroStagesTrackTheCpuLosses) {
  auto cpu = make_cpu_backend(1);
  auto gpu = make_test_gpu();
  const auto want = train_losses(MPI_COMM_SELF, {"train.batch=4"}, *cpu, "mpi", 10);
  for (int stage : {1, 2, 3}) {
    const auto got = train_losses(MPI_COMM_SELF,
                                  {"train.batch=4", "zero.stage=" + std::to_string(stage),
                                   "zero.persistence_threshold=0"},
                                  *gpu, "staged", 10);
    for (std::size_t s = 0; s < want.size(); ++s)
      EXPECT_NEAR(got[s], want[s], 1e-4 * std::abs(want[s])) << "stage " << stage << " step " << s;
  }
}

// ZeRO-Offload on CUDA: the host's AdamW (and with offload.ratio the device's
// part beside it) gives the bits the device's update gives, the gradients
// leaving during backward on the copy stream and the weights coming back
// through the staging blocks; so each home trains the resident run's losses
// exactly. bf16 weights: the masters and their rounding on the host too.
TEST(CudaModel, OffloadedOptimizerTrainsBitForBitOnTheGpu) {
  auto gpu = make_test_gpu();
  const std::vector<std::string> base = {"train.batch=4", "train.micro_batch=2", "zero.stage=2",
                                         "zero.persistence_threshold=0", "precision.dtype=bf16"};
  const auto want = train_losses(MPI_COMM_SELF, base, *gpu, "staged", 8);
  const std::string swap = scratch_dir("gpu_offload_swap");
  for (const std::vector<std::string>& home :
       {std::vector<std::string>{"offload.optimizer=cpu"},
        std::vector<std::string>{"offload.optimizer=cpu", "offload.ratio=0.5"},
        std::vector<std::string>{"offload.optimizer=nvme", "offload.nvme_path=" + swap,
                                 "offload.block_mb=0.0078125"}}) {
    std::vector<std::string> sets = base;
    sets.insert(sets.end(), home.begin(), home.end());
    const auto got = train_losses(MPI_COMM_SELF, sets, *gpu, "staged", 8);
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t s = 0; s < want.size(); ++s)
      EXPECT_EQ(got[s], want[s]) << home.back() << " step " << s;
  }
}

// The device memory a bf16 run holds outside the arenas is what `trident
// estimate` prints beside them: the backend's bf16 copies of the head's
// operands, plus its op scratch (at least 1 MiB, a few KiB used here) and
// AdamW's chunk plan.
TEST(CudaModel, KernelScratchIsTheEstimatesOperandCopies) {
  auto gpu = make_test_gpu();  // a fresh backend: its copies only grow
  const std::vector<std::string> sets = {"model.d_model=128", "train.batch=4",
                                         "train.micro_batch=2", "precision.dtype=bf16"};
  train_losses(MPI_COMM_SELF, sets, *gpu, "staged", 2);
  const std::string dir = scratch_dir("gpu_scratch_estimate");
  make_text_shard(dir, "train.bin", 4000);
  std::vector<std::string> cuda = sets;
  cuda.push_back("system.device=cuda");
  Deck deck =
      parse_deck(tiny_deck(dir + "/train.bin", dir + "/train.bin", ""), "t.toml", cuda);
  const double copies = estimate_memory(deck, resolve_layout(deck, 1), 0).device_copies;
  const double held = double(gpu->kernel_scratch_peak());
  EXPECT_GT(copies, 0.0);
  EXPECT_GE(held, copies);
  // Op scratch: 1 MiB, and the optimizer's chunk plan (16 B per 8192 elements).
  EXPECT_LE(held, copies + 1024.0 * 1024 + 64.0 * 1024);
}
