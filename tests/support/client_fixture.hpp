// A libkiln client of a test kilnd (tests that link kiln::client): connected to the
// kilnd's socket, or the test fails (REQUIRE) with the connection error. And list
// queries in one line.
#pragma once

#include <doctest/doctest.h>

#include <cstddef>
#include <filesystem>
#include <string>
#include <utility>

#include "kiln/client/client.hpp"

namespace kiln::test {

// `transfer` defaults to libkiln's own default (ConnectOptions).
inline client::Client connect_client(const std::filesystem::path& socket,
                                     client::Transfer transfer = client::ConnectOptions{}.transfer) {
  client::ConnectOptions o;
  o.socket = socket;
  o.transfer = transfer;
  auto c = client::Client::connect(o);
  REQUIRE_MESSAGE(c, (c ? "" : c.error().to_string()));
  return std::move(*c);
}

inline client::ListQuery query_filter(const std::string& field, const std::string& value) {
  client::ListQuery q;
  q.filters[field] = value;
  return q;
}
inline client::ListQuery query_pinned() {
  client::ListQuery q;
  q.pinned = true;
  return q;
}
inline client::ListQuery query_limit(std::size_t n) {
  client::ListQuery q;
  q.limit = n;
  return q;
}

}  // namespace kiln::test
