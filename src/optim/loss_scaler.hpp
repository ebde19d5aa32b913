// Dynamic loss scaling for fp16 (Micikevicius et al. 2018; the rules of
// Megatron-LM's DynamicGradScaler). The loss is multiplied by `scale` so that
// small fp16 activation gradients do not flush to zero; gradients are divided
// by it before the update. A step whose gradients hold inf or NaN anywhere is
// skipped: every hysteresis-th such step (counted since the last growth) the
// scale halves, down to min_scale; after growth_interval clean steps in a row
// it doubles. Every rank holds the same state (the overflow is agreed first).
#pragma once
#include <algorithm>
#include <cstdint>

namespace trident {

struct LossScalerConfig {
  double initial_scale = 65536.0;
  int growth_interval = 1000;
  int hysteresis = 2;
  double min_scale = 1.0;
};

class LossScaler {
 public:
  // The state a checkpoint keeps.
  struct State {
    double scale = 1.0;
    std::int64_t growth_tracker = 0;      // clean steps since the last growth or overflow
    std::int64_t hysteresis_tracker = 0;  // overflows still tolerated before a halving
  };

  explicit LossScaler(const LossScalerConfig& c)
      : cfg_(c), st_{c.initial_scale, 0, c.hysteresis} {}
  double scale() const { return st_.scale; }
  const State& state() const { return st_; }
  void set_state(const State& s) { st_ = s; }

  // After each step: whether its gradients overflowed (agreed over all ranks).
  void update(bool overflow) {
    if (overflow) {
      st_.growth_tracker = 0;
      if (--st_.hysteresis_tracker <= 0) st_.scale = std::max(st_.scale / 2, cfg_.min_scale);
      return;
    }
    if (++st_.growth_tracker == cfg_.growth_interval) {
      st_.growth_tracker = 0;
      st_.hysteresis_tracker = cfg_.hysteresis;
      st_.scale *= 2;
    }
  }

 private:
  LossScalerConfig cfg_;
  State st_;
};

}  // namespace trident
