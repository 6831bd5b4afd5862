// The registration table: one add_<name>() per line of commands.def.
#pragma once

#include <string_view>
#include <vector>

#include "kilnctl/command.hpp"

namespace kiln::ctl {

#define KILN_CTL_COMMAND(name) void add_##name(CommandSet& set);
#include "kilnctl/commands/commands.def"
#undef KILN_CTL_COMMAND

struct CommandEntry {
  std::string_view name;
  void (*add)(CommandSet&);
};

inline const std::vector<CommandEntry>& command_table() {
  static const std::vector<CommandEntry> table = {
#define KILN_CTL_COMMAND(name) {#name, &add_##name},
#include "kilnctl/commands/commands.def"
#undef KILN_CTL_COMMAND
  };
  return table;
}

}  // namespace kiln::ctl
