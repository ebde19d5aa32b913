#include "parallel/pipeline/pipeline_comm.hpp"

#include <stdexcept>

namespace trident {

namespace {

// The send of a message to this rank: done once its receive has copied it.
class LocalSend final : public PendingOp {
 public:
  explicit LocalSend(std::shared_ptr<bool> taken) : taken_(std::move(taken)) {
    what = "pipeline send to this rank";
  }
  bool test() override { return *taken_; }

 private:
  std::shared_ptr<bool> taken_;
};

}  // namespace

PipelineComm::PipelineComm(Communicator& activations, Communicator& grads,
                           ComputeBackend& backend, int chunks, bool v_shape)
    : acts_(activations), grads_(grads), backend_(backend), chunks_(chunks), v_shape_(v_shape) {}

int PipelineComm::tag(int mb, int receiver, bool forward, int space) const {
  // Evaluation numbers its micro-batches -1, -2, ...: they get a tag range of
  // their own, so an evaluation between pipedream steps, whose stream is never
  // flushed, cannot take a message still in flight for training.
  if (mb < 0) space = kEvalTags;
  const long long k = mb < 0 ? -1LL - mb : mb;
  const long long t = (k * chunks_ * stages() + receiver) * 2 + (forward ? 0 : 1);
  // Each space is a quarter of the library's tags; a tag repeats only after
  // that many micro-batch messages, long after the earlier one was received.
  const long long span = (static_cast<long long>(acts_.max_tag()) + 1) / 4;
  return int(space * span + t % span);
}

void PipelineComm::receive(Communicator& channel, float* buf, std::size_t n, int peer, int tag) {
  if (peer == stage()) {  // a rank runs its list in order: the send came first
    auto it = local_.find(tag);
    if (it == local_.end() || it->second.empty() || it->second.front().n != n)
      throw std::logic_error("pipeline: a receive from this rank without its send");
    const LocalMessage m = it->second.front();
    it->second.pop_front();
    if (it->second.empty()) local_.erase(it);
    backend_.copy(buf, m.data, n * sizeof(float));
    *m.taken = true;
    return;
  }
  // A message already here (its sender done with it) is only a copy away: no
  // idle work before it. Else pieces of idle work while it has not come.
  // Probed before the receive is posted, which takes it off the queue.
  const bool here = idle_work_ && channel.message_waiting(peer, tag);
  Request r = channel.irecv(buf, n, DType::f32, peer, tag);
  flush();
  if (idle_work_ && !here)
    while (!channel.test(r) && idle_work_()) {
    }
  channel.wait(r);
}

Request PipelineComm::send(Communicator& channel, const float* buf, std::size_t n, int peer,
                           int tag) {
  if (peer != stage()) return channel.isend(buf, n, DType::f32, peer, tag);
  auto taken = std::make_shared<bool>(false);
  local_[tag].push_back({buf, n, taken});
  return Request(std::make_unique<LocalSend>(std::move(taken)));
}

// Neighbours are the ranks of virtual stages vs - 1 and vs + 1: the ring for
// interleaving; in a V the turn at stage p - 1 is a message to itself, kept
// in local_.
void PipelineComm::recv_forward(float* buf, std::size_t n, int mb, int chunk) {
  const int vs = virtual_stage(chunk);
  receive(forward_channel(mb), buf, n, rank_of(vs - 1), tag(mb, vs, true));
}

Request PipelineComm::send_forward(const float* buf, std::size_t n, int mb, int chunk) {
  const int vs = virtual_stage(chunk);
  return send(forward_channel(mb), buf, n, rank_of(vs + 1), tag(mb, vs + 1, true));
}

void PipelineComm::recv_backward(float* buf, std::size_t n, int mb, int chunk) {
  const int vs = virtual_stage(chunk);
  receive(grads_, buf, n, rank_of(vs + 1), tag(mb, vs, false));
}

Request PipelineComm::send_backward(const float* buf, std::size_t n, int mb, int chunk) {
  const int vs = virtual_stage(chunk);
  return send(grads_, buf, n, rank_of(vs - 1), tag(mb, vs - 1, false));
}

Request PipelineComm::send_head_grad(const float* buf, std::size_t n, int mb) {
  return send(grads_, buf, n, 0, tag(mb, 0, false, kHeadTags));
}

void PipelineComm::recv_head_grad(float* buf, std::size_t n, int mb) {
  receive(grads_, buf, n, stages() - 1, tag(mb, 0, false, kHeadTags));
}

}  // namespace trident
