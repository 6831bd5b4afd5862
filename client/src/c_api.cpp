// The C API (kiln/client/kiln.h): handles wrap the C++ objects; every entry point
// catches everything, since no exception may cross into C.
#include "kiln/client/kiln.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "kiln/client/client.hpp"
#include "kiln/client/explain.hpp"
#include "kiln/client/json.hpp"
#include "kiln/client/key_text.hpp"
#include "kiln/protocol/frame.hpp"

struct kiln_client {
  kiln::client::Client client;
};
struct kiln_key {
  kiln::Key key;
};
struct kiln_artifact {
  kiln::client::Artifact artifact;
  std::string path;
  std::string info_json;
};
struct kiln_source {
  kiln::client::Source source;
  std::string path;
  std::string info_json;
};

namespace {

thread_local std::string t_last_error;

kiln_status fail(const kiln::Error& e) {
  t_last_error = e.message;
  return static_cast<kiln_status>(e.code);
}
kiln_status fail(kiln_status code, std::string message) {
  t_last_error = std::move(message);
  return code;
}
kiln_status ok() {
  t_last_error.clear();
  return KILN_OK;
}

char* dup(const std::string& s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (p != nullptr) std::memcpy(p, s.c_str(), s.size() + 1);
  return p;
}

// Runs `body`, turning anything thrown (allocation failure, a JSON library error) into
// KILN_INTERNAL rather than letting it cross into C.
template <class F>
kiln_status guarded(F&& body) noexcept {
  try {
    return body();
  } catch (const std::exception& e) {
    return fail(KILN_INTERNAL, std::string("libkiln: ") + e.what());
  } catch (...) {
    return fail(KILN_INTERNAL, "libkiln: unknown exception");
  }
}

kiln::Result<kiln::client::Lookup> lookup(const kiln_key* key, const char* digest_hex) {
  if ((key == nullptr) == (digest_hex == nullptr))
    return kiln::make_error(kiln::Errc::invalid_argument, "give exactly one of a key or a digest");
  if (key != nullptr) return kiln::client::Lookup(key->key);
  auto d = kiln::Digest::from_hex(digest_hex);
  if (!d) return std::move(d).error();
  return kiln::client::Lookup(*d);
}

// The requests kiln_request may send: those answered by one JSON reply.
bool single_json_reply(kiln::protocol::MsgType t) {
  using T = kiln::protocol::MsgType;
  switch (t) {
    case T::stat: case T::list: case T::del: case T::pin: case T::unpin: case T::stats: case T::status:
    case T::evict: case T::verify: case T::gc: case T::build: case T::prewarm_submit: case T::build_status:
    case T::logs: case T::reload: case T::list_sources:
      return true;
    default:
      return false;
  }
}

kiln_artifact* new_artifact(kiln::client::Artifact&& artifact) {
  auto* a = new kiln_artifact{std::move(artifact), {}, {}};
  a->path = a->artifact.path();
  a->info_json = kiln::client::to_json(a->artifact.info());
  return a;
}

kiln_status connect(const char* socket_path, kiln_client** out, kiln::client::Transfer transfer) {
  if (out == nullptr) return fail(KILN_INVALID_ARGUMENT, "kiln_connect: out is NULL");
  *out = nullptr;
  kiln::client::ConnectOptions options;
  if (socket_path != nullptr) options.socket = socket_path;
  options.transfer = transfer;
  auto c = kiln::client::Client::connect(options);
  if (!c) return fail(c.error());
  *out = new kiln_client{std::move(*c)};
  return ok();
}

template <class F>
kiln_status key_op(kiln_client* client, const kiln_key* key, const char* digest_hex, F&& op) {
  if (client == nullptr) return fail(KILN_INVALID_ARGUMENT, "client is NULL");
  auto what = lookup(key, digest_hex);
  if (!what) return fail(what.error());
  kiln::Result<bool> r = op(client->client, *what);
  if (!r) return fail(r.error());
  if (!*r) return fail(KILN_NOT_FOUND, "no artifact stored under that key");
  return ok();
}

}  // namespace

