#include "kilnctl/cli.hpp"

#include <exception>
#include <iostream>

#include "kilnctl/command.hpp"
#include "kilnctl/commands/commands.hpp"
#include "kilnctl/exit_codes.hpp"

namespace kiln::ctl {

int run(int argc, const char* const* argv, const Io& io) {
  try {
    Context context{io.out, io.err, io.data_fd, false, {}};
    CLI::App app{"kilnctl: inspect and drive the node's kiln artifact cache (kilnd)", "kilnctl"};
    app.require_subcommand(1);
    app.footer(exit_code_help());
    app.add_flag("--json", context.json, "Print one JSON document on stdout");
    app.add_option("--socket", context.socket, "kilnd's socket (default: $KILN_SOCKET, else kilnd's default)");
    CommandSet set(app, context);
    for (const auto& entry : command_table()) entry.add(set);
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
      return app.exit(e, io.out, io.err);
    } catch (const CLI::CallForAllHelp& e) {
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
