#include "parallel/context/context_comm.hpp"

namespace trident {

ContextComm::Shift ContextComm::start_shift(const float* send, float* recv, std::size_t count,
                                            int tag) {
  const int n = size(), me = rank();
  Shift s;
  // Receive first: a backend that pairs messages in issue order (NCCL) sees
  // every rank post the same sequence.
  s.recv = ring_.irecv(recv, count, DType::f32, (me + n - 1) % n, tag);
  s.send = ring_.isend(send, count, DType::f32, (me + 1) % n, tag);
  ring_.flush();  // started now, not at the wait
  return s;
}

void ContextComm::finish(Shift& s) {
  ring_.wait(s.recv);
  ring_.wait(s.send);
}

}  // namespace trident
