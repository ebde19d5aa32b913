// The only place data parallelism talks to the network.
//  - allreduce mode: each gradient bucket is summed over the data group with a
//    non-blocking all-reduce started the moment backward finishes it;
//  - gather mode (the single-master baseline): gradients are reduced to data
//    rank 0, which alone updates, then broadcasts the parameters.
#pragma once
#include <vector>

#include "comm/communicator.hpp"
#include "memory/arena.hpp"
#include "parallel/data/grad_buckets.hpp"

namespace trident {

class DataParallelComm {
 public:
  DataParallelComm(Communicator& data, Arena& grads, std::vector<GradBucket> buckets);

  const std::vector<GradBucket>& buckets() const { return buckets_; }
  // Starts the all-reduce of every bucket that is complete once the gradients
  // from `first_ready` on are final; also drives progress of earlier ones.
  void grads_ready_from(std::size_t first_ready);
  // Waits for every bucket (starting any not yet started). Returns seconds waited.
  double finish();

  // Gather mode.
  void reduce_grads_to_root();
  void broadcast_params(Arena& params);
  bool is_root() const { return data_.rank() == 0; }

 private:
  Communicator& data_;
  Arena& grads_;
  std::vector<GradBucket> buckets_;
  BucketReadiness readiness_;
  std::vector<Request> pending_;
};

}  // namespace trident
