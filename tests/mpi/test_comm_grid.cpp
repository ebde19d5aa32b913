// The collectives seam (MPI backend), the process grid and error agreement,
// on however many ranks mpirun starts (run with 4).
#include <gtest/gtest.h>
#include <mpi.h>
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "comm/agree.hpp"
#include "comm/mpi_communicator.hpp"
#include "comm/mpi_ops.hpp"
#include "comm/wait_board.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "grid/grid.hpp"
#include "optim/clip.hpp"
#include "support/test_support.hpp"

using namespace trident;
using trident::testing::world_size;


TEST(Collectives, EveryOperationComputesItsDefinition) {
  auto c = make_communicator(MPI_COMM_WORLD, "world");
  const int r = c->rank(), n = c->size();
  std::vector<float> v(5, float(r + 1));
  c->all_reduce(v.data(), v.size(), DType::f32, ReduceOp::sum);
  for (float x : v) EXPECT_EQ(x, n * (n + 1) / 2.0f);

  int mx = r;
  c->all_reduce(&mx, 1, DType::i32, ReduceOp::max);
  EXPECT_EQ(mx, n - 1);

  double red = r + 1.0;
  c->reduce(&red, 1, DType::f64, ReduceOp::sum, n - 1);
  if (r == n - 1) EXPECT_EQ(red, n * (n + 1) / 2.0);

  std::vector<float> send(3 * n), recv(3);
  for (int i = 0; i < 3 * n; ++i) send[i] = float(i * (r + 1));
  c->reduce_scatter(send.data(), recv.data(), 3, DType::f32, ReduceOp::sum);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(recv[i], float((3 * r + i) * n * (n + 1) / 2));

  std::vector<std::int32_t> mine = {r, 10 * r}, all(2 * n);
  c->all_gather(mine.data(), all.data(), 2, DType::i32);
  for (int i = 0; i < n; ++i) EXPECT_EQ(all[2 * i + 1], 10 * i);

  std::int64_t b = r == 0 ? 1234567890123 : 0;
  c->broadcast(&b, 1, DType::i64, 0);
  EXPECT_EQ(b, 1234567890123);

  // A ring of non-blocking send/recv.
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  float out = float(r), in = -1;
  Request rr = c->irecv(&in, 1, DType::f32, prev, 7);
  Request sr = c->isend(&out, 1, DType::f32, next, 7);
  c->wait(sr);
  c->wait(rr);
  EXPECT_EQ(in, float(prev));

  // Checksums are sums modulo 2^64: u64 all-reduces wrap.
  std::uint64_t wrap = ~std::uint64_t(0);
  c->all_reduce(&wrap, 1, DType::u64, ReduceOp::sum);
  EXPECT_EQ(wrap, std::uint64_t(0) - std::uint64_t(n));
}

