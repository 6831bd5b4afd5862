#include "kilnctl/cli.hpp"

#include <algorithm>
#include <cstddef>
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

// The index in argv of the first word that is not an option (nor --socket's value): the
// command's name. 0 when there is none.
int command_word(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--socket") {
      ++i;
      continue;
    }
    if (!word.empty() && word[0] != '-') return i;
  }
  return 0;
}

// Empty when `word` names a command, else the message for it. CLI11 alone reports a
// mistyped command as "A subcommand is required".
std::string unknown_command(const CLI::App& app, const std::string& word) {
  std::string nearest;
  std::size_t best = 3;  // suggest only close spellings
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (sub->get_name() == word) return {};
    const std::size_t d = edit_distance(word, sub->get_name());
    if (d < best) best = d, nearest = sub->get_name();
  }
  return "unknown command '" + word + "'" + (nearest.empty() ? "" : "; did you mean '" + nearest + "'?");
}

// What bare `kilnctl` prints: the commands, one a line, and where to read more.
std::string command_list(const CLI::App& app) {
  std::string text = "usage: kilnctl [--json] [--socket PATH] COMMAND [ARGS...]\n\ncommands:\n";
  for (const CLI::App* sub : app.get_subcommands({})) {
    std::string name = sub->get_name();
    name.resize(std::max<std::size_t>(name.size() + 2, 10), ' ');
    std::string what = sub->get_description();
    // The first clause is enough for a list (descriptions go on after ':' with details).
    if (auto colon = what.find(": "); colon != std::string::npos && colon > 20) what.resize(colon);
    text += "  " + name + what + "\n";
  }
  text += "  help      This list, or a command's options: help COMMAND\n";
  return text + "\n'kilnctl help COMMAND' shows a command's options; 'kilnctl --help' the exit codes and the socket.\n";
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
    const int word = command_word(argc, argv);
    bool word_free_request = false;  // --help and --version need no command
    for (int i = 1; i < argc && word == 0; ++i) {
      const std::string a = argv[i];
      if (a == "--help" || a == "-h" || a == "--version") word_free_request = true;
    }
    if (word == 0 && !word_free_request) {
      io.err << "kilnctl: no command given\n" << command_list(app);
      return kExitUsage;
    }
    if (word != 0 && std::string(argv[word]) == "help") {
      // `kilnctl help` is `kilnctl --help`; `kilnctl help COMMAND` is `kilnctl COMMAND --help`.
      if (word + 1 >= argc) {
        io.out << app.help();
        return kExitOk;
      }
      const std::string name = argv[word + 1];
      if (auto unknown = unknown_command(app, name); !unknown.empty()) {
        io.err << "kilnctl: " << unknown << "\n(run 'kilnctl help' for the list of commands)\n";
        return kExitUsage;
      }
      io.out << app.get_subcommand(name)->help();
      return kExitOk;
    }
    if (word != 0) {
      if (auto unknown = unknown_command(app, argv[word]); !unknown.empty()) {
        io.err << "kilnctl: " << unknown << "\n(run 'kilnctl help' for the list of commands)\n";
        return kExitUsage;
      }
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
      io.err << "kilnctl: " << e.what() << "\n(run 'kilnctl help' or 'kilnctl help COMMAND')\n";
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