extern "C" {

const char* kiln_last_error(void) { return t_last_error.c_str(); }

const char* kiln_status_name(kiln_status status) {
  if (status < KILN_OK || status > KILN_INTERNAL) return "unknown";
  return kiln::errc_name(static_cast<kiln::Errc>(status)).data();
}

void kiln_free(void* p) { std::free(p); }

kiln_status kiln_key_new(const char* kind, const char* model_hash, const char* region, const char* dtype,
                         kiln_key** out) {
  return guarded([&] {
    if (out == nullptr) return fail(KILN_INVALID_ARGUMENT, "kiln_key_new: out is NULL");
    *out = nullptr;
    if (!kind || !model_hash || !region || !dtype)
      return fail(KILN_INVALID_ARGUMENT, "kiln_key_new: kind, model_hash, region and dtype are required");
    kiln::Key key;
    auto k = kiln::parse_artifact_kind(kind);
    if (!k) return fail(k.error());
    key.kind = *k;
    key.model_hash = model_hash;
    key.region = region;
    key.dtype = dtype;
    *out = new kiln_key{std::move(key)};
    return ok();
  });
}

kiln_status kiln_key_from_json(const char* json, kiln_key** out) {
  return guarded([&] {
    if (out == nullptr || json == nullptr) return fail(KILN_INVALID_ARGUMENT, "kiln_key_from_json: NULL argument");
    *out = nullptr;
    auto key = kiln::Key::from_json(json);
    if (!key) return fail(key.error());
    *out = new kiln_key{std::move(*key)};
    return ok();
  });
}

void kiln_key_free(kiln_key* key) { delete key; }

kiln_status kiln_key_set(kiln_key* key, const char* field, const char* value) {
  return guarded([&] {
    if (!key || !field || !value) return fail(KILN_INVALID_ARGUMENT, "kiln_key_set: NULL argument");
    auto st = kiln::client::set_key_field(key->key, field, value);
    if (!st) return fail(st.error());
    return ok();
  });
}

kiln_status kiln_key_add_input(kiln_key* key, const char* spec) {
  return guarded([&] {
    if (!key || !spec) return fail(KILN_INVALID_ARGUMENT, "kiln_key_add_input: NULL argument");
    auto t = kiln::client::parse_tensor_spec(spec);
    if (!t) return fail(t.error());
    key->key.inputs.push_back(std::move(*t));
    return ok();
  });
}

kiln_status kiln_key_to_json(const kiln_key* key, char** out) {
  return guarded([&] {
    if (!key || !out) return fail(KILN_INVALID_ARGUMENT, "kiln_key_to_json: NULL argument");
    *out = dup(key->key.to_json());
    return ok();
  });
}

kiln_status kiln_key_digest(const kiln_key* key, char out_hex[65]) {
  return guarded([&] {
    if (!key || !out_hex) return fail(KILN_INVALID_ARGUMENT, "kiln_key_digest: NULL argument");
    auto d = key->key.digest();
    if (!d) return fail(d.error());
    std::memcpy(out_hex, d->hex().c_str(), 65);
    return ok();
  });
}

kiln_status kiln_connect(const char* socket_path, kiln_client** out) {
  return guarded([&] { return connect(socket_path, out, kiln::client::Transfer::descriptor); });
}

kiln_status kiln_connect_streaming(const char* socket_path, kiln_client** out) {
  return guarded([&] { return connect(socket_path, out, kiln::client::Transfer::stream); });
}

void kiln_client_free(kiln_client* client) { delete client; }

kiln_status kiln_get(kiln_client* client, const kiln_key* key, const char* digest_hex, kiln_artifact** out) {
  return guarded([&] {
    if (!client || !out) return fail(KILN_INVALID_ARGUMENT, "kiln_get: NULL client or out");
    *out = nullptr;
    auto what = lookup(key, digest_hex);
    if (!what) return fail(what.error());
    auto hit = client->client.get(*what);
    if (!hit) return fail(hit.error());
    if (!*hit) return fail(KILN_NOT_FOUND, "no artifact stored under that key");
    *out = new_artifact(std::move(**hit));
    return ok();
  });
}

kiln_status kiln_get_build(kiln_client* client, const kiln_key* key, uint32_t wait_ms, kiln_artifact** out) {
  return guarded([&] {
    if (!client || !key || !out) return fail(KILN_INVALID_ARGUMENT, "kiln_get_build: NULL argument");
    *out = nullptr;
    kiln::client::Client::GetOptions options;
    options.build_on_miss = true;
    options.wait = std::chrono::milliseconds(wait_ms);
    auto hit = client->client.get(kiln::client::Lookup(key->key), options);
    if (!hit) return fail(hit.error());
    if (!*hit) return fail(KILN_NOT_FOUND, "no artifact stored under that key");
    *out = new_artifact(std::move(**hit));
    return ok();
  });
}

kiln_status kiln_request(kiln_client* client, const char* type_name, const char* body_json, char** reply_json) {
  return guarded([&] {
    if (!client || !type_name || !reply_json) return fail(KILN_INVALID_ARGUMENT, "kiln_request: NULL argument");
    *reply_json = nullptr;
    std::optional<kiln::protocol::MsgType> type;
    for (int v = 0; v < 0x20; ++v) {
      auto t = static_cast<kiln::protocol::MsgType>(v);
      if (kiln::protocol::is_known_type(static_cast<std::uint8_t>(v)) && kiln::protocol::type_name(t) == type_name)
        type = t;
    }
    if (!type || !single_json_reply(*type))
      return fail(KILN_INVALID_ARGUMENT, std::string("kiln_request: \"") + type_name +
                                             "\" is not a request with one JSON reply (see kiln.h)");
    std::string body = body_json != nullptr && *body_json != '\0' ? body_json : "{}";
    auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object())
      return fail(KILN_INVALID_ARGUMENT, std::string("kiln_request: the body of ") + type_name + " is not a JSON object");
    auto reply = client->client.call(*type, body);
    if (!reply) return fail(reply.error());
    *reply_json = dup(*reply);
    return ok();
  });
}

