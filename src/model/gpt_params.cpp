#include "model/gpt_params.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

namespace trident {

std::size_t gpt_num_parameters(const GptConfig& c) {
  const std::size_t C = c.d_model, F = c.d_ff(), QKV = c.qkv_width();
  const std::size_t norm = c.norm == NormKind::layernorm ? 2 * C : C;
  const std::size_t bias = c.bias ? 1 : 0;
  const std::size_t ups = c.mlp == MlpKind::swiglu ? 2 : 1;  // SwiGLU's gate and up
  const std::size_t block = 2 * norm + (QKV * C + bias * QKV) + (C * C + bias * C) +
                            ups * (F * C + bias * F) + (C * F + bias * C);
  const std::size_t tables = (c.tied_embeddings ? 1 : 2) * std::size_t(c.vocab) * C;
  const std::size_t positions = c.positions == PositionEncoding::learned ? c.seq_len * C : 0;
  return tables + positions + c.layers * block + norm;
}

double gpt_flops_per_token(const GptConfig& c, AttentionFlops attention) {
  // Every weight but the lookups' (the position table, an untied input table)
  // is a GEMM's.
  const double lookups = (c.positions == PositionEncoding::learned ? double(c.seq_len) : 0.0) *
                             c.d_model +
                         (c.tied_embeddings ? 0.0 : double(c.vocab) * c.d_model);
  const double matmul_weights = gpt_num_parameters(c) - lookups;
  const double per_layer = attention == AttentionFlops::causal ? 6.0 : 12.0;
  return 6.0 * matmul_weights + per_layer * c.layers * c.d_model * c.seq_len;
}

namespace {
std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
bool ends_with(const std::string& s, const char* suffix) {
  const std::string x(suffix);
  return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
}

}  // namespace

std::uint64_t stream_key(std::uint64_t seed, const char* name) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a of the name, mixed with the seed
  for (const char* p = name; *p; ++p) h = (h ^ std::uint8_t(*p)) * 1099511628211ull;
  return splitmix64(seed ^ splitmix64(h));
}

double counter_normal(std::uint64_t key, std::uint64_t i) {
  // Box-Muller on two 53-bit uniforms derived from (key, i).
  const std::uint64_t a = splitmix64(key + 2 * i), b = splitmix64(key + 2 * i + 1);
  const double u1 = (double(a >> 11) + 0.5) * 0x1.0p-53;
  const double u2 = double(b >> 11) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

void init_gpt_params(const TensorTable& table, float* params, const GptConfig& c,
                     std::uint64_t seed) {
  init_gpt_params_range(table, params, c, seed, 0, table.size());
}

void init_gpt_params_range(const TensorTable& table, float* out, const GptConfig& c,
                           std::uint64_t seed, std::size_t first, std::size_t count) {
  const double std_matrix = 0.02;
  const double std_residual = 0.02 / std::sqrt(2.0 * c.layers);
  std::fill(out, out + count, 0.0f);  // padding between tensors
  for (const TensorInfo& t : table.tensors()) {
    const std::size_t lo = std::max(first, t.offset);
    const std::size_t hi = std::min(first + count, t.offset + t.numel);
    if (lo >= hi) continue;
    float* p = out + (lo - first);
    const std::size_t i0 = lo - t.offset, n = hi - lo;  // elements [i0, i0 + n) of the tensor
    if (ends_with(t.name, ".b")) continue;
    if (ends_with(t.name, "ln1.w") || ends_with(t.name, "ln2.w") || t.name == "lnf.w") {
      for (std::size_t i = 0; i < n; ++i) p[i] = t.global_index(i0 + i) < 0 ? 0.0f : 1.0f;
      continue;
    }
    const bool residual = ends_with(t.name, "attn.proj.w") || ends_with(t.name, "mlp.proj.w");
    const double sd = residual ? std_residual : std_matrix;
    const std::uint64_t key = stream_key(seed, t.name.c_str());
    // Each value depends on its index alone: threads give the same bits.
    const std::int64_t len = std::int64_t(n);
#pragma omp parallel for schedule(static) if (len > 65536)
    for (std::int64_t i = 0; i < len; ++i) {
      const std::int64_t g = t.global_index(i0 + std::size_t(i));
      p[i] = g < 0 ? 0.0f : static_cast<float>(sd * counter_normal(key, std::uint64_t(g)));
    }
  }
}

}  // namespace trident
