// rm, pin and unpin: a key or --digest in, one call, "not stored" is exit code 2.
#pragma once

#include <functional>
#include <string>

#include "kilnctl/command.hpp"

namespace kiln::ctl {

using KeyOp = std::function<Result<bool>(client::Client&, const client::Lookup&)>;

// Adds subcommand `name`; `done` is the past tense printed on success ("removed").
void add_key_op_command(CommandSet& set, const std::string& name, const std::string& description,
                        const std::string& done, KeyOp op);

}  // namespace kiln::ctl
