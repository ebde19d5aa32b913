// The only place pipeline parallelism talks to the network: activations to
// the next virtual stage, their gradients back to the previous one. Sends are
// non-blocking (their buffers stay untouched until the slot or send buffer is
// reused, which waits for them); receives block. With every send posted before any wait, a
// stage can only wait for something its peer has already sent or will send
// without waiting on this stage, so no schedule here can deadlock. Tags name
// the micro-batch, the receiving virtual stage and the direction, so a
// message is never taken for another; evaluation's micro-batches (numbered
// -1, -2, ...) and pipedream's head gradients have tag spaces of their own.
// Activations and gradients travel on communicators of their own: NCCL has no
// tags and pairs a pair's messages in issue order, which each direction keeps
// (validate_schedule checks it) but a V's two together do not. Evaluation's
// activations use the gradients' one, idle between steps (pipedream's forwards
// run ahead across them). Before blocking, both issue what they queued. A V's
// turn at stage p - 1, a message to this rank, never reaches a communicator:
// its receive copies it (compute backend) and completes its send.
#pragma once
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "comm/communicator.hpp"
#include "compute/backend.hpp"
#include "parallel/pipeline/schedule.hpp"

namespace trident {

class PipelineComm {
 public:
  // v_shape: zb-v's placement (chunk 1 of rank s is virtual stage 2p - 1 - s).
  PipelineComm(Communicator& activations, Communicator& grads, ComputeBackend& backend,
               int chunks, bool v_shape = false);
  int stage() const { return acts_.rank(); }
  int stages() const { return acts_.size(); }
  bool first_virtual(int chunk) const { return virtual_stage(chunk) == 0; }
  bool last_virtual(int chunk) const { return virtual_stage(chunk) == chunks_ * stages() - 1; }

  void recv_forward(float* buf, std::size_t n, int mb, int chunk);
  Request send_forward(const float* buf, std::size_t n, int mb, int chunk);
  void recv_backward(float* buf, std::size_t n, int mb, int chunk);
  Request send_backward(const float* buf, std::size_t n, int mb, int chunk);
  // pipedream: the LM head's share of the tied embedding's gradient of
  // micro-batch mb, from the last stage to the first (which owns the embedding).
  Request send_head_grad(const float* buf, std::size_t n, int mb);
  void recv_head_grad(float* buf, std::size_t n, int mb);
  void wait(Request& r) {
    flush();
    acts_.wait(r);
  }
  bool test(Request& r) { return acts_.test(r); }
  // Work for a receive whose message has not come yet, run a piece at a time
  // (each returns whether more is left) until it comes (post-validation's
  // undo copy); empty: none.
  void set_idle_work(std::function<bool()> work) { idle_work_ = std::move(work); }

 private:
  int virtual_stage(int chunk) const { return virtual_stage_of(v_shape_, stages(), stage(), chunk); }
  int rank_of(int vs) const { return rank_of_virtual_stage(v_shape_, stages(), vs); }
  // Tag spaces (quarters of the tag range): training's activations and gradients,
  // evaluation's, and pipedream's head gradients to stage 0.
  static constexpr int kTrainTags = 0, kEvalTags = 1, kHeadTags = 2;
  int tag(int mb, int receiver_virtual_stage, bool forward, int space = kTrainTags) const;
  Communicator& forward_channel(int mb) { return mb < 0 ? grads_ : acts_; }
  void flush() {
    acts_.flush();
    grads_.flush();
  }
  void receive(Communicator& channel, float* buf, std::size_t n, int peer, int tag);
  Request send(Communicator& channel, const float* buf, std::size_t n, int peer, int tag);
  struct LocalMessage {
    const float* data;
    std::size_t n;
    std::shared_ptr<bool> taken;  // its send's completion
  };
  Communicator& acts_;
  Communicator& grads_;
  ComputeBackend& backend_;
  std::map<int, std::deque<LocalMessage>> local_;  // sent to this rank, by tag
  int chunks_;
  bool v_shape_;
  std::function<bool()> idle_work_;
};

}  // namespace trident
