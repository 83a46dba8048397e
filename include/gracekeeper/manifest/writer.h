// Writes decoded documents back out as YAML (a `---`-separated stream) or
// JSON. The YAML is plain block style, keys in their original order, strings
// quoted only where a reader would otherwise see another type.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "gracekeeper/manifest/document.h"

namespace gracekeeper::manifest {

// One YAML document, without a leading `---`.
std::string to_yaml(const Json& value);

// Several documents: YAML joined by `---` lines.
std::string to_yaml_stream(const std::vector<Json>& documents);

// JSON: a single document as itself, several as a `v1` `List` (as kubectl does).
std::string to_json_stream(const std::vector<Json>& documents, int indent = 2);

}  // namespace gracekeeper::manifest
