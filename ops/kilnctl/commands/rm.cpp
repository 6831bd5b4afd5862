// kilnctl rm: see key_op.hpp.
#include "kilnctl/commands/commands.hpp"
#include "kilnctl/commands/key_op.hpp"

namespace kiln::ctl {

void add_rm(CommandSet& set) {
  add_key_op_command(set, "rm", "Remove a stored artifact (admin); exit code 2 when not stored", "removed",
                     [](client::Client& c, const client::Lookup& what) { return c.remove(what); });
}

}  // namespace kiln::ctl
