#include "kilnctl/cli.hpp"

#include <algorithm>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "kiln/protocol/frame.hpp"

#include "kilnctl/command.hpp"
#include "kilnctl/commands/commands.hpp"
#include "kilnctl/exit_codes.hpp"

namespace kiln::ctl {

namespace {

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The first word that is not an option (nor --socket's value) must name a command. CLI11
// alone reports a mistyped one as "A subcommand is required". Empty when all is well.
std::string unknown_command(const CLI::App& app, int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--socket") {
      ++i;
      continue;
    }
    if (word.empty() || word[0] == '-') continue;
    std::string nearest;
    std::size_t best = 3;  // suggest only close spellings
    for (const CLI::App* sub : app.get_subcommands({})) {
      if (sub->get_name() == word) return {};
      const std::size_t d = edit_distance(word, sub->get_name());
      if (d < best) best = d, nearest = sub->get_name();
    }
    return "unknown command '" + word + "'" + (nearest.empty() ? "" : "; did you mean '" + nearest + "'?");
  }
  return {};
}

}  // namespace

int run(int argc, const char* const* argv, const Io& io) {
  try {
    Context context{io.out, io.err, io.data_fd, false, {}};
    CLI::App app{"kilnctl: inspect and drive the node's kiln artifact cache (kilnd)", "kilnctl"};
    app.require_subcommand(1);
    app.footer(exit_code_help());
    app.add_flag("--json", context.json, "Print one JSON document on stdout");
    app.add_option("--socket", context.socket, "kilnd's socket (default: $KILN_SOCKET, else the user's kilnd, else the system's)");
    app.set_version_flag("--version", "kilnctl " KILN_VERSION " (protocol " + std::to_string(protocol::kVersion) + ")");
    CommandSet set(app, context);
    for (const auto& entry : command_table()) entry.add(set);
    if (auto unknown = unknown_command(app, argc, argv); !unknown.empty()) {
      io.err << "kilnctl: " << unknown << "\n(run 'kilnctl --help' for the list of commands)\n";
      return kExitUsage;
    }
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
      return app.exit(e, io.out, io.err);
    } catch (const CLI::CallForAllHelp& e) {
      return app.exit(e, io.out, io.err);
    } catch (const CLI::CallForVersion& e) {
      return app.exit(e, io.out, io.err);
    } catch (const CLI::ParseError& e) {
      io.err << "kilnctl: " << e.what() << "\n(run 'kilnctl --help' or 'kilnctl <command> --help')\n";
      return kExitUsage;
    }
    const Action* action = set.chosen();
    if (action == nullptr) return context.usage("no command given");
    return (*action)();
  } catch (const std::exception& e) {
    io.err << "kilnctl: internal: " << e.what() << "\n";
    return kExitError;
  }
}

int main(int argc, char** argv) { return run(argc, argv, Io{std::cin, std::cout, std::cerr, 1}); }

}  // namespace kiln::ctl
