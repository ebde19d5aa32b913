// Where the model finds its parameters and gradients. The model names the unit
// (embeddings 0, block l -> l + 1, final norm L + 1) it is about to use and says
// when it is done, so a sharded storage (ZeRO-3) can gather parameters just in
// time and a windowed one (ZeRO-2/3) can reduce and recycle gradients as soon
// as backward leaves a unit. The full storage ignores the announcements.
#pragma once
#include <vector>

#include "compute/backend.hpp"
#include "memory/arena.hpp"
#include "memory/tensor_table.hpp"

namespace trident {

enum class Pass { forward, backward };

class ModelStorage {
 public:
  virtual ~ModelStorage() = default;
  virtual float* param(const TensorInfo& t) = 0;
  virtual float* grad(const TensorInfo& t) = 0;
  // Parameters of `unit` are about to be read / no longer needed in this pass.
  virtual void need_params(int unit, Pass pass) {}
  virtual void done_params(int unit) {}
  // Gradients of `unit` are about to be accumulated / are final for this
  // micro-batch (`last`: the step's last micro-batch).
  virtual void need_grads(int unit) {}
  virtual void done_grads(int unit, bool last) {}
  // This rank's parameters in the table's layout (its tensor shards, whole),
  // and the reverse (each storage keeps its part).
  virtual void gather_params_to_host(std::vector<float>& out) = 0;
  virtual void set_params_from_host(const std::vector<float>& in) = 0;
};

// Every parameter and gradient resident in one arena each (no ZeRO, or ZeRO-1).
class FullStorage : public ModelStorage {
 public:
  FullStorage(const TensorTable& table, ComputeBackend& backend, MemoryLedger& ledger)
      : params_(backend, ledger, MemCategory::parameters, table.size()),
        grads_(backend, ledger, MemCategory::gradients, table.size()),
        backend_(backend) {}
  float* param(const TensorInfo& t) override { return params_.f32(t); }
  float* grad(const TensorInfo& t) override { return grads_.f32(t); }
  void gather_params_to_host(std::vector<float>& out) override {
    out.resize(params_.numel());
    backend_.copy_to_host(out.data(), params_.data(), params_.bytes());
  }
  void set_params_from_host(const std::vector<float>& in) override {
    backend_.copy_from_host(params_.data(), in.data(), params_.bytes());
  }
  Arena& params() { return params_; }
  Arena& grads() { return grads_; }

 private:
  Arena params_, grads_;
  ComputeBackend& backend_;
};

}  // namespace trident
