// The collectives seam. Model and parallel code talk to the network only
// through a Communicator (one per process group); backends (MPI, NCCL, MPI
// staged through host buffers) implement it. Buffers are flat and in-place where that is the
// natural form. Every operation gets a per-communicator sequence number, so a
// hang or timeout can name the group, the operation and which call it was.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/dtype.hpp"

namespace trident {

enum class ReduceOp : std::uint8_t { sum, max, min };

enum class CommOp : std::uint8_t {
  all_reduce, reduce, reduce_scatter, all_gather, broadcast, send, recv, barrier, count
};
const char* comm_op_name(CommOp op);

// Calls and payload bytes per operation kind: lets tests assert how many
// collectives a layer issues and benchmarks report bytes per step. Payload:
// the buffer (reduce-scatter and all-gather: the whole one, all ranks'
// blocks). Bus bytes: what this rank sends by nccl-tests' bus-bandwidth
// convention (bus_factor), so groups and layouts compare on the wire.
struct CommStats {
  std::array<std::uint64_t, static_cast<int>(CommOp::count)> calls{};
  std::array<std::uint64_t, static_cast<int>(CommOp::count)> bytes{};
  std::array<double, static_cast<int>(CommOp::count)> bus{};
  std::uint64_t calls_of(CommOp op) const { return calls[static_cast<int>(op)]; }
  std::uint64_t bytes_of(CommOp op) const { return bytes[static_cast<int>(op)]; }
  double bus_of(CommOp op) const { return bus[static_cast<int>(op)]; }
  std::uint64_t total_bytes() const;
  double total_bus() const;
};

// Bus bytes per payload byte on a group of n ranks: all-reduce 2(n - 1)/n
// (a ring's reduce-scatter, then its all-gather), reduce-scatter and
// all-gather (n - 1)/n, broadcast, reduce and send 1, recv and barrier 0
// (a receive is its sender's send).
double bus_factor(CommOp op, int n);

// One in-flight operation. Backends derive from it.
class PendingOp {
 public:
  virtual ~PendingOp() = default;
  virtual bool test() = 0;  // true once complete; drives progress
  std::string what;         // "data all_reduce #12 (4096 x f32)"
};

// Handle to a non-blocking operation; empty once waited on.
class Request {
 public:
  Request() = default;
  explicit Request(std::unique_ptr<PendingOp> op) : op_(std::move(op)) {}
  bool active() const { return op_ != nullptr; }
  PendingOp* op() { return op_.get(); }
  void reset() { op_.reset(); }

 private:
  std::unique_ptr<PendingOp> op_;
};

// Where every rank of the job is waiting: a rank about to block publishes its
// operation, and a rank whose wait timed out asks where the others are, so
// the error names the ranks that never arrived (comm/wait_board.hpp).
class WaitObserver {
 public:
  virtual ~WaitObserver() = default;
  virtual void waiting(const std::string& what) = 0;
  virtual void done_waiting() = 0;
  // The ranks not waiting in `what`, and where each is.
  virtual std::string elsewhere(const std::string& what) = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  const std::string& name() const { return name_; }
  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }
  std::uint64_t sequence() const { return sequence_; }
  // Tags of isend/irecv run from 0 to this (the MPI library's limit).
  int max_tag() const { return max_tag_; }

  // Non-blocking forms: each returns a Request to wait() or test().
  virtual Request iall_reduce(void* buf, std::size_t count, DType t, ReduceOp op) = 0;
  virtual Request ireduce(void* buf, std::size_t count, DType t, ReduceOp op, int root) = 0;
  // recv holds count elements; send holds count * size() (rank i gets block i).
  virtual Request ireduce_scatter(const void* send, void* recv, std::size_t count, DType t,
                                  ReduceOp op) = 0;
  // send holds count elements; recv gets count * size(), rank i's block at i.
  // send may be this rank's own block of recv (in place).
  virtual Request iall_gather(const void* send, void* recv, std::size_t count, DType t) = 0;
  virtual Request ibroadcast(void* buf, std::size_t count, DType t, int root) = 0;
  virtual Request isend(const void* buf, std::size_t count, DType t, int peer, int tag) = 0;
  virtual Request irecv(void* buf, std::size_t count, DType t, int peer, int tag) = 0;
  virtual Request ibarrier() = 0;
  // Whether a message from `peer` with `tag` has arrived and no receive has
  // taken it yet; false where the backend cannot tell (NCCL, staged).
  virtual bool message_waiting(int peer, int tag) {
    (void)peer, (void)tag;
    return false;
  }
  // Issues queued sends and receives now (a backend that batches them until
  // one is waited for: NCCL), before this rank blocks on another communicator.
  virtual void flush() {}

  // Completion. wait() fails with RuntimeFailure naming the operation once the
  // timeout passes, instead of hanging the job until its wall-clock limit.
  void wait(Request& r);
  bool test(Request& r);
  void set_timeout_seconds(double s) { timeout_s_ = s; }
  void set_wait_observer(WaitObserver* w) { observer_ = w; }
  double timeout_seconds() const { return timeout_s_; }

  // Blocking conveniences built on the non-blocking forms.
  void all_reduce(void* buf, std::size_t count, DType t, ReduceOp op);
  void reduce(void* buf, std::size_t count, DType t, ReduceOp op, int root);
  void reduce_scatter(const void* send, void* recv, std::size_t count, DType t, ReduceOp op);
  void all_gather(const void* send, void* recv, std::size_t count, DType t);
  void broadcast(void* buf, std::size_t count, DType t, int root);
  void send(const void* buf, std::size_t count, DType t, int peer, int tag);
  void recv(void* buf, std::size_t count, DType t, int peer, int tag);
  void barrier();

  template <class T> T all_reduce_value(T v, ReduceOp op) {
    all_reduce(&v, 1, dtype_of<T>(), op);
    return v;
  }

 protected:
  explicit Communicator(std::string name) : name_(std::move(name)) {}
  void set_max_tag(int t) { max_tag_ = t; }
  // Counts the call, bumps the sequence number and returns its description.
  std::string begin_op(CommOp op, std::size_t count, DType t);

 private:
  std::string name_;
  CommStats stats_;
  std::uint64_t sequence_ = 0;
  double timeout_s_ = 600.0;
  WaitObserver* observer_ = nullptr;
  int max_tag_ = 32767;  // what every MPI accepts
};

}  // namespace trident
