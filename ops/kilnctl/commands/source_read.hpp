// `kilnctl source ls` and `kilnctl source get`: the read side of `kilnctl source`
// (commands/source_add.cpp registers the command and its `add`).
#pragma once

#include <vector>

#include "kilnctl/command.hpp"

namespace kiln::ctl {

struct SubcommandAction {
  CLI::App* app = nullptr;
  Action action;
};

// Adds `ls` and `get` under `source`; their actions run when chosen.
std::vector<SubcommandAction> add_source_read_commands(CLI::App& source, Context& ctx);

}  // namespace kiln::ctl
