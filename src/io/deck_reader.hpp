// Typed access to a parsed TOML deck that remembers which keys were read, so
// anything left over is reported as unknown (with the closest known name).
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <toml++/toml.h>
#include <vector>

#include "io/deck_choices.hpp"
#include "io/deck_key.hpp"

namespace trident {

// The name of `names` within two edits of `word` (a typo's likely intent), or "".
std::string closest_name(const std::string& word, const std::vector<std::string>& names);

class DeckReader {
 public:
  DeckReader(const toml::table& root, std::string origin) : root_(root), origin_(std::move(origin)) {}

  // Each get leaves `out` unchanged when the key is absent.
  void get(const std::string& sec, const std::string& key, int& out);
  void get(const std::string& sec, const std::string& key, double& out);
  void get(const std::string& sec, const std::string& key, std::uint64_t& out);
  void get(const std::string& sec, const std::string& key, std::string& out);
  void get(const std::string& sec, const std::string& key, bool& out);
  void get(const std::string& sec, const std::string& key, std::int64_t& out);
  // A string naming one of E's choices (io/deck_choices.hpp). Returns false,
  // leaving `out` unchanged, when it names none; the caller reports that.
  template <class E>
  bool get_choice(const std::string& sec, const std::string& key, E& out) {
    std::string name = choice_name(out);
    get(sec, key, name);
    std::vector<std::string> names;
    for (const auto& c : choices(out)) names.emplace_back(c.name);
    note_choices(sec, key, std::move(names));
    const std::optional<E> parsed = parse_choice<E>(name);
    if (parsed) out = *parsed;
    return parsed.has_value();
  }
  // A string or an array of strings.
  void get_paths(const std::string& sec, const std::string& key, std::vector<std::string>& out);

  // Records "<origin>: [sec] key = <value> <what>" unless ok. Problems are
  // collected, not thrown, so finish() can report an unknown key (usually a
  // typo, and the real cause) ahead of what the typo made look missing.
  void require(bool ok, const std::string& sec, const std::string& key, const std::string& what);
  void fail(const std::string& sec, const std::string& key, const std::string& what);
  // Throws InputError: unknown sections/keys first, then the first problem.
  void finish() const;
  const std::vector<DeckKey>& keys_read() const { return keys_read_; }

 private:
  const toml::node* lookup(const std::string& sec, const std::string& key);
  void type_error(const std::string& sec, const std::string& key, const toml::node& n,
                  const char* expected);
  void check_unknown_keys() const;
  void record(std::string message);
  void note(const std::string& sec, const std::string& key, const char* type, std::string value);
  void note_choices(const std::string& sec, const std::string& key, std::vector<std::string> names);
  std::vector<DeckKey> keys_read_;  // every key read, with the value it had before
  const toml::table& root_;
  std::string origin_;
  std::map<std::string, std::set<std::string>> known_;
  std::map<std::string, std::string> shown_;  // "sec.key" -> value as written
  std::string first_problem_;
};

}  // namespace trident
