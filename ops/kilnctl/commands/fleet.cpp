// kilnctl keygen / trust / fleet: the fleet tier's keys and state (schema/signature.md).
// keygen runs locally (OpenSSL); trust ls and fleet status ask kilnd (STATUS "fleet");
// fleet prune is in fleet_transfer.cpp.
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <iomanip>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>

#include "kilnctl/commands/commands.hpp"
#include "kilnctl/commands/fleet_transfer.hpp"
#include "kilnctl/exit_codes.hpp"
#include "kiln/base64.hpp"

namespace kiln::ctl {

namespace {

bool valid_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  }
  return true;
}

Status write_new_file(const std::filesystem::path& p, const std::string& text, mode_t mode) {
  int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return error_from_errno(errno, "create " + p.string());
  std::size_t off = 0;
  while (off < text.size()) {
    ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0) {
      int e = errno;
      ::close(fd);
      return error_from_errno(e, "write " + p.string());
    }
    off += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) return error_from_errno(errno, "write " + p.string());
  return {};
}

// "name:base64" and the private key's PEM.
Result<std::pair<std::string, std::string>> generate(const std::string& name) {
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519"), &EVP_PKEY_free);
  if (!key) return make_error(Errc::internal, "ed25519 key generation failed");
  unsigned char raw[32];
  std::size_t len = sizeof raw;
  if (EVP_PKEY_get_raw_public_key(key.get(), raw, &len) != 1 || len != 32) {
    return make_error(Errc::internal, "cannot read the new key's public half");
  }
  const std::string b64 = base64_encode(std::as_bytes(std::span(raw)));
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), &BIO_free);
  PEM_write_bio_PrivateKey(bio.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::make_pair(name + ":" + b64, std::string(data, static_cast<std::size_t>(n)));
}

Result<nlohmann::json> fleet_state(const Context& ctx) {
  auto client = ctx.connect();
  if (!client) return std::move(client).error();
  auto s = client->call(protocol::MsgType::status, "{}");
  if (!s) return std::move(s).error();
  auto j = nlohmann::json::parse(*s, nullptr, false);
  if (j.is_discarded()) return make_error(Errc::protocol_error, "kilnd's status is not JSON");
  return j.contains("fleet") ? j["fleet"] : nlohmann::json(nullptr);
}

}  // namespace

void add_keygen(CommandSet& set) {
  Context& ctx = set.context();
  auto args = std::make_shared<std::pair<std::string, std::string>>();
  args->second = ".";
  CLI::App* cmd = set.add("keygen", "Make an ed25519 signing key NAME.pem for [fleet] signing_key_file; print its trust entry",
                          [&ctx, args] {
                            const auto& [name, dir] = *args;
                            if (!valid_name(name)) return ctx.usage("key name must be 1-64 of [A-Za-z0-9._-]");
                            auto k = generate(name);
                            if (!k) return ctx.fail(k.error());
                            const auto pem = std::filesystem::path(dir) / (name + ".pem");
                            const auto pub = std::filesystem::path(dir) / (name + ".pub");
                            if (auto st = write_new_file(pem, k->second, 0600); !st) return ctx.fail(st.error());
                            if (auto st = write_new_file(pub, k->first + "\n", 0644); !st) return ctx.fail(st.error());
                            if (ctx.json) {
                              ctx.out << nlohmann::json{{"name", name}, {"private_key", pem.string()},
                                                        {"trust_entry", k->first}}.dump()
                                      << "\n";
                            } else {
                              ctx.out << "wrote " << pem.string() << " (keep it secret: [fleet] signing_key_file) and "
                                      << pub.string() << "\ntrust it on every node: [fleet] trusted_keys = [\""
                                      << k->first << "\"]\n";
                            }
                            return 0;
                          });
  cmd->add_option("NAME", args->first, "The key's name (1-64 of [A-Za-z0-9._-]); files NAME.pem and NAME.pub")->required();
  cmd->add_option("--dir", args->second, "Folder to write them in (default: the current folder); existing files are kept");
}

void add_trust(CommandSet& set) {
  Context& ctx = set.context();
  CLI::App* trust = set.add("trust", "The signing keys kilnd trusts for artifacts from the fleet: ls", [&ctx] {
    auto f = fleet_state(ctx);
    if (!f) return ctx.fail(f.error());
    if (f->is_null()) {
      // As `fleet status`: no fleet is a state to report, not a failure.
      if (ctx.json)
        ctx.out << nlohmann::json{{"trusted_keys", nlohmann::json::array()}, {"fleet", false}}.dump() << "\n";
      else
        ctx.out << "no fleet: [fleet] registry is not set in this kilnd's configuration; no keys are trusted\n";
      return 0;
    }
    const auto& keys = (*f)["trusted_keys"];
    if (ctx.json) {
      ctx.out << nlohmann::json{{"trusted_keys", keys}, {"signer", (*f)["signer"]},
                                {"require_signatures", (*f)["require_signatures"]}}.dump()
              << "\n";
      return 0;
    }
    for (const auto& k : keys) {
      std::string e = k.get<std::string>();
      std::string name = e.substr(0, e.find(':'));
      ctx.out << std::left << std::setw(24) << name << e.substr(e.find(':') + 1)
              << (name == (*f)["signer"].get<std::string>() ? "  (this node signs with it)" : "") << "\n";
    }
    if (!(*f)["require_signatures"].get<bool>()) ctx.out << "WARNING: require_signatures = false: unsigned artifacts are accepted\n";
    return 0;
  });
  trust->add_subcommand("ls", "List the trusted keys (name and base64 public key)")->fallthrough();
}

