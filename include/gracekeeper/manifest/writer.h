// Writes decoded documents back out as YAML (a `---`-separated stream) or
// JSON. The YAML is plain block style, keys in their original order, strings
// quoted only where a reader would otherwise see another type.
#pragma once

#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "gracekeeper/manifest/document.h"

namespace gracekeeper::manifest {

// One scalar as YAML would write it in block context: plain where a reader
// (YAML 1.2, and 1.1 like kubectl's) reads the same value back, else
// double-quoted. Collections give `{}` / `[]`.
std::string scalar_yaml(const Json& value);

// A string double-quoted, every control character escaped.
std::string double_quoted_yaml(std::string_view text);

// Whether a string may be written plain in block context.
bool plain_yaml_ok(std::string_view text);

// A value in flow style on one line: `{sleep: {seconds: 15}}`.
std::string to_flow_yaml(const Json& value);

// One YAML document, without a leading `---`.
std::string to_yaml(const Json& value);

// Several documents: YAML joined by `---` lines.
std::string to_yaml_stream(const std::vector<Json>& documents);

// JSON: a single document as itself, several as a `v1` `List` (as kubectl does).
std::string to_json_stream(const std::vector<Json>& documents, int indent = 2);

}  // namespace gracekeeper::manifest
