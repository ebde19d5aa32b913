#include "comm/communicator.hpp"

#include <fmt/format.h>

#include <thread>

#include "core/error.hpp"
#include "core/timer.hpp"

namespace trident {

const char* comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::all_reduce: return "all_reduce";
    case CommOp::reduce: return "reduce";
    case CommOp::reduce_scatter: return "reduce_scatter";
    case CommOp::all_gather: return "all_gather";
    case CommOp::broadcast: return "broadcast";
    case CommOp::send: return "send";
    case CommOp::recv: return "recv";
    case CommOp::barrier: return "barrier";
    case CommOp::count: break;
  }
  return "?";
}

std::uint64_t CommStats::total_bytes() const {
  std::uint64_t s = 0;
  for (auto b : bytes) s += b;
  return s;
}

double CommStats::total_bus() const {
  double s = 0;
  for (double b : bus) s += b;
  return s;
}

double bus_factor(CommOp op, int n) {
  if (n <= 1) return 0;
  switch (op) {
    case CommOp::all_reduce: return 2.0 * (n - 1) / n;
    case CommOp::reduce_scatter:
    case CommOp::all_gather: return double(n - 1) / n;
    case CommOp::broadcast:
    case CommOp::reduce:
    case CommOp::send: return 1;
    default: return 0;
  }
}

std::string Communicator::begin_op(CommOp op, std::size_t count, DType t) {
  const auto i = static_cast<int>(op);
  const std::size_t payload = count * dtype_size(t);
  stats_.calls[i] += 1;
  stats_.bytes[i] += payload;
  stats_.bus[i] += bus_factor(op, size()) * double(payload);
  ++sequence_;
  return fmt::format("{} {} #{} ({} x {})", name_, comm_op_name(op), sequence_, count,
                     dtype_name(t));
}

bool Communicator::test(Request& r) {
  if (!r.active()) return true;
  if (!r.op()->test()) return false;
  r.reset();
  return true;
}

void Communicator::wait(Request& r) {
  if (!r.active()) return;
  // Spin on test() first (latency matters for small messages), then back off so
  // a rank waiting on a slow peer does not steal the core from compute threads.
  const double start = now_seconds();
  int spins = 0;
  bool published = false;  // only a wait that blocks tells the board: short ones stay cheap
  while (!r.op()->test()) {
    if (++spins > 1000) {
      if (observer_ && !published) observer_->waiting(r.op()->what), published = true;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      if (now_seconds() - start > timeout_s_) {
        const std::string others = observer_ ? observer_->elsewhere(r.op()->what) : "";
        if (published) observer_->done_waiting();
        throw RuntimeFailure(fmt::format(
            "collective timed out after {:.0f} s: {} ({}; raise system.comm_timeout_s if the "
            "step is legitimately this slow)",
            timeout_s_, r.op()->what,
            others.empty() ? "a peer rank is stuck or dead" : "elsewhere: " + others));
      }
    }
  }
  if (published) observer_->done_waiting();
  r.reset();
}

void Communicator::all_reduce(void* buf, std::size_t n, DType t, ReduceOp op) {
  Request r = iall_reduce(buf, n, t, op);
  wait(r);
}
void Communicator::reduce(void* buf, std::size_t n, DType t, ReduceOp op, int root) {
  Request r = ireduce(buf, n, t, op, root);
  wait(r);
}
void Communicator::reduce_scatter(const void* s, void* d, std::size_t n, DType t, ReduceOp op) {
  Request r = ireduce_scatter(s, d, n, t, op);
  wait(r);
}
void Communicator::all_gather(const void* s, void* d, std::size_t n, DType t) {
  Request r = iall_gather(s, d, n, t);
  wait(r);
}
void Communicator::broadcast(void* buf, std::size_t n, DType t, int root) {
  Request r = ibroadcast(buf, n, t, root);
  wait(r);
}
void Communicator::send(const void* buf, std::size_t n, DType t, int peer, int tag) {
  Request r = isend(buf, n, t, peer, tag);
  wait(r);
}
void Communicator::recv(void* buf, std::size_t n, DType t, int peer, int tag) {
  Request r = irecv(buf, n, t, peer, tag);
  wait(r);
}
void Communicator::barrier() {
  Request r = ibarrier();
  wait(r);
}

}  // namespace trident
