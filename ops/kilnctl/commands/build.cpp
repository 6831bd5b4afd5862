// kilnctl build [--force] [--wait|--no-wait|--idle] KEY: build one key on kilnd's node (BUILD). --force
// rebuilds even when the artifact is stored, and retries a key whose recent failure kilnd
// remembers (the negative cache, [builds] failure_ttl_s) instead of failing fast.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "kilnctl/commands/commands.hpp"
#include "kilnctl/commands/ops_util.hpp"
#include "kilnctl/key_flags.hpp"

namespace kiln::ctl {

namespace {
struct BuildArgs {
  KeyFlags key;
  bool force = false;
  bool wait = true;
  std::uint32_t wait_ms = 0;
  bool idle = false;
};
}  // namespace

void add_build(CommandSet& set) {
  Context& ctx = set.context();
  auto args = std::make_shared<BuildArgs>();
  CLI::App* sub = set.add(
      "build", "Build a key on this node and wait for it; --force retries a remembered failure or rebuilds a stored one",
      [&ctx, args] {
        auto key = key_from_flags(args->key, std::cin);
        if (!key) return ctx.fail(key.error());
        auto client = ctx.connect();
        if (!client) return ctx.fail(client.error());
        protocol::BuildRequest request;
        request.key = *key;
        request.force = args->force;
        request.wait = args->wait && !args->idle;
        request.idle = args->idle;
        request.wait_ms = args->wait_ms;
        // Errors (build_failed with the worker's last line, no_source naming the model hash,
        // timeout) come back as the daemon's ERROR and are reported as such.
        auto reply = call_typed<protocol::BuildReply>(*client, protocol::MsgType::build, request);
        if (!reply) return ctx.fail(reply.error());
        if (ctx.json) {
          nlohmann::json j = {{"state", reply->state}, {"key_digest", reply->key_digest.hex()}};
          if (reply->handle) j["handle"] = *reply->handle;
          if (reply->info) {
            j["size"] = reply->info->size;
            j["build_seconds"] = reply->info->build_seconds;
          }
          ctx.out << j.dump() << "\n";
          return 0;
        }
        if (reply->state == "done") {
          ctx.out << "built " << reply->key_digest.hex();
          if (reply->info) ctx.out << " (" << reply->info->size << " bytes, " << reply->info->build_seconds << " s)";
          ctx.out << "\n";
        } else {
          ctx.out << reply->state << " " << reply->key_digest.hex() << (reply->handle ? " handle " + *reply->handle : "")
                  << "\n";
        }
        return 0;
      });
  sub->add_flag("--force", args->force, "Build even if stored, and retry a recently failed key (bypass the negative cache)");
  sub->add_flag("--wait,!--no-wait", args->wait,
                "Wait for the build (default); --no-wait submits and prints queued / running / present");
  sub->add_flag("--idle", args->idle,
                "Build in the node's idle time, set aside whenever another build needs the slot (implies --no-wait)");
  sub->add_option("--wait-ms", args->wait_ms, "Give up waiting after this long (0 = kilnd's build timeout)");
  add_key_flags(*sub, args->key, DigestFlag::not_allowed);
}

}  // namespace kiln::ctl
