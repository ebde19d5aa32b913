// The Llama block's operations in double, written from their definitions
// and nothing of compute/cpu: RMSNorm (Zhang & Sennrich 2019), RoPE as Hugging
// Face's Llama code applies it (q cos + rotate_half(q) sin, rotate_half(x) =
// [-x2, x1]), SwiGLU (Shazeer 2020), and grouped-query attention as multi-head
// attention with each key/value head repeated for its group (HF's repeat_kv).
// Plus central finite differences, to check gradients against them.
#pragma once
#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

namespace trident::testing::llama {

using DVec = std::vector<double>;

inline DVec widen(const std::vector<float>& x) { return DVec(x.begin(), x.end()); }

inline DVec rmsnorm(const DVec& x, const DVec& w, int N, int C, double eps, DVec* rstd = nullptr) {
  DVec out(x.size());
  for (int i = 0; i < N; ++i) {
    double ms = 0;
    for (int c = 0; c < C; ++c) ms += x[i * C + c] * x[i * C + c];
    const double r = 1 / std::sqrt(ms / C + eps);
    for (int c = 0; c < C; ++c) out[i * C + c] = x[i * C + c] * r * w[c];
    if (rstd) rstd->push_back(r);
  }
  return out;
}

// x: B * T rows of ld, the first `heads` heads of each rotated; token t at pos0 + t.
inline DVec rope(DVec x, int B, int T, int heads, int hs, int ld, int pos0, double theta) {
  const int half = hs / 2;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < heads; ++h) {
        double* q = x.data() + (b * T + t) * ld + h * hs;
        DVec rotated(hs), out(hs);
        for (int d = 0; d < hs; ++d) rotated[d] = d < half ? -q[d + half] : q[d - half];
        for (int d = 0; d < hs; ++d) {
          const double freq = std::pow(theta, -2.0 * (d % half) / hs);  // emb = [freqs, freqs]
          const double angle = (pos0 + t) * freq;
          out[d] = q[d] * std::cos(angle) + rotated[d] * std::sin(angle);
        }
        std::copy(out.begin(), out.end(), q);
      }
  return x;
}

inline DVec swiglu(const DVec& inp, int N, int F) {
  DVec out(std::size_t(N) * F);
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < F; ++j) {
      const double a = inp[i * 2 * F + j], b = inp[i * 2 * F + F + j];
      out[i * F + j] = a / (1 + std::exp(-a)) * b;
    }
  return out;
}

struct GqaShape {
  int B, T, NH, KVH, hs;
  int width() const { return (NH + 2 * KVH) * hs; }
  std::size_t qkv_size() const { return std::size_t(B) * T * width(); }
  std::size_t out_size() const { return std::size_t(B) * T * NH * hs; }
  std::size_t lse_size() const { return std::size_t(B) * NH * T; }
};

// Softmax probabilities of query t of head h over keys 0..t, and the log-sum-exp.
inline DVec gqa_probabilities(const DVec& qkv, const GqaShape& s, int b, int h, int t,
                              double* lse = nullptr) {
  const int W = s.width(), kv = h / (s.NH / s.KVH);
  const double* q = qkv.data() + (b * s.T + t) * W + h * s.hs;
  DVec p(t + 1);
  for (int j = 0; j <= t; ++j) {
    const double* k = qkv.data() + (b * s.T + j) * W + (s.NH + kv) * s.hs;
    double dot = 0;
    for (int d = 0; d < s.hs; ++d) dot += q[d] * k[d];
    p[j] = dot / std::sqrt(double(s.hs));
  }
  const double mx = *std::max_element(p.begin(), p.end());
  double sum = 0;
  for (double& x : p) sum += (x = std::exp(x - mx));
  for (double& x : p) x /= sum;
  if (lse) *lse = mx + std::log(sum);
  return p;
}

inline DVec gqa_attention(const DVec& qkv, const GqaShape& s, DVec* lse = nullptr) {
  const int W = s.width(), C = s.NH * s.hs;
  DVec out(s.out_size());
  if (lse) lse->assign(s.lse_size(), 0);
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h)
      for (int t = 0; t < s.T; ++t) {
        double l = 0;
        const DVec p = gqa_probabilities(qkv, s, b, h, t, &l);
        if (lse) (*lse)[(b * s.NH + h) * s.T + t] = l;
        const int kv = h / (s.NH / s.KVH);
        for (int j = 0; j <= t; ++j) {
          const double* v = qkv.data() + (b * s.T + j) * W + (s.NH + s.KVH + kv) * s.hs;
          for (int d = 0; d < s.hs; ++d) out[(b * s.T + t) * C + h * s.hs + d] += p[j] * v[d];
        }
      }
  return out;
}

// The gradient of sum(out * dout) with respect to qkv, from the softmax's
// derivative: dS = P (dP - sum_j P dP), dq = s dS K, dk = s dS^T q, dv = P^T dO.
inline DVec gqa_attention_grad(const DVec& qkv, const DVec& dout, const GqaShape& s) {
  const int W = s.width(), C = s.NH * s.hs, hs = s.hs;
  const double scale = 1 / std::sqrt(double(hs));
  DVec dqkv(qkv.size());
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h)
      for (int t = 0; t < s.T; ++t) {
        const int kv = h / (s.NH / s.KVH);
        const DVec p = gqa_probabilities(qkv, s, b, h, t);
        const double* g = dout.data() + (b * s.T + t) * C + h * hs;
        const std::size_t qo = std::size_t(b * s.T + t) * W + h * hs;
        DVec dp(t + 1);
        double pdp = 0;
        for (int j = 0; j <= t; ++j) {
          const double* v = qkv.data() + (b * s.T + j) * W + (s.NH + s.KVH + kv) * hs;
          for (int d = 0; d < hs; ++d) dp[j] += g[d] * v[d];
          pdp += p[j] * dp[j];
        }
        for (int j = 0; j <= t; ++j) {
          const std::size_t ko = std::size_t(b * s.T + j) * W + (s.NH + kv) * hs;
          const std::size_t vo = ko + std::size_t(s.KVH) * hs;
          const double ds = p[j] * (dp[j] - pdp) * scale;
          for (int d = 0; d < hs; ++d) {
            dqkv[qo + d] += ds * qkv[ko + d];
            dqkv[ko + d] += ds * qkv[qo + d];
            dqkv[vo + d] += p[j] * g[d];
          }
        }
      }
  return dqkv;
}

// d/dx_i of sum(f(x) * weights), by central differences of step h.
inline DVec finite_difference(const std::function<DVec(const DVec&)>& f, DVec x,
                              const DVec& weights, double h = 1e-6) {
  auto dot = [&](const DVec& y) {
    double s = 0;
    for (std::size_t i = 0; i < y.size(); ++i) s += y[i] * weights[i];
    return s;
  };
  DVec grad(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double up = dot(f(x));
    x[i] = keep - h;
    const double down = dot(f(x));
    x[i] = keep;
    grad[i] = (up - down) / (2 * h);
  }
  return grad;
}

// max |a - b| over max(1, max |b|).
template <class A, class B>
double relative_gap(const A& a, const B& b) {
  double gap = 0, size = 1;
  for (std::size_t i = 0; i < a.size(); ++i) {
    gap = std::max(gap, std::abs(double(a[i]) - double(b[i])));
    size = std::max(size, std::abs(double(b[i])));
  }
  return gap / size;
}

}  // namespace trident::testing::llama