int kiln_artifact_fd(const kiln_artifact* artifact) { return artifact ? artifact->artifact.fd() : -1; }
uint64_t kiln_artifact_size(const kiln_artifact* artifact) { return artifact ? artifact->artifact.size() : 0; }
const char* kiln_artifact_path(const kiln_artifact* artifact) { return artifact ? artifact->path.c_str() : ""; }
const char* kiln_artifact_info_json(const kiln_artifact* artifact) {
  return artifact ? artifact->info_json.c_str() : "";
}
void kiln_artifact_free(kiln_artifact* artifact) { delete artifact; }

kiln_status kiln_put(kiln_client* client, const kiln_key* key, const void* data, size_t size, int pin,
                     char** info_json) {
  return guarded([&] {
    if (!client || !key) return fail(KILN_INVALID_ARGUMENT, "kiln_put: NULL client or key");
    if (data == nullptr && size != 0) return fail(KILN_INVALID_ARGUMENT, "kiln_put: data is NULL but size is not 0");
    if (info_json) *info_json = nullptr;
    kiln::client::PutOptions options;
    options.pin = pin != 0;
    auto info = client->client.put(key->key, {static_cast<const std::byte*>(data), size}, options);
    if (!info) return fail(info.error());
    if (info_json) *info_json = dup(kiln::client::to_json(*info));
    return ok();
  });
}

kiln_status kiln_put_file(kiln_client* client, const kiln_key* key, const char* path, int pin, char** info_json) {
  return guarded([&] {
    if (!client || !key || !path) return fail(KILN_INVALID_ARGUMENT, "kiln_put_file: NULL argument");
    if (info_json) *info_json = nullptr;
    kiln::client::PutOptions options;
    options.pin = pin != 0;
    auto info = client->client.put_file(key->key, path, options);
    if (!info) return fail(info.error());
    if (info_json) *info_json = dup(kiln::client::to_json(*info));
    return ok();
  });
}

kiln_status kiln_stat(kiln_client* client, const kiln_key* key, const char* digest_hex, char** info_json) {
  return guarded([&] {
    if (!client || !info_json) return fail(KILN_INVALID_ARGUMENT, "kiln_stat: NULL client or out");
    *info_json = nullptr;
    auto what = lookup(key, digest_hex);
    if (!what) return fail(what.error());
    auto info = client->client.stat(*what);
    if (!info) return fail(info.error());
    if (!*info) return fail(KILN_NOT_FOUND, "no artifact stored under that key");
    *info_json = dup(kiln::client::to_json(**info));
    return ok();
  });
}

kiln_status kiln_explain(kiln_client* client, const kiln_key* key, size_t limit, char** result_json) {
  return guarded([&] {
    if (!client || !key || !result_json) return fail(KILN_INVALID_ARGUMENT, "kiln_explain: NULL argument");
    *result_json = nullptr;
    auto e = kiln::client::explain(client->client, key->key, limit == 0 ? 5 : limit);
    if (!e) return fail(e.error());
    *result_json = dup(kiln::client::to_json(*e));
    return ok();
  });
}

kiln_status kiln_list(kiln_client* client, const char* query_json, char** result_json) {
  return guarded([&] {
    if (!client || !result_json) return fail(KILN_INVALID_ARGUMENT, "kiln_list: NULL client or out");
    *result_json = nullptr;
    kiln::client::ListQuery query;
    if (query_json != nullptr && *query_json != '\0') {
      auto j = nlohmann::json::parse(query_json, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.is_object()) return fail(KILN_INVALID_ARGUMENT, "kiln_list: query is not a JSON object");
      try {
        if (j.contains("filters")) query.filters = j["filters"].get<std::map<std::string, std::string>>();
        if (j.contains("pinned")) query.pinned = j["pinned"].get<bool>();
        if (j.contains("accessed_before")) query.accessed_before = j["accessed_before"].get<std::int64_t>();
        if (j.contains("limit")) query.limit = j["limit"].get<std::size_t>();
        if (j.contains("offset")) query.offset = j["offset"].get<std::size_t>();
      } catch (const nlohmann::json::exception& e) {
        return fail(KILN_INVALID_ARGUMENT, std::string("kiln_list: bad query field: ") + e.what());
      }
    }
    auto page = client->client.list(query);
    if (!page) return fail(page.error());
    *result_json = dup(kiln::client::to_json(*page));
    return ok();
  });
}

