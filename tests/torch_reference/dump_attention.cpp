// Writes the CPU backend's flash attention on a few shapes for
// compare_attention.py to check against PyTorch: per case, float32 files
// qkv, dout (inputs), out, lse (forward) and dqkv (backward, from zero), and
// a line "name B T C NH" in cases.txt. Shapes cover T = 1 and T past one and
// two tiles, not a multiple of the tile.
//   usage: dump_attention OUT_DIR
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "compute/backend.hpp"
#include "compute/cpu/kernels.hpp"

namespace {

void write(const std::string& path, const std::vector<float>& v) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
}

std::vector<float> random_vec(std::size_t n, unsigned seed, float scale) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: dump_attention OUT_DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  const int tile = trident::cpu::kAttentionTile;
  struct Case {
    int B, T, C, NH;
  };
  const Case cases[] = {{2, 1, 16, 2}, {2, 37, 32, 4}, {1, tile + 5, 32, 2}, {2, 2 * tile + 3, 24, 3}};
  auto be = trident::make_cpu_backend(0);
  std::ofstream list(dir + "/cases.txt");
  int i = 0;
  for (const Case& s : cases) {
    const std::string name = "case" + std::to_string(i++);
    const auto qkv = random_vec(std::size_t(s.B) * s.T * 3 * s.C, 10 + i, 1.5f);
    const auto dout = random_vec(std::size_t(s.B) * s.T * s.C, 20 + i, 1.0f);
    std::vector<float> out(dout.size()), lse(std::size_t(s.B) * s.NH * s.T), dqkv(qkv.size());
    be->attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, s.C, s.NH);
    be->attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), s.B, s.T,
                           s.C, s.NH);
    for (const auto& [what, v] : {std::pair{"qkv", &qkv}, {"dout", &dout}, {"out", &out},
                                  {"lse", &lse}, {"dqkv", &dqkv}})
      write(dir + "/" + name + "_" + what + ".bin", *v);
    list << name << ' ' << s.B << ' ' << s.T << ' ' << s.C << ' ' << s.NH << '\n';
  }
  return 0;
}
