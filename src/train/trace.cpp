#include "train/trace.hpp"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/timer.hpp"

namespace trident {

void TraceRecorder::record(std::string name, const char* category, double start, double end) {
  events_.push_back({std::move(name), category, start, end});
}

void TraceRecorder::write(Communicator& world, const std::string& path) const {
  // Each rank serialises its events; rank 0 gathers them (sizes, then bytes).
  nlohmann::json mine = nlohmann::json::array();
  const int rank = world.rank();
  for (const auto& e : events_)
    mine.push_back({{"name", e.name}, {"cat", e.category}, {"ph", "X"}, {"pid", 0},
                    {"tid", rank}, {"ts", e.start * 1e6}, {"dur", (e.end - e.start) * 1e6}});
  const std::string text = mine.dump();
  std::int64_t n = std::int64_t(text.size());
  std::vector<std::int64_t> sizes(world.size());
  world.all_gather(&n, sizes.data(), 1, DType::i64);
  if (rank != 0) {
    world.send(text.data(), text.size(), DType::u8, 0, 4242);
    return;
  }
  nlohmann::json out = {{"traceEvents", nlohmann::json::array()}, {"displayTimeUnit", "ms"}};
  for (int r = 0; r < world.size(); ++r) {
    std::string buf = r == 0 ? text : std::string(std::size_t(sizes[r]), '\0');
    if (r != 0) world.recv(buf.data(), buf.size(), DType::u8, r, 4242);
    for (auto& e : nlohmann::json::parse(buf)) out["traceEvents"].push_back(std::move(e));
    out["traceEvents"].push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", r},
                                  {"args", {{"name", fmt::format("rank {}", r)}}}});
  }
  std::ofstream f(path);
  if (!f) throw RuntimeFailure(fmt::format("--trace {}: cannot write the trace", path));
  f << out.dump();
}

TraceScope::TraceScope(TraceRecorder* r, std::string name, const char* category)
    : r_(r), name_(std::move(name)), category_(category), start_(r ? now_seconds() : 0) {}

TraceScope::~TraceScope() {
  if (r_) r_->record(std::move(name_), category_, start_, now_seconds());
}

}  // namespace trident