void add_fleet(CommandSet& set) {
  Context& ctx = set.context();
  auto prune = std::make_shared<SubcommandAction>();
  auto verify = std::make_shared<SubcommandAction>();
  CLI::App* fleet = set.add("fleet", "The fleet tier: status (registry reachable, pending and failing pushes, recent pulls and refusals, build claims); prune; verify",
                            [&ctx, prune, verify] {
    if (prune->app->parsed()) return prune->action();
    if (verify->app->parsed()) return verify->action();
    auto f = fleet_state(ctx);
    if (!f) return ctx.fail(f.error());
    if (ctx.json) {
      ctx.out << f->dump() << "\n";
      return 0;
    }
    if (f->is_null()) {
      ctx.out << "no fleet: [fleet] registry is not set in this kilnd's configuration\n";
      return 0;
    }
    auto line = [&](const std::string& n, const std::string& v) { ctx.out << std::left << std::setw(18) << n << v << "\n"; };
    auto num = [&](const char* k) { return std::to_string((*f)[k].get<std::uint64_t>()); };
    line("registry", (*f)["registry"].get<std::string>() + " repository " + (*f)["repository"].get<std::string>());
    line("reachable", (*f)["reachable"].get<bool>() ? "yes" : "NO: " + (*f)["last_error"].get<std::string>());
    line("pull / push", std::string((*f)["pull"].get<bool>() ? "on" : "off") + " / " + ((*f)["push"].get<bool>() ? "on" : "off"));
    line("signs as", (*f)["signer"].get<std::string>().empty() ? "(no key)" : (*f)["signer"].get<std::string>());
    line("pending pushes", num("pending_pushes") + " (" + num("failing_pushes") + " failing)");
    for (const auto& p : (*f)["failing"]) {
      line("  failing", p["subject"].get<std::string>() + ": " + std::to_string(p["attempts"].get<int>()) +
                            " attempt(s), " + p["last_error"].get<std::string>());
    }
    line("pulls", num("pulls") + " (" + num("registry_hits") + " hits, " + num("registry_misses") + " misses), " +
                      num("bytes_pulled") + " bytes");
    line("pushes", num("pushes") + " (" + num("push_failures") + " failed attempts), " + num("bytes_pushed") + " bytes");
    if (const auto& m = f->contains("misses") ? (*f)["misses"] : nlohmann::json(nullptr); m.is_object()) {
      const std::int64_t paused_ms = m.value("paused_for_ms", std::int64_t{0});
      line("misses", std::to_string(m.value("queued", 0)) + " waiting, " + std::to_string(m.value("in_flight", 0)) +
                         " asking the registry; " + std::to_string(m.value("skipped", 0)) + " skipped, " +
                         std::to_string(m.value("expired", 0)) + " expired" +
                         (paused_ms > 0 ? "; registry left alone for " + std::to_string((paused_ms + 999) / 1000) + " s" : ""));
    }
    std::string refusals;
    for (const auto& [reason, n] : (*f)["refusals"].items()) refusals += (refusals.empty() ? "" : ", ") + reason + " " + std::to_string(n.get<int>());
    line("refusals", refusals.empty() ? "none" : refusals);
    for (const auto& r : (*f)["recent"]) line("  recent", r.get<std::string>());
    // One build per key across the fleet (schema/etcd-coordination.md): the claims in etcd.
    const auto& co = f->contains("coordinator") ? (*f)["coordinator"] : nlohmann::json(nullptr);
    if (!co.is_object()) {
      line("coordinator", "none (each node builds what it lacks)");
      return 0;
    }
    line("coordinator", co.value("endpoint", "") + " as node " + co.value("node", "") +
                            (co.value("up", false) ? "" : "  UNREACHABLE: " + co.value("last_error", "") +
                                                              " (building alone)"));
    std::string counts;
    for (const auto& [outcome, n] : co["counts"].items()) {
      counts += (counts.empty() ? "" : ", ") + outcome + " " + std::to_string(n.get<std::uint64_t>());
    }
    line("claim outcomes", counts + " (this node)");
    const auto& claims = co["claims"];
    line("claims now", std::to_string(claims.size()) + (claims.empty() ? "" : ":"));
    if (!claims.empty()) {
      ctx.out << "  " << std::left << std::setw(66) << "KEY" << std::setw(20) << "HOLDER" << "AGE\n";
      for (const auto& c : claims) {
        ctx.out << "  " << std::left << std::setw(66) << c.value("key", "") << std::setw(20)
                << (c.value("node", "") + (c.value("mine", false) ? " (this)" : "")) << c.value("age_s", 0) << " s\n";
      }
    }
    return 0;
  });
  fleet->add_subcommand("status", "Show the fleet tier's state (the default)")->fallthrough();
  *prune = add_fleet_prune(*fleet, ctx);
  *verify = add_fleet_verify(*fleet, ctx);
}

}  // namespace kiln::ctl
