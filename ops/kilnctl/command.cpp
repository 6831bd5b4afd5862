#include "kilnctl/command.hpp"

#include <nlohmann/json.hpp>
#include <ostream>

#include "kilnctl/exit_codes.hpp"
#include "kilnctl/key_flags.hpp"

namespace kiln::ctl {

Result<client::Client> Context::connect(client::Transfer transfer) const {
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

CLI::App* CommandSet::add(const std::string& name, const std::string& description, Action action) {
  CLI::App* sub = root_.add_subcommand(name, description);
  sub->add_flag("--json", context_.json, "Print one JSON document on stdout");
  sub->add_option("--socket", context_.socket, "kilnd's socket (default: $KILN_SOCKET, else the user's kilnd, else the system's)");
  sub->footer(exit_code_help());
  commands_.emplace_back(sub, std::move(action));
  return sub;
}

const Action* CommandSet::chosen() const {
  for (const auto& [sub, action] : commands_)
    if (sub->parsed()) return &action;
  return nullptr;
}

}  // namespace kiln::ctl
