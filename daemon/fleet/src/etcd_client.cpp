// etcd's v3 JSON gateway. See kiln/fleet/etcd_client.hpp and schema/etcd-coordination.md.
#include "kiln/fleet/etcd_client.hpp"
#include "kiln/base64.hpp"

#include <charconv>

#include <nlohmann/json.hpp>

// `var = expr` where expr is a Result, returning its error from the enclosing function.
#define KILN_TRY_ASSIGN(var, expr)                           \
  do {                                                       \
    auto kiln_r_ = (expr);                                   \
    if (!kiln_r_) return std::move(kiln_r_).error();         \
    var = std::move(*kiln_r_);                               \
  } while (0)
#define KILN_TRY_DECLARE(name, expr)                         \
  auto name##_result_ = (expr);                              \
  if (!name##_result_) return std::move(name##_result_).error(); \
  auto name = std::move(*name##_result_)

namespace kiln::fleet {

namespace {

using json = nlohmann::json;

std::string b64(const std::string& s) { return base64_encode(std::as_bytes(std::span(s.data(), s.size()))); }

// Where a reply came from, for messages: "etcd http://127.0.0.1:2379 /v3/kv/txn".
struct Where {
  std::string endpoint, path;
  std::string str() const { return "etcd " + endpoint + " " + path; }
};

Error malformed(const Where& w, const std::string& why) {
  return make_error(Errc::protocol_error, w.str() + ": malformed reply (" + why + ")");
}

// The gateway writes int64 as a JSON string, and omits zero.
Result<std::int64_t> int_field(const json& j, const char* name, const Where& w) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return std::int64_t{0};
  if (it->is_number_integer()) return it->get<std::int64_t>();
  if (it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    std::int64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc() && p == s.data() + s.size()) return v;
  }
  return malformed(w, std::string("\"") + name + "\" is not an integer");
}

Result<std::string> bytes_field(const json& j, const char* name, const Where& w) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return std::string();
  if (!it->is_string()) return malformed(w, std::string("\"") + name + "\" is not a base64 string");
  auto raw = base64_decode(it->get_ref<const std::string&>());
  if (!raw) return malformed(w, std::string("\"") + name + "\" is not valid base64");
  return std::string(reinterpret_cast<const char*>(raw->data()), raw->size());
}

Result<std::vector<EtcdKeyValue>> parse_kvs(const json& range, const Where& w) {
  std::vector<EtcdKeyValue> out;
  auto it = range.find("kvs");
  if (it == range.end() || it->is_null()) return out;  // no match: omitted
  if (!it->is_array()) return malformed(w, "\"kvs\" is not an array");
  for (const auto& e : *it) {
    if (!e.is_object()) return malformed(w, "an element of \"kvs\" is not an object");
    EtcdKeyValue kv;
    KILN_TRY_ASSIGN(kv.key, bytes_field(e, "key", w));
    KILN_TRY_ASSIGN(kv.value, bytes_field(e, "value", w));
    KILN_TRY_ASSIGN(kv.create_revision, int_field(e, "create_revision", w));
    KILN_TRY_ASSIGN(kv.mod_revision, int_field(e, "mod_revision", w));
    KILN_TRY_ASSIGN(kv.lease, int_field(e, "lease", w));
    if (kv.key.empty()) return malformed(w, "a key-value without a key");
    out.push_back(std::move(kv));
  }
  return out;
}

Result<json> parse_object(const std::string& text, const Where& w) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return malformed(w, "not JSON");
  if (!j.is_object()) return malformed(w, "not a JSON object");
  return j;
}

json op_json(const EtcdOp& op) {
  switch (op.kind) {
    case EtcdOp::Kind::put: {
      json p{{"key", b64(op.key)}, {"value", b64(op.value)}};
      if (op.lease) p["lease"] = std::to_string(op.lease);
      return {{"requestPut", p}};
    }
    case EtcdOp::Kind::range: return {{"requestRange", {{"key", b64(op.key)}}}};
    case EtcdOp::Kind::erase: return {{"requestDeleteRange", {{"key", b64(op.key)}}}};
  }
  return {};
}

