#include "io/metrics.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace trident {

MetricsWriter::MetricsWriter(const std::string& path, bool append)
    : out_(path, append ? std::ios::app : std::ios::trunc) {
  if (!out_)
    throw InputError(fmt::format("output.metrics = \"{}\": cannot create the file (does its "
                                 "directory exist and is it writable?)", path));
}

void MetricsWriter::write(const nlohmann::json& record) {
  if (!enabled()) return;
  out_ << record.dump() << '\n';
  out_.flush();  // a job killed at its time limit keeps every step written so far
}

}  // namespace trident
