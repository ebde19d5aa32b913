#include "parallel/data/data_comm.hpp"

#include "core/timer.hpp"

namespace trident {

DataParallelComm::DataParallelComm(Communicator& data, Arena& grads,
                                   std::vector<GradBucket> buckets)
    : data_(data), grads_(grads), buckets_(std::move(buckets)), readiness_(buckets_) {
  pending_.resize(buckets_.size());
}

void DataParallelComm::grads_ready_from(std::size_t first_ready) {
  if (data_.size() == 1) return;
  const std::size_t esz = dtype_size(grads_.dtype());
  for (std::size_t i : readiness_.mark_ready_from(first_ready)) {
    const GradBucket& b = buckets_[i];
    pending_[i] = data_.iall_reduce(static_cast<char*>(grads_.data()) + b.begin * esz, b.size(),
                                    grads_.dtype(), ReduceOp::sum);
  }
  // MPI progresses non-blocking collectives inside MPI calls: poke them.
  for (auto& r : pending_) data_.test(r);
}

double DataParallelComm::finish() {
  const double t0 = now_seconds();
  if (data_.size() > 1) {
    grads_ready_from(0);
    for (auto& r : pending_) data_.wait(r);
  }
  readiness_.reset();
  return now_seconds() - t0;
}

void DataParallelComm::reduce_grads_to_root() {
  if (data_.size() > 1) data_.reduce(grads_.data(), grads_.numel(), grads_.dtype(), ReduceOp::sum, 0);
}

void DataParallelComm::broadcast_params(Arena& params) {
  if (data_.size() > 1) data_.broadcast(params.data(), params.numel(), params.dtype(), 0);
}

}  // namespace trident
