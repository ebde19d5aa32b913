// A timeline of what each rank did (forward, backward, send, receive,
// all-reduce, optimizer), written as a Chrome trace: one track per rank; it
// loads in Perfetto and chrome://tracing.
#pragma once
#include <string>
#include <vector>

#include "comm/communicator.hpp"

namespace trident {

class TraceRecorder {
 public:
  void record(std::string name, const char* category, double start_s, double end_s);
  // Collective over `world`: rank 0 writes every rank's events to `path`.
  void write(Communicator& world, const std::string& path) const;

 private:
  struct Event {
    std::string name;
    const char* category;
    double start, end;
  };
  std::vector<Event> events_;
};

// Records [construction, destruction) when a recorder is given.
class TraceScope {
 public:
  TraceScope(TraceRecorder* r, std::string name, const char* category);
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  TraceRecorder* r_;
  std::string name_;
  const char* category_;
  double start_;
};

}  // namespace trident
