#include "core/fault_inject.hpp"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace trident {

bool fault_armed(const char* site, const char* phase, long step) {
  const char* env = std::getenv("TRIDENT_FAULT_INJECT");
  if (!env || !*env) return false;
  const std::string spec(env), here = std::string(site) + ":" + phase;
  const auto at = spec.find('@');
  if (spec.substr(0, at) != here) return false;
  return at == std::string::npos || std::strtol(spec.c_str() + at + 1, nullptr, 10) == step;
}

void fault_point(const char* site, const char* phase, long step) {
  if (!fault_armed(site, phase, step)) return;
  const std::string here = std::string(site) + ":" + phase;
  std::fprintf(stderr, "fault injection: %s at step %ld, killing the process\n", here.c_str(), step);
  std::fflush(stderr);
  std::raise(SIGKILL);
}

}  // namespace trident
