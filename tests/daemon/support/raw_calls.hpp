// Requests over a RawClient that a test needs to succeed: an error reply, a closed
// connection or no reply in time fails the test (doctest REQUIRE) with what kilnd said.
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "kiln/digest.hpp"
#include "kiln/protocol/messages.hpp"
#include "support/raw_client.hpp"

namespace kiln::test {

using RawConn = std::unique_ptr<RawClient>;

// A connection to `socket` that has said HELLO.
inline RawConn connect_raw(const std::filesystem::path& socket) {
  auto c = std::make_unique<RawClient>(socket);
  c->hello();
  return c;
}

// A request and its OK reply's body.
inline std::string call_ok(RawClient& c, protocol::MsgType type, const std::string& body) {
  auto r = c.call(type, body);
  REQUIRE_MESSAGE(r.header.type == protocol::MsgType::ok, r.body);
  return r.body;
}

// BUILD of `key`, waiting until it is built and stored.
inline void build_and_wait(RawClient& c, const Key& key) {
  auto r = c.call(protocol::MsgType::build, "{\"key\":" + key.to_json() + ",\"wait\":true}");
  REQUIRE_MESSAGE(r.header.type == protocol::MsgType::ok, r.body);
}

// The artifact's bytes (a GET, descriptor delivery), or "" on a miss.
inline std::string get_bytes(RawClient& c, const Key& key) {
  auto r = c.call(protocol::MsgType::get, "{\"key\":" + key.to_json() + ",\"delivery\":\"fd\"}");
  REQUIRE_MESSAGE(r.header.type == protocol::MsgType::ok, r.body);
  if (!nlohmann::json::parse(r.body)["found"].get<bool>()) return {};
  REQUIRE(r.fd >= 0);
  std::string bytes = read_fd(r.fd);
  ::close(r.fd);
  return bytes;
}

// PUT_SOURCE of `text` as the source `name` under its SHA-256, the model hash the test
// worker's hash op gives it; returns that hash.
inline std::string put_source_text(RawClient& c, const std::string& name, const std::string& text) {
  const std::string hash = sha256(text).hex();
  protocol::PutSourceRequest req;
  req.model_hash = hash;
  req.name = name;
  req.size = text.size();
  const auto id = c.next_id();
  REQUIRE(c.send_frame(protocol::MsgType::put_source, id, protocol::encode(req)));
  REQUIRE(c.send_frame(protocol::MsgType::chunk, id, text, protocol::kFlagEnd));
  auto r = c.recv(std::chrono::seconds(60));
  REQUIRE(r.has_value());
  REQUIRE_MESSAGE(r->header.type == protocol::MsgType::ok, r->body);
  return hash;
}

}  // namespace kiln::test
