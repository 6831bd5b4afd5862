// Internal to the codec: shared declarations of the messages_*.cpp files.
#pragma once

#include "json_codec.hpp"

namespace kiln::protocol::detail {

json to_json(const ArtifactMeta& m);
json to_json(const SourceMeta& s);
void put_ref(json& j, const KeyRef& ref);
void read_ref(In& in, KeyRef& ref);
// STATUS's "gpus", "gpu_note" (when not empty) and "build_slots" (messages_sources.cpp).
void put_gpus(json& j, const std::vector<GpuEntry>& gpus, const std::string& note,
              const std::vector<BuildSlotEntry>& slots);

// Invalid UTF-8 in a message (a path, a log) is replaced rather than thrown on.
inline std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace kiln::protocol::detail

// Body of a decode<T> specialisation: parse, read fields through `in`, return.
#define KILN_DECODE_BEGIN(what)                                  \
  auto parsed_ = ::kiln::protocol::detail::parse_body(text, what); \
  if (!parsed_) return std::move(parsed_).error();               \
  ::kiln::protocol::detail::In in(*parsed_, what)
#define KILN_DECODE_END(value)               \
  if (in.error()) return *in.error();        \
  return value
