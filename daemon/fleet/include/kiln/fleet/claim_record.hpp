// kiln/fleet/claim_record.hpp — the values kiln keeps in etcd to build each key once per
// fleet (schema/etcd-coordination.md): a claim (who builds a key, since when, until when)
// and a failure record (a build that failed, for the fleet to remember). Pure code on
// bytes: no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kiln/result.hpp"

namespace kiln::fleet {

// "<prefix>/claim/<key digest hex>" -> ClaimRecord, attached to the holder's lease.
struct ClaimRecord {
  std::string node;              // the holder's node_name
  std::int64_t started = 0;      // unix seconds, the holder's clock
  std::int64_t deadline = 0;     // unix seconds: past it, another node may take the claim over
  std::int64_t expected_s = 0;   // the holder's estimate of the build's duration (hedging)
};

// "<prefix>/failed/<key digest hex>" -> FailureRecord, attached to a lease of the
// failure TTL.
struct FailureRecord {
  std::string node;              // where the build ran
  std::int64_t at = 0;           // unix seconds
  std::string error;             // the build's message: the worker's last error line
};

std::string encode(const ClaimRecord& r);
std::string encode(const FailureRecord& r);
// protocol_error naming what is wrong when the bytes are not a record of format 1 (not
// JSON, a field missing or of the wrong type, a version from the future).
Result<ClaimRecord> parse_claim(std::string_view bytes);
Result<FailureRecord> parse_failure(std::string_view bytes);

std::string claim_key(std::string_view prefix, std::string_view key_hex);
std::string failure_key(std::string_view prefix, std::string_view key_hex);
std::string claims_prefix(std::string_view prefix);

}  // namespace kiln::fleet
