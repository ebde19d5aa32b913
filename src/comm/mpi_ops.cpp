#include "comm/mpi_ops.hpp"

#include <fmt/format.h>

#include <climits>
#include <cstring>
#include <vector>

#include "comm/block_reduce.hpp"
#include "core/error.hpp"

namespace trident::mpi_ops {
namespace {

MPI_Datatype to_mpi(DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u8: return MPI_UINT8_T;
    case DType::u16: case DType::bf16: case DType::f16: return MPI_UINT16_T;
    case DType::u64: return MPI_UINT64_T;  // sums wrap modulo 2^64 (checksums)
  }
  return MPI_BYTE;
}

// MPI has no 16-bit float types: their sums are user operations that add in
// f32 and round the result to nearest even (what a 16-bit reduction on a GPU
// does per step of its tree or ring). Commutative, so MPI may pick any order.
template <DType T>
void sum_16bit(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_into(inout, in, std::size_t(*len), T, ReduceOp::sum);
}

MPI_Op sum_op_16bit(DType t) {
  static MPI_Op bf16 = MPI_OP_NULL, f16 = MPI_OP_NULL;  // made once, after MPI_Init
  MPI_Op& op = t == DType::bf16 ? bf16 : f16;
  if (op == MPI_OP_NULL)
    MPI_Op_create(t == DType::bf16 ? &sum_16bit<DType::bf16> : &sum_16bit<DType::f16>, 1, &op);
  return op;
}

MPI_Op to_mpi(ReduceOp op, DType t) {
  if (t == DType::bf16 || t == DType::f16) {
    if (op != ReduceOp::sum)
      throw RuntimeFailure("MPI backend: 16-bit float reductions support only sums");
    return sum_op_16bit(t);
  }
  switch (op) {
    case ReduceOp::sum: return MPI_SUM;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  return MPI_SUM;
}

void check(int rc, const std::string& what) {
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    throw RuntimeFailure(fmt::format("{} failed: {}", what, std::string(msg, len)));
  }
}

// Element-wise operations larger than an int count are issued in chunks.
constexpr std::size_t kChunk = std::size_t{1} << 30;

class MpiPending final : public PendingOp {
 public:
  std::vector<MPI_Request> reqs;
  bool test() override {
    int done = 0;
    check(MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE),
          what);
    return done != 0;
  }
};

// Reduce-scatter as one exchange: each rank sends every other rank its
// block of `send` and sums the blocks it receives in rank order. Each rank
// sends and receives (n-1)/n of the buffer once, as a ring does, in one round
// whose messages MPI moves while the caller computes; the fixed order makes
// the bits the same whatever MPI's collective algorithms. (Open MPI 4.1's
// non-blocking reduce-scatter reduces everything on one root, which then
// carries about log2(n) times the buffer and holds full-size temporaries.)
class ExchangePending final : public PendingOp {
 public:
  std::vector<MPI_Request> reqs;
  std::unique_ptr<char[]> blocks;  // the other ranks' blocks of this rank's slice, in rank order
  std::vector<char> own;     // this rank's block of send, when recv overwrites it
  const char* send = nullptr;
  char* recv = nullptr;
  std::size_t bytes = 0;  // of one block
  DType t = DType::f32;
  ReduceOp op = ReduceOp::sum;
  int rank = 0, size = 1;
  bool reduced = false;

  char* block(int r) { return blocks.get() + std::size_t(r < rank ? r : r - 1) * bytes; }
  const char* contribution(int r) {
    if (r != rank) return block(r);
    return own.empty() ? send + std::size_t(rank) * bytes : own.data();
  }
  bool test() override {
    if (reduced) return true;
    int done = 0;
    check(MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE),
          what);
    if (!done) return false;
    std::memmove(recv, contribution(0), bytes);
    const std::size_t count = bytes / dtype_size(t);
    for (int r = 1; r < size; ++r) reduce_into(recv, contribution(r), count, t, op);
    reduced = true;
    blocks.reset();
    std::vector<char>().swap(own);
    return true;
  }
};

// The tag of reduce-scatter's exchange: MPI_TAG_UB, which max_tag() keeps
// from every other point-to-point message.
int exchange_tag(MPI_Comm c) {
  void* value = nullptr;
  int found = 0;
  MPI_Comm_get_attr(c, MPI_TAG_UB, &value, &found);
  return found ? *static_cast<int*>(value) : 32767;
}

template <class Issue>
Request chunked(std::string what, std::size_t count, DType t, Issue issue) {
  auto p = std::make_unique<MpiPending>();
  p->what = std::move(what);
  const std::size_t esz = dtype_size(t);
  std::size_t off = 0;
  do {
    const std::size_t n = std::min(kChunk, count - off);
    MPI_Request r;
    check(issue(off * esz, static_cast<int>(n), &r), p->what);
    p->reqs.push_back(r);
    off += n;
  } while (off < count);
  return Request(std::move(p));
}

int as_int_count(std::size_t count, const std::string& what) {
  if (count > static_cast<std::size_t>(INT_MAX))
    throw RuntimeFailure(fmt::format("{}: count exceeds the MPI int limit", what));
  return static_cast<int>(count);
}

}  // namespace

