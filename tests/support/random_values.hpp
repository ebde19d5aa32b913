// Normal(0, scale) values from a fixed seed, for tests and benchmarks: the
// same inputs every run. Engine: the generator (tests in double use the
// 64-bit one).
#pragma once
#include <cstddef>
#include <random>
#include <vector>

namespace trident::testing {

template <class T = float, class Engine = std::mt19937>
std::vector<T> random_normals(std::size_t n, unsigned seed, T scale = T(1)) {
  Engine g(seed);
  std::normal_distribution<T> d(T(0), scale);
  std::vector<T> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

}  // namespace trident::testing
