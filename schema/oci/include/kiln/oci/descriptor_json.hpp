// kiln/oci/descriptor_json.hpp — Descriptor <-> JSON, shared by the layout writer and
// reader (kiln_oci), the kiln mapping and the registry client. Not installed.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "kiln/oci/descriptor.hpp"

namespace kiln::oci::detail {

nlohmann::json descriptor_to_json(const Descriptor& d);
// `where` names the JSON location in errors ("index.json manifests[3]").
Result<Descriptor> descriptor_from_json(const nlohmann::json& j, const std::string& where);
// Parses JSON text; invalid_argument naming `where` when it does not parse or is not an object.
Result<nlohmann::json> parse_json_object(std::string_view text, const std::string& where);
// kiln's JSON text: keys sorted (nlohmann's default), no whitespace.
inline std::string dump(const nlohmann::json& j) { return j.dump(); }

}  // namespace kiln::oci::detail