Request all_reduce(MPI_Comm c, std::string what, void* buf, std::size_t count, DType t,
                   ReduceOp op) {
  auto* base = static_cast<char*>(buf);
  return chunked(std::move(what), count, t, [&](std::size_t off, int n, MPI_Request* r) {
    return MPI_Iallreduce(MPI_IN_PLACE, base + off, n, to_mpi(t), to_mpi(op, t), c, r);
  });
}

Request reduce(MPI_Comm c, std::string what, void* buf, std::size_t count, DType t, ReduceOp op,
               int root) {
  int rank = 0;
  MPI_Comm_rank(c, &rank);
  auto* base = static_cast<char*>(buf);
  return chunked(std::move(what), count, t, [&](std::size_t off, int n, MPI_Request* r) {
    void* sendbuf = rank == root ? MPI_IN_PLACE : base + off;
    return MPI_Ireduce(sendbuf, base + off, n, to_mpi(t), to_mpi(op, t), root, c, r);
  });
}

Request reduce_scatter(MPI_Comm c, std::string what, const void* send, void* recv,
                       std::size_t count, DType t, ReduceOp op) {
  int rank = 0, size = 1;
  MPI_Comm_rank(c, &rank);
  MPI_Comm_size(c, &size);
  auto p = std::make_unique<ExchangePending>();
  p->what = std::move(what);
  const int n = as_int_count(count, p->what);
  const std::size_t bytes = count * dtype_size(t);
  const char* in = static_cast<const char*>(send);
  p->send = in, p->recv = static_cast<char*>(recv), p->bytes = bytes;
  p->t = t, p->op = op, p->rank = rank, p->size = size;
  p->blocks.reset(new char[std::size_t(size - 1) * bytes]);  // not cleared: all received into
  // In place (recv is this rank's block of send): keep that block, which
  // the sum over rank order overwrites before it reaches this rank.
  if (p->recv >= in && p->recv < in + std::size_t(size) * bytes)
    p->own.assign(in + std::size_t(rank) * bytes, in + std::size_t(rank + 1) * bytes);
  // Step k pairs each rank with the ranks k away, so no rank receives from
  // all the others at once.
  const int tag = exchange_tag(c);
  for (int k = 1; k < size && bytes > 0; ++k) {
    const int from = (rank - k + size) % size, to = (rank + k) % size;
    MPI_Request q;
    check(MPI_Irecv(p->block(from), n, to_mpi(t), from, tag, c, &q), p->what);
    p->reqs.push_back(q);
    check(MPI_Isend(in + std::size_t(to) * bytes, n, to_mpi(t), to, tag, c, &q), p->what);
    p->reqs.push_back(q);
  }
  return Request(std::move(p));
}

Request all_gather(MPI_Comm c, std::string what, const void* send, void* recv, std::size_t count,
                   DType t) {
  int rank = 0;
  MPI_Comm_rank(c, &rank);
  auto p = std::make_unique<MpiPending>();
  p->what = std::move(what);
  const int n = as_int_count(count, p->what);
  // A send buffer that is already this rank's block of recv means "in place".
  const void* own_block = static_cast<const char*>(recv) + std::size_t(rank) * count * dtype_size(t);
  if (send == own_block) send = MPI_IN_PLACE;
  MPI_Request r;
  check(MPI_Iallgather(send, n, to_mpi(t), recv, n, to_mpi(t), c, &r), p->what);
  p->reqs.push_back(r);
  return Request(std::move(p));
}

Request broadcast(MPI_Comm c, std::string what, void* buf, std::size_t count, DType t, int root) {
  auto* base = static_cast<char*>(buf);
  return chunked(std::move(what), count, t, [&](std::size_t off, int n, MPI_Request* r) {
    return MPI_Ibcast(base + off, n, to_mpi(t), root, c, r);
  });
}

Request send(MPI_Comm c, std::string what, const void* buf, std::size_t count, DType t, int peer,
             int tag) {
  const auto* base = static_cast<const char*>(buf);
  return chunked(std::move(what), count, t, [&](std::size_t off, int n, MPI_Request* r) {
    return MPI_Isend(base + off, n, to_mpi(t), peer, tag, c, r);
  });
}

Request recv(MPI_Comm c, std::string what, void* buf, std::size_t count, DType t, int peer,
             int tag) {
  auto* base = static_cast<char*>(buf);
  return chunked(std::move(what), count, t, [&](std::size_t off, int n, MPI_Request* r) {
    return MPI_Irecv(base + off, n, to_mpi(t), peer, tag, c, r);
  });
}

bool message_waiting(MPI_Comm c, int peer, int tag) {
  int flag = 0;
  check(MPI_Iprobe(peer, tag, c, &flag, MPI_STATUS_IGNORE), "MPI_Iprobe");
  return flag != 0;
}

Request barrier(MPI_Comm c, std::string what) {
  auto p = std::make_unique<MpiPending>();
  p->what = std::move(what);
  MPI_Request r;
  check(MPI_Ibarrier(c, &r), p->what);
  p->reqs.push_back(r);
  return Request(std::move(p));
}

int max_tag(MPI_Comm c) { return exchange_tag(c) - 1; }

}  // namespace trident::mpi_ops
