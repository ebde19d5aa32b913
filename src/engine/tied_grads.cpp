// The tied embedding's two gradient copies (the first stage's embedding, the
// last stage's LM head) summed so both take the same step: over the two
// ranks that hold them, or within rank 0 when zb-v's V puts both there.
#include <stdexcept>

#include "engine/grad_engine.hpp"

namespace trident {

void GradEngine::sum_tied_grads(Communicator& ends) {
  const GradSpan g = tied_grads();
  if (g.data) ends.all_reduce(g.data, g.count, g.dtype, ReduceOp::sum);
}

void sum_tied_grads_locally(GradEngine& first, GradEngine& last, ComputeBackend& backend) {
  const GradSpan a = first.tied_grads(), b = last.tied_grads();
  if (!a.data || !b.data) return;
  if (a.count != b.count || a.dtype != b.dtype)
    throw std::logic_error("tied embedding: the two copies' gradients do not line up");
  if (a.dtype == DType::f32) {
    float* x = static_cast<float*>(a.data);
    backend.add(x, x, static_cast<const float*>(b.data), a.count);
  } else {
    const std::size_t bytes = a.count * sizeof(float);
    float* x = static_cast<float*>(backend.allocate(2 * bytes));
    float* y = x + a.count;
    backend.convert(x, DType::f32, a.data, a.dtype, a.count);
    backend.convert(y, DType::f32, b.data, b.dtype, b.count);
    backend.add(x, x, y, a.count);
    backend.convert(a.data, a.dtype, x, DType::f32, a.count);
    backend.release(x, 2 * bytes);
  }
  backend.copy(b.data, a.data, a.count * dtype_size(a.dtype));
}

TiedGradExchange::TiedGradExchange(Communicator& ends, ComputeBackend& backend,
                                   MemoryLedger& ledger, std::size_t count)
    : ends_(ends), backend_(backend) {
  other_ = std::make_unique<Arena>(backend, ledger, MemCategory::buffers, count);
  if (ends.rank() == 0) own_copy_ = std::make_unique<Arena>(backend, ledger, MemCategory::buffers, count);
}

TiedGradExchange::~TiedGradExchange() {
  // Mid-step (a failed run) its messages may still be in flight: the buffers
  // stay and nothing waits. Else the last send is the other end's, received.
  if (posted_) {
    (void)other_.release();
    (void)own_copy_.release();
    return;
  }
  try {
    ends_.wait(send_);
  } catch (const std::exception&) {
  }
}

void TiedGradExchange::post(GradEngine& engine) {
  const GradSpan g = engine.tied_grads();
  if (!g.data) return;
  if (g.dtype != DType::f32 || g.count != other_->numel())
    throw std::logic_error("tied embedding: the exchange's buffers do not fit its gradients");
  ends_.wait(send_);  // the previous step's: received long since
  const int peer = 1 - ends_.rank();
  recv_ = ends_.irecv(other_->f32(), g.count, DType::f32, peer, 0);
  const void* share = g.data;
  if (own_copy_) {
    backend_.copy(own_copy_->f32(), g.data, g.count * sizeof(float));
    share = own_copy_->f32();
  }
  send_ = ends_.isend(share, g.count, DType::f32, peer, 0);
  posted_ = true;
}

void TiedGradExchange::sum(GradEngine& engine) {
  if (!posted_) post(engine);
  posted_ = false;
  const GradSpan g = engine.tied_grads();
  if (!g.data) return;
  ends_.wait(recv_);
  if (!own_copy_) ends_.wait(send_);  // it reads the gradients the sum overwrites
  float* x = static_cast<float*>(g.data);
  backend_.add(x, x, other_->f32(), g.count);
}

}  // namespace trident
