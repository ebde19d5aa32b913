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

}  // namespace trident
