// Linear checks over the raw text, run before yaml-cpp sees it; private to
// src/manifest.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "gracekeeper/manifest/document.h"

namespace gracekeeper::manifest::detail {

// The offset of the first `[` or `{` that opens a flow collection nested
// deeper than `max_depth`, or nullopt. yaml-cpp scans a whole flow collection
// into tokens before its parser (and our depth limit) sees the first one, so
// two megabytes of `[` would cost hundreds of megabytes first: this scan
// finds the problem in one pass and holds nothing. It follows quotes,
// comments and block scalars, so brackets inside strings never count.
std::optional<std::size_t> find_too_deep(std::string_view text, int max_depth);

// YAML allows a lone CR as a line break (old Mac files); yaml-cpp does not.
// Rewrites each lone CR to LF in place, byte for byte, so every offset and
// line number stays the same. True when something changed.
bool normalise_line_breaks(std::string& text);
bool has_lone_cr(std::string_view text);

// The text as one strict JSON object starting at offset `first` (the first
// byte that is not a blank or line break), decoded in one streaming pass
// (json_fast.cpp); nullopt when it is anything else, which the YAML reader
// then reads (and names the error of) as before. yaml-cpp tokenises a whole
// flow document before its first event: ~8x the text.
std::optional<Json> read_json_object(std::string_view text, std::size_t first);

}  // namespace gracekeeper::manifest::detail