// Reduce-scatter (ZeRO's gradients): each block summed in rank order, so
// its bits are those of the serial sum r = 0, 1, ..., n-1 whatever MPI's
// algorithms; in place; two in flight on one communicator, waited on in
// the opposite order; 16-bit sums rounded at each addition.
TEST(Collectives, ReduceScatterSumsInRankOrder) {
  auto c = make_communicator(MPI_COMM_WORLD, "world");
  const int r = c->rank(), n = c->size();
  const std::size_t count = 1000;
  // Values whose float sum depends on the order: rank 0's small value is
  // lost in rank 1's 1e8 (ulp 8) in rank order, and rank 3's in rank 2's
  // -1e8 when ranks 2 and 3 are added first, as a tree adds them.
  auto value = [](int rank, std::size_t i) {
    return rank == 1 ? 1e8f : rank == 2 ? -1e8f : float(1 + i % 7);
  };
  std::vector<float> a(count * n), b(count * n);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = value(r, i), b[i] = -value(r, i);
  std::vector<float> out_a(count);
  Request ra = c->ireduce_scatter(a.data(), out_a.data(), count, DType::f32, ReduceOp::sum);
  Request rb = c->ireduce_scatter(b.data(), b.data() + r * count, count, DType::f32,
                                  ReduceOp::sum);  // in place
  c->wait(rb);
  c->wait(ra);
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t at = std::size_t(r) * count + i;
    float serial = 0;
    for (int k = 0; k < n; ++k) serial += value(k, at);
    ASSERT_EQ(out_a[i], serial) << "element " << i;
    ASSERT_EQ(b[at], -serial) << "in place, element " << i;
  }
  std::vector<std::uint16_t> h(std::size_t(n) * 2), hout(2);
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = f32_to_bf16(1.0f + r / 128.0f);
  c->reduce_scatter(h.data(), hout.data(), 2, DType::bf16, ReduceOp::sum);
  std::uint16_t serial16 = f32_to_bf16(1.0f);
  for (int k = 1; k < n; ++k)
    serial16 = f32_to_bf16(bf16_to_f32(serial16) + bf16_to_f32(f32_to_bf16(1.0f + k / 128.0f)));
  EXPECT_EQ(hout[0], serial16);
  EXPECT_EQ(hout[1], serial16);
  // A caller's message at the highest tag it may use, in flight across a
  // reduce-scatter of the same size, stays apart from the exchange.
  if (n >= 2) {
    const int next = (r + 1) % n, prev = (r + n - 1) % n, tag = c->max_tag();
    std::vector<float> mine(count, float(1000 + r)), theirs(count, -1.0f);
    Request s = c->isend(mine.data(), count, DType::f32, next, tag);
    c->reduce_scatter(a.data(), out_a.data(), count, DType::f32, ReduceOp::sum);
    Request q = c->irecv(theirs.data(), count, DType::f32, prev, tag);
    c->wait(s);
    c->wait(q);
    EXPECT_EQ(theirs[0], float(1000 + prev));
    EXPECT_EQ(theirs[count - 1], float(1000 + prev));
    EXPECT_EQ(tag, mpi_ops::max_tag(MPI_COMM_WORLD));
  }
}

TEST(Collectives, SixteenBitSumsRoundEachAdditionToNearestEven) {
  // bf16/fp16 gradients (precision.reduce_dtype) are summed in 16 bits: each
  // addition in f32, rounded to nearest even. Rank r contributes 1 + r/128
  // (exact in both types); the sum n + n(n-1)/256 needs more bits than bf16
  // keeps at n = 4, so the result is within two units of the last place.
  auto c = make_communicator(MPI_COMM_WORLD, "world");
  const int r = c->rank(), n = c->size();
  for (DType t : {DType::bf16, DType::f16}) {
    auto to16 = [t](float x) { return t == DType::bf16 ? f32_to_bf16(x) : f32_to_f16(x); };
    auto to32 = [t](std::uint16_t h) { return t == DType::bf16 ? bf16_to_f32(h) : f16_to_f32(h); };
    std::vector<std::uint16_t> v(3, to16(1.0f + r / 128.0f));
    v[2] = to16(r == 0 ? 65504.0f : 0.0f);  // fp16's largest: stays finite
    c->all_reduce(v.data(), v.size(), t, ReduceOp::sum);
    const float exact = n + n * (n - 1) / 256.0f;
    EXPECT_NEAR(to32(v[0]), exact, exact * (t == DType::bf16 ? 1.0f / 64 : 1.0f / 512));
    EXPECT_EQ(v[0], v[1]);
    EXPECT_EQ(to32(v[2]), to32(to16(65504.0f)));
    // Every rank holds the same bits (replicas stay identical).
    std::vector<std::uint16_t> all(std::size_t(n) * 3);
    c->all_gather(v.data(), all.data(), 3, DType::u16);
    for (int i = 0; i < n; ++i)
      EXPECT_EQ(std::memcmp(all.data() + 3 * i, v.data(), 6), 0) << dtype_name(t) << " rank " << i;
    // fp16 overflow: two ranks' 65504 sum to inf, as on a GPU.
    if (t == DType::f16 && n >= 2) {
      std::uint16_t big = to16(r < 2 ? 65504.0f : 0.0f);
      c->all_reduce(&big, 1, t, ReduceOp::sum);
      EXPECT_TRUE(std::isinf(to32(big)));
    }
  }
}

