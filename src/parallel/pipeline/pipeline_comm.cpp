#include "parallel/pipeline/pipeline_comm.hpp"

namespace trident {

PipelineComm::PipelineComm(Communicator& pipeline, int chunks) : pipe_(pipeline), chunks_(chunks) {}

int PipelineComm::tag(int mb, int receiver, bool forward, int space) const {
  // Evaluation numbers its micro-batches -1, -2, ...: they get a tag range of
  // their own, so an evaluation between pipedream steps, whose stream is never
  // flushed, cannot take a message still in flight for training.
  if (mb < 0) space = kEvalTags;
  const long long k = mb < 0 ? -1LL - mb : mb;
  const long long t = (k * chunks_ * stages() + receiver) * 2 + (forward ? 0 : 1);
  return int(t & 0x0fffffff) | (space << 28);
}

// The previous virtual stage of (chunk, s) is (chunk, s-1), or the last stage
// of the previous chunk; the next is (chunk, s+1), or stage 0 of the next chunk.
void PipelineComm::recv_forward(float* buf, std::size_t n, int mb, int chunk) {
  const int prev = (stage() + stages() - 1) % stages();
  pipe_.recv(buf, n, DType::f32, prev, tag(mb, virtual_stage(chunk), true));
}

Request PipelineComm::send_forward(const float* buf, std::size_t n, int mb, int chunk) {
  const int next = (stage() + 1) % stages();
  return pipe_.isend(buf, n, DType::f32, next, tag(mb, virtual_stage(chunk) + 1, true));
}

void PipelineComm::recv_backward(float* buf, std::size_t n, int mb, int chunk) {
  const int next = (stage() + 1) % stages();
  pipe_.recv(buf, n, DType::f32, next, tag(mb, virtual_stage(chunk), false));
}

Request PipelineComm::send_backward(const float* buf, std::size_t n, int mb, int chunk) {
  const int prev = (stage() + stages() - 1) % stages();
  return pipe_.isend(buf, n, DType::f32, prev, tag(mb, virtual_stage(chunk) - 1, false));
}

Request PipelineComm::send_head_grad(const float* buf, std::size_t n, int mb) {
  return pipe_.isend(buf, n, DType::f32, 0, tag(mb, 0, false, kHeadTags));
}

void PipelineComm::recv_head_grad(float* buf, std::size_t n, int mb) {
  pipe_.recv(buf, n, DType::f32, stages() - 1, tag(mb, 0, false, kHeadTags));
}

}  // namespace trident
