#include "io/deck_reader.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "core/error.hpp"

namespace trident {
namespace {

std::string show(const toml::node& n) {
  std::ostringstream os;
  if (n.is_string()) os << '"' << n.as_string()->get() << '"';
  else if (n.is_array()) os << *n.as_array();
  else if (n.is_table()) os << "{...}";
  else n.visit([&](const auto& v) { os << v; });
  return os.str();
}

int edit_distance(const std::string& a, const std::string& b) {
  std::vector<int> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = int(j);
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = int(i);
    for (std::size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

template <class Names>
std::string suggestion(const std::string& word, const Names& names) {
  std::string best;
  int best_d = 3;  // suggest only near misses
  for (const auto& n : names) {
    const int d = edit_distance(word, n);
    if (d < best_d) best_d = d, best = n;
  }
  return best;
}

}  // namespace

std::string closest_name(const std::string& word, const std::vector<std::string>& names) {
  return suggestion(word, names);
}

const toml::node* DeckReader::lookup(const std::string& sec, const std::string& key) {
  known_[sec].insert(key);
  const toml::node* s = root_.get(sec);
  if (!s || !s->is_table()) return nullptr;
  const toml::node* n = s->as_table()->get(key);
  if (n) shown_[sec + "." + key] = show(*n);
  return n;
}

void DeckReader::note(const std::string& sec, const std::string& key, const char* type,
                      std::string value) {
  for (const DeckKey& k : keys_read_)
    if (k.section == sec && k.key == key) return;
  keys_read_.push_back({sec, key, type, std::move(value), {}});
}

void DeckReader::note_choices(const std::string& sec, const std::string& key,
                              std::vector<std::string> names) {
  for (DeckKey& k : keys_read_)
    if (k.section == sec && k.key == key) k.choices = std::move(names);
}

void DeckReader::record(std::string message) {
  if (first_problem_.empty()) first_problem_ = std::move(message);
}

void DeckReader::type_error(const std::string& sec, const std::string& key, const toml::node& n,
                            const char* expected) {
  record(fmt::format("{}: [{}] {} = {} must be {}", origin_, sec, key, show(n), expected));
}

void DeckReader::finish() const {
  check_unknown_keys();
  if (!first_problem_.empty()) throw InputError(first_problem_);
}

void DeckReader::get(const std::string& sec, const std::string& key, int& out) {
  note(sec, key, "integer", fmt::format("{}", out));
  const toml::node* n = lookup(sec, key);
  if (!n) return;
  if (!n->is_integer()) return type_error(sec, key, *n, "an integer");
  const std::int64_t v = n->as_integer()->get();
  if (v < INT32_MIN || v > INT32_MAX) return type_error(sec, key, *n, "a 32-bit integer");
  out = static_cast<int>(v);
}

void DeckReader::get(const std::string& sec, const std::string& key, double& out) {
  note(sec, key, "number", fmt::format("{}", out));
  const toml::node* n = lookup(sec, key);
  if (!n) return;
  if (n->is_integer()) out = double(n->as_integer()->get());
  else if (n->is_floating_point()) out = n->as_floating_point()->get();
  else type_error(sec, key, *n, "a number");
}

void DeckReader::get(const std::string& sec, const std::string& key, std::uint64_t& out) {
  note(sec, key, "non-negative integer", fmt::format("{}", out));
  const toml::node* n = lookup(sec, key);
  if (!n) return;
  if (!n->is_integer() || n->as_integer()->get() < 0)
    return type_error(sec, key, *n, "a non-negative integer");
  out = static_cast<std::uint64_t>(n->as_integer()->get());
}

void DeckReader::get(const std::string& sec, const std::string& key, std::string& out) {
  note(sec, key, "string", "\"" + out + "\"");
  const toml::node* n = lookup(sec, key);
  if (!n) return;
  if (!n->is_string()) return type_error(sec, key, *n, "a string (in double quotes)");
  out = n->as_string()->get();
}

void DeckReader::get(const std::string& sec, const std::string& key, std::int64_t& out) {
  note(sec, key, "integer", fmt::format("{}", out));
  const toml::node* n = lookup(sec, key);
  if (!n) return;
  if (!n->is_integer()) return type_error(sec, key, *n, "an integer");
  out = n->as_integer()->get();
}

void DeckReader::get(const std::string& sec, const std::string& key, bool& out) {
  note(sec, key, "boolean", out ? "true" : "false");
  const toml::node* n = lookup(sec, key);
  if (!n) return;
  if (!n->is_boolean()) return type_error(sec, key, *n, "true or false");
  out = n->as_boolean()->get();
}

void DeckReader::get_paths(const std::string& sec, const std::string& key,
                           std::vector<std::string>& out) {
  note(sec, key, "path, glob or array of them",
       out.empty() ? "none" : fmt::format("{}", fmt::join(out, ", ")));
  const toml::node* n = lookup(sec, key);
  if (!n) return;
  out.clear();
  if (n->is_string()) {
    out.push_back(n->as_string()->get());
    return;
  }
  if (n->is_array()) {
    for (const toml::node& e : *n->as_array()) {
      if (!e.is_string()) return type_error(sec, key, *n, "a path or an array of paths (strings)");
      out.push_back(e.as_string()->get());
    }
    return;
  }
  type_error(sec, key, *n, "a path or an array of paths (strings)");
}

void DeckReader::fail(const std::string& sec, const std::string& key, const std::string& what) {
  auto it = shown_.find(sec + "." + key);
  const bool has_value = what.rfind("= ", 0) != 0 && it != shown_.end();
  record(fmt::format("{}: [{}] {}{} {}", origin_, sec, key, has_value ? " = " + it->second : "",
                     what));
}

void DeckReader::require(bool ok, const std::string& sec, const std::string& key,
                         const std::string& what) {
  if (!ok) fail(sec, key, what);
}

void DeckReader::check_unknown_keys() const {
  std::vector<std::string> sections;
  for (const auto& [s, _] : known_) sections.push_back(s);
  for (const auto& [name, node] : root_) {
    const std::string sec(name.str());
    if (!node.is_table()) {
      throw InputError(fmt::format("{}: top-level key '{}' must be inside a section such as "
                                   "[train]", origin_, sec));
    }
    auto it = known_.find(sec);
    if (it == known_.end()) {
      const std::string s = suggestion(sec, sections);
      throw InputError(fmt::format("{}: unknown section [{}]{}; known sections: {}", origin_, sec,
                                   s.empty() ? "" : "; did you mean [" + s + "]?",
                                   fmt::join(sections, ", ")));
    }
    for (const auto& [k, _] : *node.as_table()) {
      const std::string key(k.str());
      if (it->second.count(key)) continue;
      const std::string s = suggestion(key, it->second);
      throw InputError(fmt::format("{}: unknown key '{}' in [{}]{}; known keys: {}", origin_, key,
                                   sec, s.empty() ? "" : "; did you mean '" + s + "'?",
                                   fmt::join(it->second, ", ")));
    }
  }
}

}  // namespace trident
