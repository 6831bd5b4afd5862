// torch.compile cache keys as kiln keys (see torch_key.hpp, schema/torch-cache.md).
#include "kiln/torch_cache/torch_key.hpp"

namespace kiln::torch_cache {

namespace {

// What kiln's key accepts as a text field: printable ASCII (schema/key.md allows UTF-8,
// but torch's keys are ASCII and anything else is recorded in hex).
bool printable_ascii(std::string_view s, std::size_t max) {
  if (s.empty() || s.size() > max) return false;
  for (unsigned char c : s)
    if (c < 0x20 || c >= 0x7f) return false;
  return true;
}

std::string to_hex(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() * 2);
  for (unsigned char c : s) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

}  // namespace

std::string_view cache_id_of(std::string_view k) {
  constexpr std::string_view prefix = "pt2:";
  if (k.substr(0, prefix.size()) != prefix) return {};
  auto end = k.find("::", prefix.size());
  if (end == std::string_view::npos || end == prefix.size()) return {};
  return k.substr(prefix.size(), end - prefix.size());
}

Overwrite overwrite_of(std::string_view id) {
  if (id.substr(0, 9) == "fx-graph-" || id.substr(0, 9) == "autograd-") return Overwrite::never;
  return Overwrite::last_writer_wins;
}

namespace {

// The text of compile_options: {"torch_key": ...} when printable, else {"torch_key_hex": ...},
// and "writer" for one writer's own entry. Canonical JSON as schema/key.md defines it (keys
// sorted; the only escapes printable ASCII needs are for the quote and the backslash; a
// writer is kiln's own "uid:<n>" or "tcp").
std::string options_of(std::string_view redis_key, std::string_view writer) {
  std::string out;
  if (printable_ascii(redis_key, kMaxKeyBytes)) {
    out.reserve(redis_key.size() + 40);
    out += "{\"torch_key\":\"";
    for (char c : redis_key) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
  } else {
    out = "{\"torch_key_hex\":\"" + to_hex(redis_key);
  }
  out += '"';
  if (!writer.empty()) {
    out += ",\"writer\":\"";
    out += writer;
    out += '"';
  }
  out += '}';
  return out;
}

}  // namespace

Key TorchKey::kiln_key() const {
  Key k;
  k.kind = ArtifactKind::torch_cache;
  k.model_hash = sha256(text).hex();
  k.region = cache_id.empty() ? "-" : cache_id;
  for (auto* f : {&k.gpu_arch, &k.gpu_name, &k.torch_version, &k.torch_git, &k.cuda_version, &k.triton_version,
                  &k.platform, &k.machine, &k.cpu_isa, &k.dtype})
    *f = "-";
  k.compile_options = options_of(text, writer);
  return k;
}

namespace {

// Key::canonical_encoding() of t.kiln_key(), written directly (schema/key.md; the unit test
// holds the two equal): this runs for every GET.
Digest digest_of(const TorchKey& t) {
  std::string enc = "kiln-key\n";
  enc.reserve(512 + 2 * t.text.size());
  append_key_field(enc, "kind", "torch_cache");
  append_key_field(enc, "model_hash", sha256(t.text).hex());
  append_key_field(enc, "region", t.cache_id.empty() ? std::string_view("-") : std::string_view(t.cache_id));
  for (const char* f : {"gpu_arch", "gpu_name", "torch_version", "torch_git", "cuda_version", "triton_version",
                        "platform", "machine", "cpu_isa", "dtype"})
    append_key_field(enc, f, "-");
  append_key_field(enc, "inputs", "[]");
  static const std::string call = positional_call(0);  // no inputs: the empty positional call
  append_key_field(enc, "call", call);
  append_key_field(enc, "compile_options", options_of(t.text, t.writer));
  append_key_field(enc, "format_version", std::to_string(kKeyFormatVersion));
  return sha256(enc);
}

}  // namespace

TorchKey with_writer(const TorchKey& key, std::string writer) {
  TorchKey t = key;
  t.writer = std::move(writer);
  t.digest = digest_of(t);
  return t;
}

Result<TorchKey> map_torch_key(std::string_view redis_key) {
  if (redis_key.empty()) return make_error(Errc::invalid_argument, "empty key");
  if (redis_key.size() > kMaxKeyBytes)
    return make_error(Errc::invalid_argument, "key of " + std::to_string(redis_key.size()) + " bytes (at most " +
                                                  std::to_string(kMaxKeyBytes) + ")");
  TorchKey t;
  t.text = std::string(redis_key);
  auto id = cache_id_of(redis_key);
  t.cache_id = printable_ascii(id, 256) ? std::string(id) : std::string();
  t.overwrite = overwrite_of(t.cache_id);
  t.digest = digest_of(t);
  return t;
}

}  // namespace kiln::torch_cache
