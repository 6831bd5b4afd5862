// The one reader of options in kiln's TOML files. See kiln/toml/options.hpp.
#include "kiln/toml/options.hpp"

#include <fstream>
#include <sstream>

#include "kiln/size.hpp"

namespace kiln::toml_options {

Result<toml::table> parse(std::string_view text, std::string_view origin) {
  try {  // toml++ reports syntax errors as exceptions; they stop here
    return toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    const auto& pos = e.source().begin;
    return make_error(Errc::invalid_argument, std::string(origin) + ":" + std::to_string(pos.line) + ":" +
                                                  std::to_string(pos.column) + ": not valid TOML: " +
                                                  std::string(e.description()));
  }
}

Result<std::string> read_text(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return make_error(Errc::io_error, "cannot read " + file.string());
  std::ostringstream os;
  os << in.rdbuf();
  return std::move(os).str();
}

Error Document::error(const toml::node* at, std::string_view name, std::string_view why) const {
  std::string where = origin_;
  if (style_.positions && at != nullptr && at->source().begin.line != 0) {
    where += ":" + std::to_string(at->source().begin.line) + ":" + std::to_string(at->source().begin.column);
  }
  return make_error(Errc::invalid_argument, where + ": " + std::string(name) + ": " + std::string(why));
}

Table Document::table(const toml::table& t, std::string name) const { return Table(*this, t, std::move(name)); }

std::string Table::name(std::string_view key) const {
  return name_.empty() ? std::string(key) : name_ + "." + std::string(key);
}

Error Table::error(std::string_view key, std::string_view why) const {
  const toml::node* at = get(key);
  return doc_->error(at ? at : t_, name(key), why);
}

Status Table::only(std::initializer_list<std::string_view> known) const {
  for (const auto& [k, v] : *t_) {
    bool ok = false;
    for (auto name : known) ok = ok || k.str() == name;
    if (ok) continue;
    std::string list;
    for (auto name : known) list += (list.empty() ? "" : ", ") + std::string(name);
    return doc_->error(&v, name(k.str()), "unknown " + std::string(doc_->style().noun) + " (known here: " + list + ")");
  }
  return {};
}

Result<std::optional<Table>> Table::table(std::string_view key) const {
  const toml::node* n = get(key);
  if (n == nullptr) return std::optional<Table>();
  if (!n->is_table()) return error(key, "expected a table [" + name(key) + "]");
  return std::optional<Table>(Table(*doc_, *n->as_table(), name(key)));
}

Status Table::section(std::string_view key, const std::function<Status(const Table&)>& read) const {
  auto t = table(key);
  if (!t) return std::move(t).error();
  if (!*t) return {};
  return read(**t);
}

Status read_section(std::string_view text, std::string_view origin, std::string_view section,
                    const std::function<Status(const Table&)>& read) {
  auto root = parse(text, origin);
  if (!root) return std::move(root).error();
  const Document doc{std::string(origin)};
  return doc.table(*root).section(section, read);
}

Status Table::string(std::string_view key, std::string& out, Empty empty) const {
  const toml::node* n = get(key);
  if (n == nullptr) return {};
  if (!n->is_string()) return error(key, "expected a string");
  std::string v = *n->value<std::string>();
  if (v.empty() && empty == Empty::refused) return error(key, "must not be empty");
  out = std::move(v);
  return {};
}

Result<std::string> Table::required_string(std::string_view key) const {
  if (!has(key)) return error(key, "required, a non-empty string");
  std::string out;
  KILN_TRY(string(key, out, Empty::refused));
  return out;
}

Status Table::boolean(std::string_view key, bool& out) const {
  const toml::node* n = get(key);
  if (n == nullptr) return {};
  if (!n->is_boolean()) return error(key, "expected true or false");
  out = *n->value<bool>();
  return {};
}

Status Table::path(std::string_view key, std::filesystem::path& out) const {
  std::string s;
  KILN_TRY(string(key, s));
  if (!s.empty()) out = s;
  return {};
}

Status Table::integer(std::string_view key, std::int64_t& out, std::int64_t lo, std::int64_t hi) const {
  const toml::node* n = get(key);
  if (n == nullptr) return {};
  auto v = n->value_exact<std::int64_t>();
  if (!v || *v < lo || *v > hi) {
    return error(key, "expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
  }
  out = *v;
  return {};
}

Status Table::number(std::string_view key, double& out, double lo, double hi) const {
  const toml::node* n = get(key);
  if (n == nullptr) return {};
  std::optional<double> v;
  if (auto i = n->value_exact<std::int64_t>()) v = static_cast<double>(*i);
  else if (auto d = n->value_exact<double>()) v = *d;
  if (!v || !(*v >= lo && *v <= hi)) {
    std::ostringstream os;
    os << "expected a number from " << lo << " to " << hi;
    return error(key, os.str());
  }
  out = *v;
  return {};
}

Status Table::size(std::string_view key, std::uint64_t& out) const {
  const toml::node* n = get(key);
  if (n == nullptr) return {};
  if (auto i = n->value_exact<std::int64_t>()) {
    if (*i < 0) return error(key, "must not be negative");
    out = static_cast<std::uint64_t>(*i);
  } else if (auto s = n->value_exact<std::string>()) {
    auto r = parse_size(*s);
    if (!r) return error(key, r.error().message);
    out = *r;
  } else {
    return error(key, "expected a size: bytes or a string like \"2GiB\"");
  }
  return {};
}

Status Table::seconds(std::string_view key, std::chrono::milliseconds& out) const {
  const toml::node* n = get(key);
  if (n == nullptr) return {};
  std::optional<double> v;
  if (auto i = n->value_exact<std::int64_t>()) v = static_cast<double>(*i);
  else if (auto d = n->value_exact<double>()) v = *d;
  if (!v || !(*v > 0 && *v <= 86400.0 * 365)) return error(key, "expected a positive number of seconds");
  out = std::chrono::milliseconds(static_cast<std::int64_t>(*v * 1000.0));
  return {};
}

Status Table::strings(std::string_view key, std::vector<std::string>& out, const ListRules& rules) const {
  const toml::node* n = get(key);
  if (n == nullptr) return {};
  std::vector<std::string> v;
  if (rules.one_string && n->is_string()) {
    v.push_back(*n->value<std::string>());
    if (rules.non_empty && v.back().empty()) return error(key, "must not be empty");
  } else if (const toml::array* a = n->as_array()) {
    for (std::size_t i = 0; i < a->size(); ++i) {
      const toml::node& e = (*a)[i];
      const std::string at = name(key) + "[" + std::to_string(i) + "]";
      if (auto s = e.value_exact<std::string>()) v.push_back(*s);
      else if (auto id = e.value_exact<std::int64_t>(); id && rules.numbers) v.push_back(std::to_string(*id));
      else return doc_->error(&e, at, rules.numbers ? "expected a string or an integer" : "expected a string");
      if (rules.non_empty && v.back().empty()) return doc_->error(&e, at, "must not be empty");
    }
  } else {
    return error(key, "expected " + std::string(rules.expected));
  }
  if (rules.non_empty && v.empty()) return error(key, "must not be an empty list; expected " + std::string(rules.expected));
  out = std::move(v);
  return {};
}

}  // namespace kiln::toml_options
