#include "kilnctl/key_flags.hpp"

#include <fstream>
#include <sstream>

#include "kiln/client/key_text.hpp"
#include "kilnctl/output.hpp"

namespace kiln::ctl {

namespace {

std::string flag_name(std::string_view field) {
  std::string out = "--";
  for (char c : field) out += c == '_' ? '-' : c;
  return out;
}

const char* field_help(std::string_view field) {
  if (field == "kind") return "Artifact kind: aoti, megacache or torch_cache";
  if (field == "model_hash") return "64 hex: the block's exported graph (not its weights)";
  if (field == "region") return "Block class name (e.g. FluxSingleTransformerBlock) or 'full'";
  if (field == "dtype") return "Compute dtype, e.g. bfloat16";
  if (field == "compile_options") return "Inductor configs and mode as a JSON object (default {})";
  if (field == "call")
    return "How the block is called, as JSON (schema/key.md), e.g. {\"args\":[{\"tensor\":0}],\"kwargs\":{}}; "
           "default: every input positional";
  return "Node field; default: the daemon's node";
}

Result<std::string> read_key_file(const std::string& path, std::istream& stdin_stream) {
  if (path == "-") return read_stream(stdin_stream);
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(Errc::invalid_argument, "cannot read key file '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

bool is_node_field(const std::string& name) {
  NodeFields probe;
  return node_field(probe, name) != nullptr;
}

void add_key_flags(CLI::App& app, KeyFlags& flags, DigestFlag digest) {
  app.add_option("--key", flags.key_file, "Key as JSON (schema/key.md) from FILE, or - for stdin")
      ->option_text("FILE")
      ->group("Key");
  if (digest == DigestFlag::allowed)
    app.add_option("--digest", flags.digest,
                   "A stored artifact's key digest instead of a key: all 64 hex digits, or a unique prefix "
                   "of at least 4 (as `ls` shows)")
        ->option_text("HEX")
        ->group("Key");
  for (std::string_view field : client::settable_key_fields()) {
    std::string name(field);
    app.add_option_function<std::string>(
           flag_name(field), [&flags, name](const std::string& value) { flags.fields[name] = value; },
           field_help(field))
        ->group(is_node_field(name) ? "Key node fields" : "Key");
  }
  app.add_option("--input", flags.inputs,
                 "An input, in call order (repeat): DTYPE:DIMS[:LAYOUT], e.g. bfloat16:1x4096x3072, "
                 "float32:1..64x3072 (dynamic), int64:scalar")
      ->option_text("SPEC")
      ->group("Key");
}

Result<Key> key_from_flags(const KeyFlags& flags, std::istream& stdin_stream) {
  Key key;
  if (!flags.key_file.empty()) {
    auto text = read_key_file(flags.key_file, stdin_stream);
    if (!text) return std::move(text).error();
    auto parsed = Key::from_json(*text);
    if (!parsed)
      return make_error(Errc::invalid_argument, "key file '" + flags.key_file + "': " + parsed.error().message);
    key = std::move(*parsed);
  }
  for (const auto& [name, value] : flags.fields) {
    if (auto st = client::set_key_field(key, name, value); !st)
      return make_error(Errc::invalid_argument, flag_name(name) + ": " + st.error().message);
  }
  if (!flags.inputs.empty()) {
    key.inputs.clear();
    for (const auto& spec : flags.inputs) {
      auto t = client::parse_tensor_spec(spec);
      if (!t) return make_error(Errc::invalid_argument, "--input: " + t.error().message);
      key.inputs.push_back(std::move(*t));
    }
  }
  if (flags.key_file.empty()) {
    // Without a key file every non-node field must be given: a default would be a guess,
    // and a wrong field is a false hit.
    std::vector<std::string> missing;
    for (const char* required : {"kind", "model_hash", "region", "dtype"})
      if (!flags.fields.count(required)) missing.push_back(flag_name(required));
    if (flags.inputs.empty()) missing.push_back("--input");
    if (!missing.empty()) {
      std::string list;
      for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
      return make_error(Errc::invalid_argument, "missing key fields: " + list + " (or give the key as --key FILE)");
    }
  }
  // A bad value from a flag is named by the flag the user typed ("--model-hash 'abc': ..."),
  // not by the key's field path the daemon would report. Node fields left to the node are
  // no error yet: checked with stand-ins for them.
  Key checked = key;
  fill_node_fields(checked, NodeFields{"sm_90", "gpu", "0", "0", "0", "0", "linux", "x86_64", "any"});
  if (auto encoded = checked.canonical_encoding(); !encoded) {
    const std::string& message = encoded.error().message;
    for (const auto& [name, value] : flags.fields) {
      const std::string path = "key." + name + ": ";
      if (message.rfind(path, 0) == 0)
        return make_error(Errc::invalid_argument, flag_name(name) + " '" + value + "': " + message.substr(path.size()));
    }
  }
  return key;
}

Result<Digest> resolve_digest_prefix(client::Client& client, std::string_view prefix) {
  std::vector<Digest> matches;
  client::ListQuery q;
  q.limit = 10000;
  for (;;) {
    auto page = client.list(q);
    if (!page) return std::move(page).error();
    for (const auto& e : page->entries)
      if (e.key_digest.hex().compare(0, prefix.size(), prefix) == 0) matches.push_back(e.key_digest);
    if (!page->next_offset) break;
    q.offset = *page->next_offset;
  }
  if (matches.empty())
    return make_error(Errc::not_found, "no stored artifact's key digest starts with " + std::string(prefix));
  if (matches.size() > 1) {
    std::string list;
    for (std::size_t i = 0; i < matches.size() && i < 5; ++i) list += (i ? ", " : "") + matches[i].hex().substr(0, 16);
    if (matches.size() > 5) list += ", ...";
    return make_error(Errc::invalid_argument, "--digest " + std::string(prefix) + " is ambiguous: " +
                                                  std::to_string(matches.size()) + " stored artifacts start with it (" +
                                                  list + "); give more digits");
  }
  return matches.front();
}

Result<client::Lookup> lookup_from_flags(const KeyFlags& flags, std::istream& stdin_stream,
                                         const PrefixResolver& resolve) {
  if (!flags.digest.empty()) {
    if (flags.any_key_given())
      return make_error(Errc::invalid_argument, "give either --digest or a key (--key / field flags), not both");
    const bool hex = flags.digest.find_first_not_of("0123456789abcdef") == std::string::npos;
    if (hex && flags.digest.size() >= 4 && flags.digest.size() < 64) {
      if (!resolve) return make_error(Errc::invalid_argument, "--digest: a prefix needs the daemon's list of artifacts");
      auto d = resolve(flags.digest);
      if (!d) return std::move(d).error();
      return client::Lookup(*d);
    }
    auto d = Digest::from_hex(flags.digest);
    if (!d)
      return make_error(Errc::invalid_argument, "--digest '" + flags.digest +
                                                    "': give all 64 lowercase hex digits of a key digest, or a unique "
                                                    "prefix of 4 or more (as `kilnctl ls` shows)");
    return client::Lookup(*d);
  }
  if (!flags.any_key_given())
    return make_error(Errc::invalid_argument,
                      "no key given: use --digest HEX, --key FILE, or --kind --model-hash --region --dtype --input");
  auto key = key_from_flags(flags, stdin_stream);
  if (!key) return std::move(key).error();
  return client::Lookup(std::move(*key));
}

}  // namespace kiln::ctl
