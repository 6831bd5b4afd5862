// How a kilnctl command is told a key: as JSON (--key FILE, '-' for stdin), as field
// flags (--kind --model-hash --region --dtype --input SPEC ... ; node fields optional,
// filled by the daemon), or, where one stored artifact is meant, by --digest HEX.
// Flags override the fields of a --key file. No I/O except reading --key FILE.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiln/client/client.hpp"
#include "kiln/key.hpp"
#include "kiln/result.hpp"

namespace kiln::ctl {

struct KeyFlags {
  std::string key_file;                       // --key
  std::string digest;                         // --digest
  std::map<std::string, std::string> fields;  // field name -> value, as given by flags
  std::vector<std::string> inputs;            // --input, in order

  bool any_key_given() const { return !key_file.empty() || !fields.empty() || !inputs.empty(); }
};

enum class DigestFlag { allowed, not_allowed };

// Adds the key options to `app`, storing into `flags` (which must outlive parsing).
void add_key_flags(CLI::App& app, KeyFlags& flags, DigestFlag digest);

// The key the flags describe (node fields may stay empty). invalid_argument naming the
// missing flags ("missing key fields: --model-hash, --region (or give --key FILE)") or
// the bad value. `stdin_stream` is read for --key -.
Result<Key> key_from_flags(const KeyFlags& flags, std::istream& stdin_stream);
// Finds the one stored key digest starting with a prefix (what `ls` shows is 12 of the 64
// hex digits). not_found when none matches; invalid_argument naming the candidates when
// several do.
using PrefixResolver = std::function<Result<Digest>(std::string_view prefix)>;

// A key or --digest (exactly one of them). A --digest of 4 to 63 hex digits is a prefix,
// resolved through `resolve` (invalid_argument when none is given).
Result<client::Lookup> lookup_from_flags(const KeyFlags& flags, std::istream& stdin_stream,
                                         const PrefixResolver& resolve = {});

// The resolver kilnctl's commands use: lists the daemon's artifacts through `client`.
Result<Digest> resolve_digest_prefix(client::Client& client, std::string_view prefix);

// The node fields of kiln's key (may be filled by the daemon).
bool is_node_field(const std::string& name);

}  // namespace kiln::ctl
