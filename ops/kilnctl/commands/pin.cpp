// kilnctl pin: see key_op.hpp.
#include "kilnctl/commands/commands.hpp"
#include "kilnctl/commands/key_op.hpp"

namespace kiln::ctl {

void add_pin(CommandSet& set) {
  add_key_op_command(set, "pin", "Pin a stored artifact so it is never evicted (admin)", "pinned",
                     [](client::Client& c, const client::Lookup& what) { return c.pin(what); });
}

}  // namespace kiln::ctl
