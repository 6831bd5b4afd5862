// What every kilnctl command gets: the shared options, output streams, and a way to
// connect; and CommandSet, through which a command file adds its subcommand.
//
// Adding a command: write commands/<name>.cpp defining `void add_<name>(CommandSet&)`,
// add one line to commands/commands.def and the file to CMakeLists.txt.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "kiln/client/client.hpp"
#include "kiln/result.hpp"

namespace kiln::ctl {

struct KeyFlags;  // key_flags.hpp

struct Context {
  std::ostream& out;   // human or JSON output
  std::ostream& err;   // diagnostics
  int data_fd = 1;     // where `get` writes artifact bytes when not told a file
  bool json = false;   // --json
  std::string socket;  // --socket ("" = KILN_SOCKET or the default)

  Result<client::Client> connect(client::Transfer transfer = client::Transfer::descriptor) const;
  // Resolves a --digest prefix against the daemon (its own connection; see key_flags.hpp).
  Result<Digest> resolve_prefix(std::string_view prefix) const;
  // The artifact `flags` name (a key, or --digest and its prefixes), looked up without
  // counting a hit, and the connection that found it: not_found when none is stored.
  struct Stated;
  Result<Stated> stat(const KeyFlags& flags) const;
  // Reports `error` ("kilnctl: <name>: <message>" on err; with --json also a JSON error
  // document on out) and returns its exit code.
  int fail(const Error& error) const;
  int usage(const std::string& message) const { return fail(make_error(Errc::invalid_argument, message)); }
};

struct Context::Stated {
  client::Client client;
  client::ArtifactInfo info;
};

using Action = std::function<int()>;

// The options every command takes, --json and --socket, on `app` (a command, or a
// subcommand such as `source add`, so that they may also come after it).
void add_common_options(CLI::App& app, Context& context);

class CommandSet {
 public:
  CommandSet(CLI::App& root, Context& context) : root_(root), context_(context) {}

  // Adds subcommand `name` with the shared --json and --socket options; `action` runs
  // when it is the one chosen, after its options are parsed.
  CLI::App* add(const std::string& name, const std::string& description, Action action);
  Context& context() { return context_; }

  // The action of the subcommand the parsed command line chose, or null.
  const Action* chosen() const;

 private:
  CLI::App& root_;
  Context& context_;
  std::vector<std::pair<CLI::App*, Action>> commands_;
};

}  // namespace kiln::ctl
