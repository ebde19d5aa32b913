#include "checkpoint/checkpoint_dir.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"

namespace trident {
namespace fs = std::filesystem;

std::string checkpoint_name(long step) { return fmt::format("step_{:06d}.h5", step); }
std::string checkpoint_temp_name(long step) { return "." + checkpoint_name(step) + ".tmp"; }

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    throw RuntimeFailure(fmt::format("{}: fsync failed: {}", path, why));
  }
  ::close(fd);
}

void durable_rename(const std::string& dir, const std::string& from, const std::string& to) {
  std::error_code ec;
  fs::rename(fs::path(dir) / from, fs::path(dir) / to, ec);
  if (ec)
    throw RuntimeFailure(fmt::format("{}: cannot rename {} to {}: {}", dir, from, to,
                                     ec.message()));
  fsync_path(dir);
}

void write_latest(const std::string& dir, const std::string& name) {
  const std::string tmp = ".latest.tmp";
  {
    std::ofstream out(fs::path(dir) / tmp, std::ios::trunc);
    out << name << '\n';
    out.close();
    if (!out) throw RuntimeFailure(fmt::format("{}: cannot write {}", dir, tmp));
  }
  fsync_path((fs::path(dir) / tmp).string());
  durable_rename(dir, tmp, "latest");
}

std::optional<std::string> read_latest(const std::string& dir) {
  std::ifstream in(fs::path(dir) / "latest");
  std::string name;
  if (!in || !std::getline(in, name) || name.empty()) return std::nullopt;
  return (fs::path(dir) / name).string();
}

namespace {
// The step of "step_000100.h5", or -1 for any other name.
long step_of(const std::string& name) {
  if (name.size() < 9 || name.rfind("step_", 0) != 0 || !name.ends_with(".h5")) return -1;
  const std::string digits = name.substr(5, name.size() - 8);
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::stol(digits);
}
}  // namespace

std::vector<long> list_checkpoints(const std::string& dir) {
  std::vector<long> steps;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const long s = step_of(e.path().filename().string());
    if (s >= 0 && e.is_regular_file()) steps.push_back(s);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::vector<std::string> prunable_files(const std::string& dir, int keep) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(".step_", 0) == 0 && name.ends_with(".h5.tmp")) out.push_back(e.path().string());
  }
  if (keep <= 0) return out;
  const auto latest = read_latest(dir);
  const auto steps = list_checkpoints(dir);
  for (std::size_t i = 0; i + keep < steps.size(); ++i) {
    const fs::path p = fs::path(dir) / checkpoint_name(steps[i]);
    if (latest && fs::path(*latest) == p) continue;
    out.push_back(p.string());
  }
  return out;
}

void remove_files(const std::vector<std::string>& paths) {
  std::error_code ec;
  for (const std::string& p : paths) fs::remove(p, ec);
}

void prune_checkpoints(const std::string& dir, int keep) { remove_files(prunable_files(dir, keep)); }

}  // namespace trident