json compare_json(const EtcdCompare& c) {
  json j{{"key", b64(c.key)}, {"result", "EQUAL"}};
  switch (c.target) {
    case EtcdCompare::Target::create_revision:
      j["target"] = "CREATE";
      j["create_revision"] = std::to_string(c.value);
      break;
    case EtcdCompare::Target::mod_revision:
      j["target"] = "MOD";
      j["mod_revision"] = std::to_string(c.value);
      break;
    case EtcdCompare::Target::lease:
      j["target"] = "LEASE";
      j["lease"] = std::to_string(c.value);
      break;
  }
  return j;
}

// etcd's error body {"error","code","message"}: its gRPC code decides ours.
Error gateway_error(const HttpResponse& r, const Where& w) {
  json j = json::parse(r.body, nullptr, false);
  std::string msg = "HTTP " + std::to_string(r.status);
  int code = -1;
  if (j.is_object()) {
    if (j.contains("message") && j["message"].is_string()) msg = j["message"].get<std::string>();
    if (j.contains("code") && j["code"].is_number_integer()) code = j["code"].get<int>();
  }
  Errc e = r.status >= 500 ? Errc::unavailable : Errc::invalid_argument;
  if (code == 5) e = Errc::not_found;            // NOT_FOUND: "requested lease not found"
  if (code == 14) e = Errc::unavailable;         // UNAVAILABLE: no leader, shutting down
  if (code == 4) e = Errc::timeout;              // DEADLINE_EXCEEDED
  return make_error(e, w.str() + ": " + msg.substr(0, 300));
}

}  // namespace

