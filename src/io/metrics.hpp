// Metrics as JSON Lines: one object per step (rank 0 writes).
#pragma once
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace trident {

class MetricsWriter {
 public:
  MetricsWriter() = default;
  // Throws InputError if the file cannot be created. A resumed run appends.
  explicit MetricsWriter(const std::string& path, bool append = false);
  bool enabled() const { return out_.is_open(); }
  void write(const nlohmann::json& record);

 private:
  std::ofstream out_;
};

}  // namespace trident
