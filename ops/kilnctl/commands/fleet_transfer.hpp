// `kilnctl push`, `kilnctl pull` and `kilnctl fleet prune`: the operator's transfers
// between a node and its fleet's registry (FLEET_PUSH, FLEET_PULL, FLEET_PRUNE;
// schema/protocol.md). kilnd does the work with its own credentials and signing key;
// kilnctl asks, shows kilnd's progress on a terminal and prints the outcome.
#pragma once

#include "kilnctl/command.hpp"
#include "kilnctl/commands/source_read.hpp"

namespace kiln::ctl {

// Adds `prune` under `fleet` (commands/fleet.cpp registers `fleet` itself).
SubcommandAction add_fleet_prune(CLI::App& fleet, Context& ctx);
// kilnctl fleet verify: an operator's push that reports, per artifact, whether the
// registry's copy was intact (verified), had lost blobs (repaired) or was absent (pushed).
SubcommandAction add_fleet_verify(CLI::App& fleet, Context& ctx);

}  // namespace kiln::ctl