std::string etcd_prefix_end(std::string prefix) {
  // The next key after every key with this prefix: the last byte that is not 0xff, plus one.
  while (!prefix.empty()) {
    auto& c = reinterpret_cast<unsigned char&>(prefix.back());
    if (c < 0xff) {
      ++c;
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');  // every key
}

Result<std::unique_ptr<EtcdClient>> EtcdClient::create(const EtcdOptions& options) {
  if (options.endpoints.empty()) return make_error(Errc::invalid_argument, "no etcd endpoint given");
  std::unique_ptr<EtcdClient> c(new EtcdClient(options));
  for (const auto& e : options.endpoints) {
    const std::string rest = e.starts_with("http://") ? e.substr(7) : std::string();
    if (rest.empty() || rest.find('/') != std::string::npos || rest.find('@') != std::string::npos ||
        rest.find(':') == std::string::npos) {
      return make_error(Errc::invalid_argument,
                        "etcd endpoint '" + e.substr(0, 200) + "' must be \"http://host:port\" (no path, no TLS yet)");
    }
    HttpOptions ho;
    ho.base_url = e;
    ho.connect_timeout = options.timeout;
    ho.io_timeout = options.timeout;
    auto http = HttpClient::create(ho);
    if (!http) return make_error(Errc::invalid_argument, "etcd endpoint '" + e + "': " + http.error().message);
    c->http_.push_back(std::move(*http));
  }
  return c;
}

std::string EtcdClient::endpoint() const { return options_.endpoints[current_.load() % options_.endpoints.size()]; }

Result<std::string> EtcdClient::post(const std::string& path, const std::string& body) const {
  const std::size_t n = http_.size();
  const std::size_t first = current_.load();
  Error last = make_error(Errc::unavailable, "no etcd endpoint");
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t idx = (first + i) % n;
    const Where w{options_.endpoints[idx], path};
    HttpRequest req;
    req.method = "POST";
    req.target = path;
    req.headers = {{"Content-Type", "application/json"}};
    req.body = body;
    auto r = http_[idx]->send(req, nullptr, 8u << 20);
    if (!r) {
      last = make_error(r.error().code, w.str() + ": " + r.error().message);
      if (r.error().code == Errc::unavailable || r.error().code == Errc::timeout) continue;  // the next member
      return last;
    }
    if (r->status < 200 || r->status >= 300) {
      Error e = gateway_error(*r, w);
      if (e.code == Errc::unavailable) {
        last = e;
        continue;
      }
      current_ = idx;
      return e;
    }
    current_ = idx;
    return std::move(r->body);
  }
  return last;
}

Result<std::int64_t> EtcdClient::grant(std::chrono::seconds ttl) const {
  const Where w{endpoint(), "/v3/lease/grant"};
  auto text = post(w.path, json{{"TTL", std::to_string(ttl.count())}}.dump());
  if (!text) return std::move(text).error();
  KILN_TRY_DECLARE(j, parse_object(*text, w));
  KILN_TRY_DECLARE(id, int_field(j, "ID", w));
  if (id == 0) {
    const std::string err = j.contains("error") && j["error"].is_string() ? j["error"].get<std::string>() : "no lease ID";
    return malformed(w, err);
  }
  return id;
}

Result<std::int64_t> EtcdClient::keep_alive(std::int64_t lease) const {
  const Where w{endpoint(), "/v3/lease/keepalive"};
  auto text = post(w.path, json{{"ID", std::to_string(lease)}}.dump());
  if (!text) return std::move(text).error();
  // A stream of messages, one per line; one request gives one {"result": ...}.
  const std::string first = text->substr(0, text->find('\n'));
  KILN_TRY_DECLARE(j, parse_object(first, w));
  if (j.contains("error")) {
    const json& e = j["error"];
    return make_error(Errc::unavailable, w.str() + ": " + (e.is_object() && e.contains("message") ? e["message"].dump() : e.dump()));
  }
  auto it = j.find("result");
  if (it == j.end() || !it->is_object()) return malformed(w, "no \"result\"");
  KILN_TRY_DECLARE(ttl, int_field(*it, "TTL", w));
  return ttl > 0 ? ttl : 0;  // omitted (0) or negative: the lease is gone
}

Status EtcdClient::revoke(std::int64_t lease) const {
  const Where w{endpoint(), "/v3/lease/revoke"};
  auto text = post(w.path, json{{"ID", std::to_string(lease)}}.dump());
  if (!text) {
    if (text.error().code == Errc::not_found) return {};
    return std::move(text).error();
  }
  KILN_TRY(parse_object(*text, w));
  return {};
}

Result<EtcdTxnResult> EtcdClient::txn(const std::vector<EtcdCompare>& compare, const std::vector<EtcdOp>& success,
                                      const std::vector<EtcdOp>& failure) const {
  const Where w{endpoint(), "/v3/kv/txn"};
  json body = json::object();
  json c = json::array(), s = json::array(), f = json::array();
  for (const auto& x : compare) c.push_back(compare_json(x));
  for (const auto& x : success) s.push_back(op_json(x));
  for (const auto& x : failure) f.push_back(op_json(x));
  if (!c.empty()) body["compare"] = c;
  if (!s.empty()) body["success"] = s;
  if (!f.empty()) body["failure"] = f;
  auto text = post(w.path, body.dump());
  if (!text) return std::move(text).error();
  KILN_TRY_DECLARE(j, parse_object(*text, w));
  EtcdTxnResult out;
  if (auto it = j.find("succeeded"); it != j.end()) {
    if (!it->is_boolean()) return malformed(w, "\"succeeded\" is not a boolean");
    out.succeeded = it->get<bool>();  // omitted when false
  }
  if (auto h = j.find("header"); h != j.end() && h->is_object()) KILN_TRY_ASSIGN(out.revision, int_field(*h, "revision", w));
  const auto& branch = out.succeeded ? success : failure;
  std::size_t expected_ranges = 0;
  for (const auto& op : branch) expected_ranges += op.kind == EtcdOp::Kind::range;
  auto rs = j.find("responses");
  if (rs != j.end() && !rs->is_array()) return malformed(w, "\"responses\" is not an array");
  if (rs != j.end()) {
    for (const auto& r : *rs) {
      if (!r.is_object()) return malformed(w, "a response is not an object");
      if (auto rr = r.find("response_range"); rr != r.end()) {
        if (!rr->is_object()) return malformed(w, "\"response_range\" is not an object");
        KILN_TRY_DECLARE(kvs, parse_kvs(*rr, w));
        out.ranges.push_back(std::move(kvs));
      }
    }
  }
  if (out.ranges.size() != expected_ranges) {
    return malformed(w, std::to_string(out.ranges.size()) + " range responses for " + std::to_string(expected_ranges) +
                            " range operations");
  }
  return out;
}

Result<std::vector<EtcdKeyValue>> EtcdClient::range_prefix(const std::string& prefix, std::size_t limit) const {
  const Where w{endpoint(), "/v3/kv/range"};
  json body{{"key", b64(prefix)}, {"range_end", b64(etcd_prefix_end(prefix))}};
  if (limit) body["limit"] = std::to_string(limit);
  auto text = post(w.path, body.dump());
  if (!text) return std::move(text).error();
  KILN_TRY_DECLARE(j, parse_object(*text, w));
  return parse_kvs(j, w);
}

}  // namespace kiln::fleet
