// The planner's collectives on a GPU cluster: ZeRO-3's gathers and reduce-
// scatters against one micro-batch of compute, the NICs a data group drives
// across nodes, ring and tree latency, and the block shapes of the Llama
// family (GQA's narrower K and V, SwiGLU's third matrix).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.hpp"
#include "plan/planner.hpp"

using namespace trident;

namespace {

// A GPT with 4096-wide layers and 2048-token sequences, `extra` appended to [model].
std::string deck_text(int batch, const std::string& extra = "") {
  return "[model]\nlayers = 16\nd_model = 4096\nheads = 32\nseq_len = 2048\nvocab = 51200\n" +
         extra + "[data]\ntrain = \"unused.bin\"\n[train]\nbatch = " + std::to_string(batch) +
         "\n[precision]\ndtype = \"bf16\"\n";
}

Prediction plan(const Cluster& c, const std::string& text, int gpus, const std::string& layout) {
  PlanRequest r;
  r.deck_path = "comm.toml";
  r.deck_text = text;
  r.gpus = gpus;
  return plan_layout(r, layout_overrides(layout), c);
}

double cost(const Prediction& p, const std::string& part) {
  for (const auto& [name, seconds] : p.costs)
    if (name == part) return seconds;
  ADD_FAILURE() << "no cost named " << part;
  return 0;
}

std::string zero3(int dp, int mb) {
  return "tp=1,pp=1,dp=" + std::to_string(dp) + ",v=1,mb=" + std::to_string(mb) +
         ",zero=3,sp=0,recompute=full";
}

}  // namespace

// Fixed global batch, twice the GPUs, half the micro-batch: the gathers of
// the whole model stay the same per micro-batch while the compute behind
// them halves, so each GPU's throughput falls once they no longer hide.
TEST(PlanComm, ZeroThreeAtScaleIsBoundByItsGathers) {
  Cluster c = find_cluster("dgx-a100-80gb");
  c.nics_per_group = 1;
  const std::string text = deck_text(256);
  const Prediction small = plan(c, text, 64, zero3(64, 4));
  const Prediction large = plan(c, text, 256, zero3(256, 1));
  EXPECT_LT(large.model_tflops, 0.7 * small.model_tflops);
  EXPECT_EQ(large.largest_cost(), "dp-comm");
  EXPECT_NE(large.reason().find("dp-comm"), std::string::npos);
  // With the node's eight NICs the same gathers hide behind more of the compute.
  c.nics_per_group = 8;
  EXPECT_LT(cost(plan(c, text, 256, zero3(256, 1)), "dp-comm"), 0.5 * cost(large, "dp-comm"));
}

// A data group whose members sit one a node (tp = 8) drives one NIC however
// many the cluster lets a group share; one with eight members a node drives
// up to nics_per_group of them.
TEST(PlanComm, AGroupSharesItsNodesNics) {
  Cluster one = find_cluster("dgx-h100"), eight = one;
  one.nics_per_group = 1;
  eight.nics_per_group = 8;
  const std::string text = deck_text(64);
  const std::string strided = "tp=8,pp=1,dp=8,v=1,mb=1,zero=1,sp=1,recompute=selective";
  EXPECT_DOUBLE_EQ(cost(plan(one, text, 64, strided), "dp-comm"),
                   cost(plan(eight, text, 64, strided), "dp-comm"));
  const std::string flat = "tp=1,pp=1,dp=64,v=1,mb=1,zero=1,sp=0,recompute=full";
  EXPECT_GT(cost(plan(one, text, 64, flat), "dp-comm"),
            4 * cost(plan(eight, text, 64, flat), "dp-comm"));
}

// Reduce-scatter and all-gather chain n - 1 steps; all-reduce across nodes
// runs on trees, 2 log2(n).
TEST(PlanComm, RingStepsGrowWithTheRanksTreeStepsWithTheirLog) {
  const Cluster c = find_cluster("dgx-h100");
  const std::string text = deck_text(512);
  const double ring_64 = cost(plan(c, text, 64, zero3(64, 1)), "dp-latency");
  const double ring_256 = cost(plan(c, text, 256, zero3(256, 1)), "dp-latency");
  // Per step: 8 micro-batches at 64 ranks, 2 at 256.
  EXPECT_NEAR(ring_256 / 2, ring_64 / 8 * 255.0 / 63.0, 1e-9);
  auto ddp = [](int dp) {
    return "tp=1,pp=1,dp=" + std::to_string(dp) + ",v=1,mb=1,zero=0,sp=0,recompute=full";
  };
  const double tree_64 = cost(plan(c, text, 64, ddp(64)), "dp-latency");
  const double tree_256 = cost(plan(c, text, 256, ddp(256)), "dp-latency");
  EXPECT_NEAR(tree_256 / tree_64, 8.0 / 6.0, 1e-9);
}

// GQA's K and V narrower than Q, and SwiGLU's three matrices of its own width,
// change the linears' time as they change the parameter count.
TEST(PlanComm, LlamaBlocksTimeTheirOwnLinears) {
  const Cluster c = find_cluster("dgx-h100");
  const std::string layout = "tp=1,pp=1,dp=8,v=1,mb=1,zero=1,sp=0,recompute=selective";
  const double mha = cost(plan(c, deck_text(8), 8, layout), "gemm");
  const double gqa = cost(plan(c, deck_text(8, "kv_heads = 4\n"), 8, layout), "gemm");
  EXPECT_LT(gqa, mha);
  // K and V shrink from 2h to h/4 of the 12h per token's GEMMs (scores aside).
  EXPECT_GT(gqa, mha * (12.0 - 2.0) / 12.0 * 0.9);
  const double swiglu =
      cost(plan(c, deck_text(8, "mlp = \"swiglu\"\nffn_hidden = 16384\n"), 8, layout), "gemm");
  EXPECT_GT(swiglu, mha * 1.2);  // a third 4h-wide matrix
}

// A site states its own collectives; without them a group drives all its NICs.
TEST(PlanComm, SiteTomlSetsItsCollectives) {
  const std::string site =
      "gpus_per_node = 4\npeak_tflops_bf16 = 312\nhbm_gib = 80\nhbm_gbps = 2039\n"
      "intra_node_gbps = 100\ninter_node_gbps = 25\n";
  const Cluster plain = parse_cluster_toml(site, "site.toml");
  EXPECT_EQ(plain.nics_per_group, 4);
  const Cluster own = parse_cluster_toml(
      site + "nics_per_group = 2\ncollective_step_us = 12\ncomm_overlap = 0.25\n", "site.toml");
  EXPECT_EQ(own.nics_per_group, 2);
  EXPECT_DOUBLE_EQ(own.collective_step_us, 12);
  EXPECT_DOUBLE_EQ(own.comm_overlap, 0.25);
  EXPECT_THROW(parse_cluster_toml(site + "comm_overlap = 1.5\n", "site.toml"), InputError);
}
