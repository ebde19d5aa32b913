// Where B keeps W's inputs (GptModel::weight_input_layout): in the slot only
// over what B has read for the last time, never over what W reads or over
// another kept input; in fp32 without recompute everything fits there.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "model/gpt.hpp"

using namespace trident;

namespace {

using Interval = std::pair<std::size_t, std::size_t>;  // [begin, end) in elements

bool overlap(const Interval& a, const Interval& b) { return a.first < b.second && b.first < a.second; }

// The saved tensors of one slot that W reads (the linears' inputs, the
// head's logits gradient).
std::vector<Interval> read_by_w(const TensorTable& saved, const GptConfig& c, const StageSpec& st) {
  std::vector<std::string> names = {"lnf", "lnf_full", "logits"};
  for (int l = st.first_block; l < st.first_block + st.blocks(c.layers); ++l)
    for (const char* n : {"ln1", "ln1_full", "atty", "ln2", "ln2_full", "fch_gelu"})
      names.push_back(fmt::format("h.{}.{}", l, n));
  std::vector<Interval> v;
  for (const auto& n : names)
    if (const TensorInfo* t = saved.find(n)) v.push_back({t->offset, t->offset + t->numel});
  return v;
}

}  // namespace

TEST(WeightInputs, KeptOnlyOverWhatBIsDoneWith) {
  const GptConfig c{8, 64, 4, 32, 257};
  const std::vector<StageSpec> stages = {
      {0, 3, true, false}, {3, 2, false, false}, {5, 3, false, true}};
  for (int tp : {1, 2})
    for (bool sp : {false, true})
      for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::full})
        for (Precision dtype : {Precision::fp32, Precision::bf16})
          for (const StageSpec& st : stages) {
            const TensorParallelLayout layout{tp, 0, sp};
            const ActivationPolicy policy =
                make_activation_policy(recompute, true, tp, layout.sp(), dtype);
            const std::string what =
                fmt::format("tp {} sp {} {} {} first block {}", tp, sp, choice_name(recompute),
                            choice_name(dtype), st.first_block);
            const TensorTable all = GptModel::weight_input_table(c, TokenLayout(2, c.seq_len), layout, st);
            const TensorTable saved = GptModel::saved_activation_table(c, TokenLayout(2, c.seq_len), layout, st, policy);
            const WeightInputLayout w = GptModel::weight_input_layout(c, TokenLayout(2, c.seq_len), layout, st, policy);
            std::vector<Interval> kept;
            std::size_t in_buffer = 0;
            for (const TensorInfo& t : all.tensors()) {
              const auto& at = w.places.at(t.name);
              if (!at.in_saved) {
                in_buffer += t.numel;
                EXPECT_LE(at.offset + t.numel, w.buffer.size()) << what << " " << t.name;
                continue;
              }
              const Interval mine{at.offset, at.offset + t.numel};
              EXPECT_LE(mine.second, saved.size()) << what << " " << t.name;
              for (const Interval& r : read_by_w(saved, c, st))
                EXPECT_FALSE(overlap(mine, r)) << what << " " << t.name;
              for (const Interval& k : kept)
                EXPECT_FALSE(overlap(mine, k)) << what << " " << t.name;
              kept.push_back(mine);
            }
            EXPECT_EQ(in_buffer + w.in_saved, all.numel()) << what;
            // fp32 without recompute: what B frees holds what it keeps (heads * T >= d_model).
            if (dtype == Precision::fp32 && recompute == Recompute::none && !layout.sp())
              EXPECT_EQ(w.buffer.size(), 0u) << what;
            if (recompute == Recompute::full) EXPECT_GT(w.buffer.size(), 0u) << what;
          }
}
