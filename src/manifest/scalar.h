// Scalar resolution shared by the reader (text -> value) and the writer (which
// must know when a string would read back as something else and so needs quotes).
#pragma once

#include <expected>
#include <string>
#include <string_view>

#include "gracekeeper/manifest/document.h"

namespace gracekeeper::manifest::detail {

// yaml-cpp spells the core tags in their long form.
inline constexpr std::string_view kCoreTagPrefix = "tag:yaml.org,2002:";

// A plain (unquoted, untagged) scalar as Kubernetes' YAML decoder (go-yaml v2,
// YAML 1.1 rules) reads it: null, bool (true/yes/on/y and their negations),
// int64 (decimal, 0x, 0o, 0b, legacy 0777 octal, `_` separators), float
// (incl. .inf/.nan), else string. An integer that does not fit int64 is an error.
std::expected<Json, std::string> resolve_plain(std::string_view text);

// A scalar with an explicit tag as yaml-cpp reports it ("!" for quoted and
// non-specific, "tag:yaml.org,2002:int" for `!!int`, ...). Tags outside the
// core schema's scalar tags are errors.
std::expected<Json, std::string> resolve_tagged(std::string_view tag, std::string_view text);

// True when `text`, written plain, would read back as the same string (and
// would also stay a string for YAML 1.1 readers, timestamps included).
bool plain_reads_as_string(std::string_view text);

// "!!int" for the long core form, the tag itself otherwise; for messages.
std::string display_tag(std::string_view tag);

}  // namespace gracekeeper::manifest::detail