TEST(Collectives, CountCallsBytesAndSequence) {
  auto c = make_communicator(MPI_COMM_WORLD, "world");
  std::vector<float> v(100, 1.0f);
  c->all_reduce(v.data(), 100, DType::f32, ReduceOp::sum);
  c->all_reduce(v.data(), 50, DType::f32, ReduceOp::sum);
  c->broadcast(v.data(), 10, DType::f32, 0);
  EXPECT_EQ(c->stats().calls_of(CommOp::all_reduce), 2u);
  EXPECT_EQ(c->stats().bytes_of(CommOp::all_reduce), 600u);
  EXPECT_EQ(c->stats().calls_of(CommOp::broadcast), 1u);
  EXPECT_EQ(c->sequence(), 3u);
}

// Bus bytes (what a rank sends, nccl-tests' convention): a reduce-scatter
// and an all-gather of a buffer send what one all-reduce of it sends, which
// is why sequence parallelism moves no more than plain tensor parallelism
// although its payload counts twice; receives count at their sender.
TEST(Collectives, BusBytesCountWhatEachRankSends) {
  auto c = make_communicator(MPI_COMM_WORLD, "world");
  const int n = c->size();
  const std::size_t block = 64;
  std::vector<float> whole(block * n, 1.0f), mine(block);
  c->all_reduce(whole.data(), whole.size(), DType::f32, ReduceOp::sum);
  const double all_reduce = c->stats().total_bus();
  EXPECT_DOUBLE_EQ(all_reduce, 2.0 * (n - 1) / n * double(whole.size() * sizeof(float)));
  c->reduce_scatter(whole.data(), mine.data(), block, DType::f32, ReduceOp::sum);
  c->all_gather(mine.data(), whole.data(), block, DType::f32);
  EXPECT_DOUBLE_EQ(c->stats().total_bus() - all_reduce, all_reduce);
  EXPECT_EQ(c->stats().total_bytes(), 3 * whole.size() * sizeof(float));  // payload
  if (n < 2) return;
  float x = 0;
  if (c->rank() == 0) c->send(&x, 1, DType::f32, 1, 5);
  if (c->rank() == 1) c->recv(&x, 1, DType::f32, 0, 5);
  EXPECT_DOUBLE_EQ(c->stats().bus_of(CommOp::send), c->rank() == 0 ? sizeof(float) : 0.0);
  EXPECT_EQ(c->stats().bus_of(CommOp::recv), 0.0);
}

