// kiln/fleet/etcd_client.hpp — the subset of etcd's v3 API that fleet-wide build
// coordination needs (leases, transactions, ranges), spoken through etcd's JSON gateway
// (`/v3/...`, etcd 3.4 as Debian ships it) over plain HTTP with HttpClient.
//
// Gateway quirks handled here (schema/etcd-coordination.md): keys and values travel as
// base64; 64-bit numbers arrive as JSON strings; fields that are false or zero are omitted
// (a failed transaction has no `succeeded`, a lease that is gone answers a keepalive with
// no `TTL`); errors come back as `{"error", "code", "message"}` with a gRPC code.
//
// Several endpoints (members of one cluster) may be given: a call goes to the endpoint
// that answered last and, when that one cannot be reached, to the next, each tried once
// per call. Every step of a call is bounded by `timeout`, so a call never blocks for more
// than endpoints × timeout.
//
// Errors: unavailable (no endpoint could be reached, or etcd says it is unavailable),
// timeout, not_found (etcd: "requested lease not found"), protocol_error (a reply that
// is not the JSON the gateway sends: the message names the endpoint and the path),
// invalid_argument (etcd refused the request).
//
// Thread safety: an EtcdClient is safe for concurrent use from many threads.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/fleet/http_client.hpp"
#include "kiln/result.hpp"

namespace kiln::fleet {

struct EtcdKeyValue {
  std::string key;
  std::string value;
  std::int64_t create_revision = 0;
  std::int64_t mod_revision = 0;
  std::int64_t lease = 0;  // 0 = none
};

// A comparison in a transaction; every comparison is EQUAL.
struct EtcdCompare {
  enum class Target { create_revision, mod_revision, lease };
  std::string key;
  Target target = Target::create_revision;
  std::int64_t value = 0;  // create_revision 0 = the key does not exist
};

// An operation in a transaction.
struct EtcdOp {
  enum class Kind { put, range, erase };
  Kind kind = Kind::range;
  std::string key;
  std::string value;       // put
  std::int64_t lease = 0;  // put: attach to this lease (0 = none)
};

struct EtcdTxnResult {
  bool succeeded = false;
  std::int64_t revision = 0;                      // the store's revision after the transaction
  std::vector<std::vector<EtcdKeyValue>> ranges;  // one per range op of the branch taken, in order
};

struct EtcdOptions {
  std::vector<std::string> endpoints;             // "http://host:port", at least one
  std::chrono::milliseconds timeout{1000};        // connect, and every read or write after it
};

class EtcdClient {
 public:
  // invalid_argument when no endpoint is given or one is not "http://host:port" (etcd's
  // client TLS is not supported yet: run etcd on loopback or a private network).
  static Result<std::unique_ptr<EtcdClient>> create(const EtcdOptions& options);

  // A new lease of `ttl` (etcd may raise a TTL below its minimum). Returns its ID.
  Result<std::int64_t> grant(std::chrono::seconds ttl) const;
  // Refreshes a lease. Returns its remaining TTL in seconds; 0 when the lease is gone
  // (expired or revoked): everything attached to it has been deleted.
  Result<std::int64_t> keep_alive(std::int64_t lease) const;
  // Revokes a lease, deleting what is attached to it. ok when it was already gone.
  Status revoke(std::int64_t lease) const;
  // One transaction: if every comparison holds, `success` runs, else `failure`.
  Result<EtcdTxnResult> txn(const std::vector<EtcdCompare>& compare, const std::vector<EtcdOp>& success,
                            const std::vector<EtcdOp>& failure) const;
  // Keys starting with `prefix`, in key order, at most `limit` (0 = all).
  Result<std::vector<EtcdKeyValue>> range_prefix(const std::string& prefix, std::size_t limit = 0) const;

  // The endpoint that answered last (for status and logs).
  std::string endpoint() const;

 private:
  explicit EtcdClient(EtcdOptions options) : options_(std::move(options)) {}
  // POSTs a JSON body to `path` on the current endpoint, failing over; the reply's JSON text.
  Result<std::string> post(const std::string& path, const std::string& body) const;

  EtcdOptions options_;
  std::vector<std::shared_ptr<const HttpClient>> http_;  // one per endpoint, immutable after create()
  mutable std::atomic<std::size_t> current_{0};
};

// The key just after every key starting with `prefix` (etcd's range_end for a prefix).
std::string etcd_prefix_end(std::string prefix);

}  // namespace kiln::fleet
