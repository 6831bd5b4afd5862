// kiln/toml/options.hpp — the one reader of options in kiln's TOML files: kilnd.toml (its own
// sections, [builds] and [fleet]) and prewarm manifests. Internal, not installed.
//
// A Table is a view of one TOML table at a dotted name inside a Document ("" = the root,
// "builds", "build[2].signature[0]"). Its getters share one contract:
//   - the key is absent: `out` is left alone (it holds the default) and the result is ok;
//   - the value has the expected type and range: it is stored in `out`;
//   - otherwise: invalid_argument "<origin>: <name>.<key>: expected ...", `out` left alone.
// A Document's Style chooses what errors look like: kilnd.toml speaks of options and gives no
// positions ("kilnd.toml: builds.wroker: unknown option (known here: ...)"); a manifest speaks
// of fields and says where ("m.toml:13:1: build[0].dtypes: unknown field (known here: ...)").
//
// Views borrow: a Table refers to its Document and its toml::table, which must outlive it.
// Nothing here throws: toml++'s parse errors stop in parse().
#pragma once

#include <toml++/toml.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/result.hpp"

namespace kiln::toml_options {

// Parses `text`. A syntax error is invalid_argument "<origin>:<line>:<col>: <what>".
[[nodiscard]] Result<toml::table> parse(std::string_view text, std::string_view origin);

// The whole of `file`; io_error "cannot read <file>" when it cannot be opened.
[[nodiscard]] Result<std::string> read_text(const std::filesystem::path& file);

struct Style {
  std::string_view noun = "option";  // "unknown option" (kilnd.toml), "unknown field" (manifests)
  bool positions = false;            // "<origin>:<line>:<col>:" before the name
};

class Table;

enum class Empty { allowed, refused };

// Where options come from (a file name, or "kilnd.toml" for text) and how errors about them read.
class Document {
 public:
  explicit Document(std::string origin, Style style = {}) : origin_(std::move(origin)), style_(style) {}

  const std::string& origin() const { return origin_; }
  const Style& style() const { return style_; }
  // invalid_argument "<origin>[:<line>:<col>]: <name>: <why>", the position being `at`'s
  // (none when `at` is null or has no source position, or the style gives none).
  Error error(const toml::node* at, std::string_view name, std::string_view why) const;
  // A view of `t`, a table of this document, under the dotted `name` ("" for the root).
  Table table(const toml::table& t, std::string name = {}) const;

 private:
  std::string origin_;
  Style style_;
};

// What a list of strings may be, for Table::strings.
struct ListRules {
  std::string_view expected;    // completes "expected ..." when the value is no list, e.g. "an array of etcd endpoints"
  bool one_string = false;      // a lone string is a list of one (manifests: dtype = "bfloat16")
  bool numbers = false;         // integers are taken as their decimal text (user and group ids)
  bool non_empty = false;       // an empty list, or an empty string in it, is an error
};

// Parses `text` (as parse() does) and runs `read` on its [section] when it has one: how
// each reader of one section of kilnd.toml ([builds], [fleet]) starts.
[[nodiscard]] Status read_section(std::string_view text, std::string_view origin, std::string_view section,
                                  const std::function<Status(const Table&)>& read);

class Table {
 public:
  Table(const Document& doc, const toml::table& t, std::string name) : doc_(&doc), t_(&t), name_(std::move(name)) {}

  const toml::table& raw() const { return *t_; }
  const Document& document() const { return *doc_; }
  // "builds.worker" for `key` "worker" in [builds]; "worker" in the root.
  std::string name(std::string_view key) const;
  // The value of `key`, or null.
  const toml::node* get(std::string_view key) const { return t_->get(key); }
  bool has(std::string_view key) const { return t_->get(key) != nullptr; }

  // An error about `key` of this table, placed at its value (or at this table when absent).
  Error error(std::string_view key, std::string_view why) const;

  // Every key of this table is one of `known`; otherwise an error at the first one that is
  // not: "<name>: unknown <noun> (known here: a, b, ...)".
  Status only(std::initializer_list<std::string_view> known) const;

  // [key] (or key = { ... }): nullopt when absent; an error when it is not a table.
  Result<std::optional<Table>> table(std::string_view key) const;
  // Runs `read` on [key] when it is there; an error when it is not a table.
  Status section(std::string_view key, const std::function<Status(const Table&)>& read) const;

  // A string; with Empty::refused, "" is an error too (manifests: a field given is never empty).
  Status string(std::string_view key, std::string& out, Empty empty = Empty::allowed) const;
  // A string that must be there and must not be empty: "<name>: required, a non-empty string".
  Result<std::string> required_string(std::string_view key) const;
  Status boolean(std::string_view key, bool& out) const;
  // A path; an empty string leaves `out` alone (the default stands).
  Status path(std::string_view key, std::filesystem::path& out) const;
  // An integer from lo to hi (a float such as 3.0 is not one).
  Status integer(std::string_view key, std::int64_t& out, std::int64_t lo, std::int64_t hi) const;
  template <class T>
  Status integer(std::string_view key, T& out, std::int64_t lo, std::int64_t hi) const {
    std::int64_t v = 0;
    if (!has(key)) return {};
    KILN_TRY(integer(key, v, lo, hi));
    out = static_cast<T>(v);
    return {};
  }
  // A number (integer or float) from lo to hi.
  Status number(std::string_view key, double& out, double lo, double hi) const;
  // Bytes: an integer >= 0 or a string in kiln/size.hpp's form ("2GiB", "100MB").
  Status size(std::string_view key, std::uint64_t& out) const;
  // A whole number of `Unit`s from lo to hi, stored as `out`'s duration type:
  // duration("build_timeout_s", ms, seconds{1}, seconds{3600}) reads "build_timeout_s = 60".
  template <class Unit, class Out>
  Status duration(std::string_view key, Out& out, Unit lo, Unit hi) const {
    std::int64_t v = 0;
    if (!has(key)) return {};
    KILN_TRY(integer(key, v, lo.count(), hi.count()));
    out = std::chrono::duration_cast<Out>(Unit(v));
    return {};
  }
  // Seconds, fractions allowed ("idle_timeout_s = 1.5"), more than 0 and at most a year.
  Status seconds(std::string_view key, std::chrono::milliseconds& out) const;
  // A list of strings under `rules`; an element of the wrong kind is named by its index
  // ("builds.worker[1]: expected a string").
  Status strings(std::string_view key, std::vector<std::string>& out, const ListRules& rules) const;

 private:
  const Document* doc_;
  const toml::table* t_;
  std::string name_;
};

}  // namespace kiln::toml_options
