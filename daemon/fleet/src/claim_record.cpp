// The coordination records in etcd. See kiln/fleet/claim_record.hpp.
#include "kiln/fleet/claim_record.hpp"

#include <nlohmann/json.hpp>

namespace kiln::fleet {

namespace {

using json = nlohmann::json;

Error bad(const char* what, const std::string& why) {
  return make_error(Errc::protocol_error, std::string("malformed ") + what + " in etcd: " + why);
}

Result<json> object_v1(std::string_view bytes, const char* what) {
  json j = json::parse(bytes, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return bad(what, "not a JSON object");
  if (!j.contains("v") || !j["v"].is_number_integer()) return bad(what, "no format version \"v\"");
  if (j["v"].get<int>() != 1) return bad(what, "format " + j["v"].dump() + ", this kilnd reads format 1");
  return j;
}

Status need_string(const json& j, const char* name, const char* what, std::string& out) {
  if (!j.contains(name) || !j[name].is_string()) return bad(what, std::string("\"") + name + "\" is missing or not a string");
  out = j[name].get<std::string>();
  return {};
}

Status need_int(const json& j, const char* name, const char* what, std::int64_t& out) {
  if (!j.contains(name) || !j[name].is_number_integer()) return bad(what, std::string("\"") + name + "\" is missing or not an integer");
  out = j[name].get<std::int64_t>();
  return {};
}

}  // namespace

std::string encode(const ClaimRecord& r) {
  return json{{"v", 1}, {"node", r.node}, {"started", r.started}, {"deadline", r.deadline}, {"expected_s", r.expected_s}}
      .dump();
}

std::string encode(const FailureRecord& r) {
  return json{{"v", 1}, {"node", r.node}, {"at", r.at}, {"error", r.error}}.dump();
}

Result<ClaimRecord> parse_claim(std::string_view bytes) {
  auto j = object_v1(bytes, "claim");
  if (!j) return std::move(j).error();
  ClaimRecord r;
  KILN_TRY(need_string(*j, "node", "claim", r.node));
  KILN_TRY(need_int(*j, "started", "claim", r.started));
  KILN_TRY(need_int(*j, "deadline", "claim", r.deadline));
  KILN_TRY(need_int(*j, "expected_s", "claim", r.expected_s));
  return r;
}

Result<FailureRecord> parse_failure(std::string_view bytes) {
  auto j = object_v1(bytes, "failure record");
  if (!j) return std::move(j).error();
  FailureRecord r;
  KILN_TRY(need_string(*j, "node", "failure record", r.node));
  KILN_TRY(need_int(*j, "at", "failure record", r.at));
  KILN_TRY(need_string(*j, "error", "failure record", r.error));
  return r;
}

std::string claims_prefix(std::string_view prefix) { return std::string(prefix) + "/claim/"; }
std::string claim_key(std::string_view prefix, std::string_view key_hex) { return claims_prefix(prefix) + std::string(key_hex); }
std::string failure_key(std::string_view prefix, std::string_view key_hex) {
  return std::string(prefix) + "/failed/" + std::string(key_hex);
}

}  // namespace kiln::fleet