TEST(Collectives, WaitTimesOutNamingGroupOperationAndSequence) {
  if (world_size() < 2) GTEST_SKIP() << "needs two ranks";
  auto c = make_communicator(MPI_COMM_WORLD, "world");
  float x = 0;
  if (c->rank() == 0) {
    c->set_timeout_seconds(0.2);
    Request r = c->irecv(&x, 1, DType::f32, 1, 99);  // nobody sends yet
    try {
      c->wait(r);
      ADD_FAILURE() << "wait returned without a sender";
    } catch (const RuntimeFailure& e) {
      EXPECT_NE(std::string(e.what()).find("world recv #1"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("timed out"), std::string::npos);
    }
    c->set_timeout_seconds(60);
    MPI_Barrier(MPI_COMM_WORLD);
    c->wait(r);  // now the message comes and the same request completes
    EXPECT_EQ(x, 42.0f);
  } else {
    MPI_Barrier(MPI_COMM_WORLD);
    if (c->rank() == 1) {
      x = 42.0f;
      c->send(&x, 1, DType::f32, 0, 99);
    }
  }
}

TEST(Collectives, ATimeoutNamesTheRanksElsewhere) {
  // Rank 0 waits for rank 1, which computes until told to stop; ranks 2.. wait
  // in a barrier of their own that rank 1 joins late. Rank 0's timeout names them.
  if (world_size() < 3) GTEST_SKIP() << "needs three ranks";
  MpiWaitBoard board(MPI_COMM_WORLD);
  auto c = make_communicator(MPI_COMM_WORLD, "world");
  c->set_wait_observer(&board);
  MPI_Comm side_comm;
  MPI_Comm_split(MPI_COMM_WORLD, c->rank() == 0 ? MPI_UNDEFINED : 1, c->rank(), &side_comm);
  std::unique_ptr<Communicator> side;
  if (side_comm != MPI_COMM_NULL) side = make_communicator(side_comm, "side"), side->set_wait_observer(&board);
  float x = 0;
  const int go_tag = 8;
  if (c->rank() == 0) {
    c->set_timeout_seconds(0.5);
    Request r = c->irecv(&x, 1, DType::f32, 1, 7);
    // Ranks 2.. publish once their barrier has spun a while, which a loaded
    // machine may delay past one timeout: time out again until they show.
    auto names_side = [&](const std::string& msg) {
      for (int r2 = 2; r2 < c->size(); ++r2)
        if (msg.find(fmt::format("rank {}: side barrier #1", r2)) == msg.npos) return false;
      return true;
    };
    std::string msg;
    for (int attempt = 0; attempt < 20 && !names_side(msg); ++attempt) {
      try {
        c->wait(r);
        ADD_FAILURE() << "wait returned without a sender";
        break;
      } catch (const RuntimeFailure& e) {
        msg = e.what();
      }
    }
    EXPECT_NE(msg.find("world recv #1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 1: not in a collective"), std::string::npos) << msg;
    EXPECT_TRUE(names_side(msg)) << msg;
    const int go = 1;  // a plain MPI send: the board never sees it
    MPI_Send(&go, 1, MPI_INT, 1, go_tag, MPI_COMM_WORLD);
    c->set_timeout_seconds(60);
    c->wait(r);
    EXPECT_EQ(x, 7.0f);
  } else if (c->rank() == 1) {
    int go = 0;  // "computing" (outside every collective) until rank 0 has its report
    MPI_Recv(&go, 1, MPI_INT, 0, go_tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    x = 7.0f;
    c->send(&x, 1, DType::f32, 0, 7);
    side->barrier();
  } else {
    side->barrier();
  }
  side.reset();
  if (side_comm != MPI_COMM_NULL) MPI_Comm_free(&side_comm);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(Grid, MappingIsTensorFastestThenDataThenPipeline) {
  GridShape s{2, 3, 4};
  EXPECT_EQ(grid_rank_of(s, {1, 2, 3}), 1 + 2 * (2 + 3 * 3));
  for (int r = 0; r < s.size(); ++r) EXPECT_EQ(grid_rank_of(s, grid_coord_of(s, r)), r);
}

TEST(Grid, ContextSitsBetweenTensorAndData) {
  const GridShape s{2, 3, 2, 4};  // tp 2, dp 3, pp 2, cp 4
  EXPECT_EQ(s.size(), 48);
  EXPECT_EQ(grid_rank_of(s, {1, 2, 1, 3}), 1 + 2 * (3 + 4 * (2 + 3 * 1)));
  for (int r = 0; r < s.size(); ++r) EXPECT_EQ(grid_rank_of(s, grid_coord_of(s, r)), r);
  const GridCoord c = grid_coord_of(s, 2);  // the next rank after a tensor group: context 1
  EXPECT_EQ(c.tp, 0);
  EXPECT_EQ(c.cp, 1);
  EXPECT_EQ(c.dp, 0);
  EXPECT_EQ(c.replica(s), 1);
  EXPECT_EQ(grid_coord_of(s, 8).dp, 1);  // after tp * cp ranks, the next replica of the data
}

TEST(Grid, GroupsHoldTheRanksTheirAxisVaries) {
  const int n = world_size();
  std::vector<GridShape> shapes = {{1, n, 1}};
  if (n == 4)
    shapes = {{1, 4, 1},    {2, 2, 1},    {2, 1, 2},    {1, 2, 2},    {4, 1, 1},
              {1, 1, 4},    {1, 1, 1, 4}, {2, 1, 1, 2}, {1, 2, 1, 2}, {1, 1, 2, 2}};
  for (const GridShape& s : shapes) {
    Grid g(MPI_COMM_WORLD, s);
    const GridCoord me = g.coord();
    auto members = [&](Communicator& c) {
      std::vector<int> all(c.size());
      int r = g.rank();
      c.all_gather(&r, all.data(), 1, DType::i32);
      return all;
    };
    auto expect_axis = [&](Communicator& c, int len, auto coord_at) {
      ASSERT_EQ(c.size(), len);
      auto m = members(c);
      for (int i = 0; i < len; ++i) EXPECT_EQ(m[i], grid_rank_of(s, coord_at(i))) << g.describe();
    };
    expect_axis(g.tensor(), s.tp, [&](int i) { return GridCoord{i, me.dp, me.pp, me.cp}; });
    expect_axis(g.context(), s.cp, [&](int i) { return GridCoord{me.tp, me.dp, me.pp, i}; });
    expect_axis(g.data(), s.dp, [&](int i) { return GridCoord{me.tp, i, me.pp, me.cp}; });
    expect_axis(g.pipeline(), s.pp, [&](int i) { return GridCoord{me.tp, me.dp, i, me.cp}; });
    expect_axis(g.model(), s.tp * s.pp,
                [&](int i) { return GridCoord{i % s.tp, me.dp, i / s.tp, me.cp}; });
    // Gradients' group: every (data, context) replica, context fastest; at
    // cp 1 exactly the data group.
    expect_axis(g.data_context(), s.dp * s.cp,
                [&](int i) { return GridCoord{me.tp, i / s.cp, me.pp, i % s.cp}; });
    EXPECT_EQ(g.data_context().rank(), me.replica(s));
    if (s.cp == 1) EXPECT_EQ(members(g.data_context()), members(g.data()));
    EXPECT_EQ(g.world().size(), n);
  }
  Grid g(MPI_COMM_WORLD, {1, n, 1});
  EXPECT_EQ(g.describe(), fmt::format("TP(1)-PP(1)-DP({})-Rank({})", n, g.rank()));
  EXPECT_EQ(g.local_size(), n);  // one node
  if (n % 2 == 0) {
    Grid c(MPI_COMM_WORLD, GridShape{1, n / 2, 1, 2});
    EXPECT_EQ(c.describe(), fmt::format("TP(1)-CP(2)-PP(1)-DP({})-Rank({})", n / 2, c.rank()));
  }
}

TEST(GradNorm, SumsEveryRanksCountedSquaresOverTheGroups) {
  // Each rank counts rank + 1; over the tensor then the data group (4 ranks:
  // 2 x 2), or the world, every rank gets the norm of the whole.
  const int n = world_size();
  Grid g(MPI_COMM_WORLD, n == 4 ? GridShape{2, 2, 1} : GridShape{1, n, 1});
  const double expected = std::sqrt(n * (n + 1) / 2.0);
  const GradNorm split = reduce_grad_norm(double(g.rank() + 1), false, {&g.tensor(), &g.data()});
  EXPECT_DOUBLE_EQ(split.norm, expected);
  EXPECT_TRUE(split.finite);
  // One rank's overflow, in a gradient it does not even count, reaches every rank.
  const GradNorm world = reduce_grad_norm(double(g.rank() + 1), g.rank() == n - 1, {&g.world()});
  EXPECT_DOUBLE_EQ(world.norm, expected);
  EXPECT_FALSE(world.finite);
}

TEST(Grid, WrongSizeIsAnInputError) {
  const int n = world_size();
  EXPECT_THROW(Grid(MPI_COMM_WORLD, GridShape{1, n + 1, 1}), InputError);
}

TEST(Agreement, AnErrorOnOneRankReachesEveryRank) {
  auto c = make_communicator(MPI_COMM_WORLD, "world");
  const int culprit = c->size() - 1;
  try {
    run_agreed(*c, [&] {
      if (c->rank() == culprit) throw InputError("data.train: only rank " + std::to_string(culprit));
    });
    ADD_FAILURE() << "no error";
  } catch (const AgreedError& e) {
    EXPECT_EQ(e.exit_code, kExitBadInput);
    EXPECT_EQ(std::string(e.what()), "data.train: only rank " + std::to_string(culprit));
  }
  EXPECT_NO_THROW(run_agreed(*c, [] {}));
}

TEST(Agreement, AWarningOnSomeRanksReachesEveryRank) {
  auto c = make_communicator(MPI_COMM_WORLD, "world");
  EXPECT_EQ(agreed_warning(*c, ""), "");
  // Every rank from 1 on has one (the lowest speaks): rank 0 alone would
  // print it, so it must learn the others'.
  const std::string mine = c->rank() >= 1 ? "scratch of rank " + std::to_string(c->rank()) : "";
  const std::string agreed = agreed_warning(*c, mine);
  if (c->size() == 1) {
    EXPECT_EQ(agreed, "");
    return;
  }
  EXPECT_EQ(agreed, "scratch of rank 1 (" + std::to_string(c->size() - 1) + " of " +
                        std::to_string(c->size()) + " ranks, the first rank 1)");
}
