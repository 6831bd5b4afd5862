// A PUT or PUT_SOURCE whose chunks are arriving: the store's stream and what the
// request promised (size, digest) to check at END.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "kiln/daemon/build_service.hpp"
#include "kiln/digest.hpp"
#include "kiln/key.hpp"
#include "kiln/protocol/frame.hpp"
#include "kiln/storage/store.hpp"

namespace kiln::daemon {

struct Upload {
  protocol::MsgType type = protocol::MsgType::put;
  std::chrono::steady_clock::time_point received;
  std::unique_ptr<storage::PutStream> stream;   // used on the store pool only
  // PUT
  Key key;
  Digest key_digest;
  storage::PutMeta meta;
  // PUT_SOURCE
  std::string model_hash;      // empty until the check computed it, when the uploader sent none
  bool computed_hash = false;  // the node computed it: an existing source of that hash is this one
  std::string name;
  // The bytes again, for the build worker's hash op before the source is stored (null: this
  // node cannot build, and stores sources unverified). Touched on the store pool only.
  std::unique_ptr<SourceCheck> check;
  // Promises checked at END.
  std::optional<std::uint64_t> expect_size;
  std::optional<Digest> expect_blob;
  std::unique_ptr<Sha256> sha;   // set when expect_blob is
  std::uint64_t received_bytes = 0;
  // An AOTI package's bytes, kept (up to kMaxAotiCopy) so that its own metadata can be
  // checked against the key at END (kiln/aoti_metadata.hpp). Touched on the store pool only.
  static constexpr std::size_t kMaxAotiCopy = 256u << 20;
  bool keep_aoti_copy = false;
  std::string aoti_copy;
};

}  // namespace kiln::daemon
