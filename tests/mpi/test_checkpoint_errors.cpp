// What the sharded checkpoint path refuses (run with 4 ranks): a flipped
// byte, a truncated file, an unfinished one, a missing file, a shape that
// does not match, slices that do not cover a tensor exactly once, and a write
// that fails on one rank only: every rank gets the same error, none hangs.
#include <cstdlib>

#include "sharded_io_fixture.hpp"

using namespace trident;
using namespace trident::testing;

TEST_F(ShardedIo, ChecksumsCatchAFlippedByteTruncationAndIncompleteFiles) {
  const std::string good = file("good"), bad = file("flipped"), cut = file("truncated");
  write_under(kLayouts[1], good);
  if (world.rank() == 0) {
    std::filesystem::copy_file(good, bad, std::filesystem::copy_options::overwrite_existing);
    hid_t f = H5Fopen(good.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "/params/b", H5P_DEFAULT);
    const haddr_t at = H5Dget_offset(d);
    H5Dclose(d), H5Fclose(f);
    std::fstream io(bad, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(std::streamoff(at + 13));
    char c = 0;
    io.read(&c, 1);
    c ^= 0x10;
    io.seekp(std::streamoff(at + 13));
    io.write(&c, 1);
    io.close();
    std::filesystem::copy_file(good, cut, std::filesystem::copy_options::overwrite_existing);
    std::filesystem::resize_file(cut, std::filesystem::file_size(cut) / 2);
  }
  world.barrier();
  int code = 0;
  std::string msg = agreed_message(
      [&] {
        CheckpointReader reader(world, bad);
        for (const Global& t : kTensors) {
          Part p = part_of(t, kLayouts[2], world.rank());
          reader.read(spec_of(t), p.slice());
        }
        reader.verify();
      },
      &code);
  EXPECT_EQ(code, kExitBadInput);
  EXPECT_NE(msg.find(bad + ": dataset /params/b is corrupt"), std::string::npos) << msg;

  msg = agreed_message([&] { CheckpointReader reader(world, cut); }, &code);
  EXPECT_EQ(code, kExitBadInput);
  EXPECT_NE(msg.find(cut + ": not a readable checkpoint"), std::string::npos) << msg;

  // A writer that never finished leaves a file without the completion marker.
  const std::string partial = file("partial");
  {
    CheckpointWriter w(world, partial);
    w.write_meta(CheckpointMeta{});
  }
  msg = agreed_message([&] { CheckpointReader reader(world, partial); }, &code);
  EXPECT_EQ(code, kExitBadInput);
  EXPECT_NE(msg.find("the checkpoint is incomplete"), std::string::npos) << msg;

  msg = agreed_message([&] { CheckpointReader reader(world, file("nonexistent")); }, &code);
  EXPECT_EQ(code, kExitBadInput);
  EXPECT_NE(msg.find("no such checkpoint file"), std::string::npos) << msg;

  msg = agreed_message(
      [&] {
        CheckpointReader reader(world, good);
        Global wrong = kTensors[0];
        wrong.shape[0] += 1;
        Part p = part_of(wrong, kLayouts[0], world.rank());
        reader.read(spec_of(wrong), p.slice());
      },
      &code);
  EXPECT_EQ(code, kExitBadInput);
  EXPECT_NE(msg.find("dataset /params/a is f32 [10, 6] but the model needs f32 [11, 6]"),
            std::string::npos) << msg;
}

TEST_F(ShardedIo, SlicesThatDoNotCoverATensorExactlyOnceAreALayoutBug) {
  // Every rank counting its replica would write each element four times.
  int code = 0;
  const std::string msg = agreed_message(
      [&] {
        CheckpointWriter w(world, file("overlap"));
        Part p = part_of(kTensors[2], kLayouts[6], world.rank());
        fill(kTensors[2], p);
        p.counted = true;
        w.create({spec_of(kTensors[2])});
        w.write(0, p.slice());
        w.finish();
      },
      &code);
  EXPECT_EQ(code, kExitRuntime);
  EXPECT_NE(msg.find("the ranks wrote 52 of its 13 elements"), std::string::npos) << msg;
}

TEST_F(ShardedIo, AWriteThatFailsOnOneRankFailsTheCheckpointOnAll) {
  // Writes are not collective, so rank 2 fails alone, mid-file, while the
  // others write on; finish() must still give every rank the same error and
  // leave a file that no reader takes for a checkpoint.
  const std::string path = file("write_error");
  if (world.rank() == 2) setenv("TRIDENT_FAULT_INJECT", "ckpt:write_error@1", 1);
  int code = 0;
  const std::string msg = agreed_message([&] { write_under(kLayouts[4], path); }, &code);
  unsetenv("TRIDENT_FAULT_INJECT");
  EXPECT_EQ(code, kExitRuntime);
  EXPECT_NE(msg.find(path + ": dataset /params/b: injected write failure"), std::string::npos)
      << msg;
  const std::string refused = agreed_message([&] { CheckpointReader reader(world, path); }, &code);
  EXPECT_EQ(code, kExitBadInput);
  EXPECT_NE(refused.find("the checkpoint is incomplete"), std::string::npos) << refused;
}
