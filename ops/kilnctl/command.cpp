#include "kilnctl/command.hpp"

#include <sys/stat.h>

#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <ostream>

#include "kilnctl/exit_codes.hpp"
#include "kilnctl/key_flags.hpp"

namespace kiln::ctl {

namespace {

// A path that exists and is no socket (a folder, a regular file) is a mistake in the
// command line, not a kilnd that is down: say so instead of "Connection refused".
Status check_socket_path(const std::string& path, const char* origin) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0 || S_ISSOCK(st.st_mode)) return {};
  const char* what = S_ISDIR(st.st_mode) ? "a directory" : S_ISREG(st.st_mode) ? "a regular file" : "not a socket";
  return make_error(Errc::invalid_argument, std::string(origin) + " " + path + " is " + what +
                                                ", not kilnd's socket (kilnd's is kiln.sock in its runtime folder, "
                                                "e.g. /run/kiln/kiln.sock)");
}

}  // namespace

Result<client::Client> Context::connect(client::Transfer transfer) const {
  if (!socket.empty()) {
    KILN_TRY(check_socket_path(socket, "--socket"));
  } else if (const char* env = std::getenv("KILN_SOCKET"); env != nullptr) {
    KILN_TRY(check_socket_path(env, "$KILN_SOCKET"));
  }
  client::ConnectOptions options;
  options.socket = socket;
  options.transfer = transfer;
  return client::Client::connect(options);
}

Result<Digest> Context::resolve_prefix(std::string_view prefix) const {
  auto client = connect();
  if (!client) return std::move(client).error();
  return resolve_digest_prefix(*client, prefix);
}

Result<Context::Stated> Context::stat(const KeyFlags& flags) const {
  auto what = lookup_from_flags(flags, std::cin, [this](std::string_view p) { return resolve_prefix(p); });
  if (!what) return std::move(what).error();
  auto client = connect();
  if (!client) return std::move(client).error();
  auto info = client->stat(*what);
  if (!info) return std::move(info).error();
  if (!*info) return make_error(Errc::not_found, "no artifact stored under that key");
  return Stated{std::move(*client), std::move(**info)};
}

int Context::fail(const Error& error) const {
  err << "kilnctl: " << errc_name(error.code) << ": " << error.message << "\n";
  if (json) {
    nlohmann::json j;
    // The exit code, not kiln's internal error number: the number a script reads as
    // "what happened" must be the one the shell sees.
    j["error"] = {{"name", std::string(errc_name(error.code))},
                  {"exit_code", exit_code_for(error.code)},
                  {"message", error.message}};
    out << j.dump() << "\n";
  }
  return exit_code_for(error.code);
}

void add_common_options(CLI::App& app, Context& context) {
  app.add_flag("--json", context.json, "Print one JSON document on stdout");
  app.add_option("--socket", context.socket, "kilnd's socket (default: see kilnctl --help)");
}

CLI::App* CommandSet::add(const std::string& name, const std::string& description, Action action) {
  CLI::App* sub = root_.add_subcommand(name, description);
  add_common_options(*sub, context_);
  // The exit codes and how the socket is found are kilnctl's, said once in `kilnctl --help`.
  sub->footer("Exit codes, the socket's default and --json errors: kilnctl --help");
  commands_.emplace_back(sub, std::move(action));
  return sub;
}

const Action* CommandSet::chosen() const {
  for (const auto& [sub, action] : commands_)
    if (sub->parsed()) return &action;
  return nullptr;
}

}  // namespace kiln::ctl
