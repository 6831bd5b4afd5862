// kilnctl unpin: see key_op.hpp.
#include "kilnctl/commands/commands.hpp"
#include "kilnctl/commands/key_op.hpp"

namespace kiln::ctl {

void add_unpin(CommandSet& set) {
  add_key_op_command(set, "unpin", "Unpin a stored artifact (admin)", "unpinned",
                     [](client::Client& c, const client::Lookup& what) { return c.unpin(what); });
}

}  // namespace kiln::ctl
