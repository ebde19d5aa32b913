// The memory estimate lands within 10% of what the trainer allocates, for every
// deck in input/ (one rank; the decks' data replaced by a small shard).
#include <gtest/gtest.h>
#include <mpi.h>

#include <filesystem>

#include "io/deck.hpp"
#include "io/token_shard.hpp"
#include "plan/estimate.hpp"
#include "support/test_support.hpp"
#include "train/trainer.hpp"

using namespace trident;

TEST(Estimate, PeakWithinTenPercentOfMeasuredForEveryDeck) {
  const std::string dir = trident::testing::scratch_dir("estimate");
  const std::string shard = trident::testing::make_text_shard(dir, "train.bin", 5000);
  for (const auto& e : std::filesystem::directory_iterator(TRIDENT_INPUT_DIR)) {
    if (e.path().extension() != ".toml") continue;
    {
      SCOPED_TRACE(e.path().string());
      Deck d = load_deck(e.path().string(), {"data.train=\"" + shard + "\"", "data.val=[]",
                                             "parallel.dp=1"});
      const int stage = d.zero.stage;
      const GridShape shape = resolve_layout(d, 1);
      Grid grid(MPI_COMM_SELF, shape);
      auto be = make_cpu_backend(1);
      MemoryLedger ledger;
      TokenDataset data(d.data.train, d.model.seq_len, "data.train");
      Trainer tr(d, grid, *be, ledger, data, nullptr);
      const double predicted = estimate_memory(d, shape, stage).peak();
      const double measured = double(ledger.peak_total());
      EXPECT_LE(std::abs(predicted - measured), 0.10 * measured)
          << "predicted " << predicted << " measured " << measured;
      std::printf("%s stage %d: predicted %.0f B, measured %.0f B\n", e.path().filename().c_str(),
                  stage, predicted, measured);
    }
  }
}
