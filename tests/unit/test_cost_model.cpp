// The step model on a CPU host (this-cpu's cluster, built by hand here so the
// figures do not depend on a calibration): bf16 plans multiply at the bf16
// kernels' rate, fp16 ones in f32; element-wise passes and messages move f32
// activations in every precision, as Trident's CPU backend does, where a GPU
// cluster's move 16-bit ones; memory is the estimator's at the fullest
// pipeline rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "io/deck.hpp"
#include "plan/cost_model.hpp"
#include "plan/estimate.hpp"
#include "support/cpu_host.hpp"

using namespace trident;

namespace {

using trident::testing::cpu_host;

Prediction plan(const Cluster& c, int ranks, std::vector<std::string> sets) {
  Deck d = load_deck(std::string(TRIDENT_INPUT_DIR) + "/default.toml", sets);
  const GridShape shape = resolve_layout(d, ranks);
  return predict_step(d, shape, c, estimate_memory(d, shape, d.zero.stage), false);
}

double cost(const Prediction& p, const std::string& part) {
  for (const auto& [name, seconds] : p.costs)
    if (name == part) return seconds;
  ADD_FAILURE() << "no cost named " << part;
  return 0;
}

}  // namespace

TEST(CostModel, EachPrecisionMultipliesOnItsOwnKernels) {
  const Cluster host = cpu_host();
  const Prediction fp32 = plan(host, 1, {});
  const Prediction bf16 = plan(host, 1, {"precision.dtype=\"bf16\""});
  const Prediction fp16 = plan(host, 1, {"precision.dtype=\"fp16\""});
  // The default deck's GEMMs lie between the curves' points, where bf16's
  // fraction of its peak is 0.6-0.9 of fp32's.
  const double ratio = cost(fp32, "gemm") / cost(bf16, "gemm");
  EXPECT_GT(ratio, 0.6 * host.peak_tflops_16 / host.peak_tflops_32);
  EXPECT_LT(ratio, 0.9 * host.peak_tflops_16 / host.peak_tflops_32);
  Cluster same_curves = host;
  same_curves.gemm_efficiency_32 = same_curves.gemm_efficiency;
  EXPECT_NEAR(cost(plan(same_curves, 1, {}), "gemm") /
                  cost(plan(same_curves, 1, {"precision.dtype=\"bf16\""}), "gemm"),
              host.peak_tflops_16 / host.peak_tflops_32, 1e-9);
  EXPECT_DOUBLE_EQ(cost(fp16, "gemm"), cost(fp32, "gemm"));
}

TEST(CostModel, CpuPassesMoveF32ActivationsInEveryPrecision) {
  Cluster host = cpu_host();
  const std::vector<std::string> tp2 = {"parallel.tp=2"};
  std::vector<std::string> tp2_bf16 = tp2;
  tp2_bf16.push_back("precision.dtype=\"bf16\"");
  EXPECT_DOUBLE_EQ(cost(plan(host, 2, tp2_bf16), "memory-bound"),
                   cost(plan(host, 2, tp2), "memory-bound"));
  EXPECT_DOUBLE_EQ(cost(plan(host, 2, tp2_bf16), "tp-comm"), cost(plan(host, 2, tp2), "tp-comm"));
  host.f32_activations = false;  // a device that keeps 16-bit activations
  EXPECT_LT(cost(plan(host, 2, tp2_bf16), "memory-bound"),
            0.75 * cost(plan(host, 2, tp2), "memory-bound"));
  EXPECT_LT(cost(plan(host, 2, tp2_bf16), "tp-comm"), 0.75 * cost(plan(host, 2, tp2), "tp-comm"));
}

TEST(CostModel, CpuMemoryIsTheEstimateOfTheFullestPipelineRank) {
  for (const char* schedule : {"1f1b", "pipedream"}) {
    const std::vector<std::string> sets = {"parallel.pp=2",
                                           std::string("parallel.schedule=\"") + schedule + "\""};
    Deck d = load_deck(std::string(TRIDENT_INPUT_DIR) + "/default.toml", sets);
    const GridShape shape = resolve_layout(d, 2);
    const double first = estimate_memory(d, shape, 0, 0).peak();
    const double last = estimate_memory(d, shape, 0, 1).peak();
    EXPECT_NE(first, last) << schedule;
    EXPECT_EQ(plan(cpu_host(), 2, sets).memory_bytes, std::max(first, last)) << schedule;
  }
}