kiln_status kiln_remove(kiln_client* client, const kiln_key* key, const char* digest_hex) {
  return guarded([&] {
    return key_op(client, key, digest_hex, [](kiln::client::Client& c, const kiln::client::Lookup& w) { return c.remove(w); });
  });
}
kiln_status kiln_pin(kiln_client* client, const kiln_key* key, const char* digest_hex) {
  return guarded([&] {
    return key_op(client, key, digest_hex, [](kiln::client::Client& c, const kiln::client::Lookup& w) { return c.pin(w); });
  });
}
kiln_status kiln_unpin(kiln_client* client, const kiln_key* key, const char* digest_hex) {
  return guarded([&] {
    return key_op(client, key, digest_hex, [](kiln::client::Client& c, const kiln::client::Lookup& w) { return c.unpin(w); });
  });
}

kiln_status kiln_stats(kiln_client* client, char** json) {
  return guarded([&] {
    if (!client || !json) return fail(KILN_INVALID_ARGUMENT, "kiln_stats: NULL argument");
    *json = nullptr;
    auto s = client->client.stats();
    if (!s) return fail(s.error());
    *json = dup(kiln::client::to_json(*s));
    return ok();
  });
}

kiln_status kiln_daemon_status(kiln_client* client, char** json) {
  return guarded([&] {
    if (!client || !json) return fail(KILN_INVALID_ARGUMENT, "kiln_daemon_status: NULL argument");
    *json = nullptr;
    auto s = client->client.status();
    if (!s) return fail(s.error());
    *json = dup(kiln::client::to_json(*s));
    return ok();
  });
}

kiln_status kiln_list_sources(kiln_client* client, const char* query_json, char** result_json) {
  return guarded([&] {
    if (!client || !result_json) return fail(KILN_INVALID_ARGUMENT, "kiln_list_sources: NULL client or out");
    *result_json = nullptr;
    kiln::client::SourceQuery query;
    if (query_json != nullptr && *query_json != '\0') {
      auto j = nlohmann::json::parse(query_json, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.is_object())
        return fail(KILN_INVALID_ARGUMENT, "kiln_list_sources: query is not a JSON object");
      try {
        if (j.contains("model_hash_prefix")) query.model_hash_prefix = j["model_hash_prefix"].get<std::string>();
        if (j.contains("limit")) query.limit = j["limit"].get<std::size_t>();
        if (j.contains("offset")) query.offset = j["offset"].get<std::size_t>();
      } catch (const nlohmann::json::exception& e) {
        return fail(KILN_INVALID_ARGUMENT, std::string("kiln_list_sources: bad query field: ") + e.what());
      }
    }
    auto page = client->client.list_sources(query);
    if (!page) return fail(page.error());
    *result_json = dup(kiln::client::to_json(*page));
    return ok();
  });
}

kiln_status kiln_get_source(kiln_client* client, const char* model_hash, kiln_source** out) {
  return guarded([&] {
    if (!client || !model_hash || !out) return fail(KILN_INVALID_ARGUMENT, "kiln_get_source: NULL argument");
    *out = nullptr;
    auto got = client->client.get_source(model_hash);
    if (!got) return fail(got.error());
    auto* s = new kiln_source{std::move(*got), {}, {}};
    s->path = s->source.path();
    s->info_json = kiln::client::to_json(s->source.info());
    *out = s;
    return ok();
  });
}

int kiln_source_fd(const kiln_source* source) { return source ? source->source.fd() : -1; }
uint64_t kiln_source_size(const kiln_source* source) { return source ? source->source.size() : 0; }
const char* kiln_source_path(const kiln_source* source) { return source ? source->path.c_str() : ""; }
const char* kiln_source_info_json(const kiln_source* source) { return source ? source->info_json.c_str() : ""; }
void kiln_source_free(kiln_source* source) { delete source; }

kiln_status kiln_put_source_file(kiln_client* client, const char* model_hash, const char* name, const char* path,
                                 char** info_json) {
  return guarded([&] {
    if (!client || !path) return fail(KILN_INVALID_ARGUMENT, "kiln_put_source_file: NULL argument");
    if (info_json) *info_json = nullptr;
    std::string n = name != nullptr ? name : std::filesystem::path(path).filename().string();
    auto info = client->client.put_source(model_hash != nullptr ? model_hash : "", n, path);
    if (!info) return fail(info.error());
    if (info_json) *info_json = dup(kiln::client::to_json(*info));
    return ok();
  });
}

}  // extern "C"
