// Typed access to a parsed TOML deck that remembers which keys were read, so
// anything left over is reported as unknown (with the closest known name).
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <toml++/toml.h>
#include <vector>

namespace trident {

class DeckReader {
 public:
  DeckReader(const toml::table& root, std::string origin) : root_(root), origin_(std::move(origin)) {}

  // Each get leaves `out` unchanged when the key is absent.
  void get(const std::string& sec, const std::string& key, int& out);
  void get(const std::string& sec, const std::string& key, double& out);
  void get(const std::string& sec, const std::string& key, std::uint64_t& out);
  void get(const std::string& sec, const std::string& key, std::string& out);
  // A string or an array of strings.
  void get_paths(const std::string& sec, const std::string& key, std::vector<std::string>& out);

  // Throws InputError "<origin>: [sec] key = <value> <what>" unless ok.
  void require(bool ok, const std::string& sec, const std::string& key, const std::string& what);
  [[noreturn]] void fail(const std::string& sec, const std::string& key, const std::string& what);
  void check_unknown_keys() const;

 private:
  const toml::node* lookup(const std::string& sec, const std::string& key);
  [[noreturn]] void type_error(const std::string& sec, const std::string& key,
                               const toml::node& n, const char* expected);
  const toml::table& root_;
  std::string origin_;
  std::map<std::string, std::set<std::string>> known_;
  std::map<std::string, std::string> shown_;  // "sec.key" -> value as written
};

}  // namespace trident
