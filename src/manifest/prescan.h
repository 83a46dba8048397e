// Linear checks over the raw text, run before yaml-cpp sees it; private to
// src/manifest.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "gracekeeper/manifest/document.h"

namespace gracekeeper::manifest::detail {

// What a scan of the raw text finds before yaml-cpp sees it (nullopt when
// nothing):
// - the first `[` or `{` that opens a flow collection nested deeper than
//   `max_depth`. yaml-cpp scans a whole flow collection into tokens before
//   its parser (and our depth limit) sees the first one, so two megabytes of
//   `[` would cost hundreds of megabytes first;
// - a line at column 0 of block context that opens a plain scalar with no
//   `:` within 1024 characters (YAML 1.2's limit on implicit keys, as go-yaml
//   has it): garbage that yaml-cpp would scan to its end (about 4 MB/s) is
//   rejected where it becomes invalid;
// - an outermost flow collection longer than `max_flow_bytes` (from its `[`
//   or `{` to its `]` or `}`, line breaks and all), found where the limit is
//   crossed: yaml-cpp holds every token of a flow collection until it closes
//   (a plain scalar in it might yet be a key), ~16x the text.
// One pass that holds nothing. It follows quotes, comments and block
// scalars, so brackets inside strings never count.
struct Prescan {
  enum class Problem { TooDeep, NoColonAfterKey, FlowTooLong };
  // The `[` or `{` too deep, the line's start, or the `[` or `{` that opens
  // the collection too long.
  std::size_t offset = 0;
  Problem problem = Problem::TooDeep;
};
// `blank_tabs`, when given, is set when the text has a blank line with a
// tab that blank_lines_without_tabs rewrites.
std::optional<Prescan> prescan(std::string_view text, int max_depth, std::size_t max_flow_bytes,
                               bool* blank_tabs = nullptr);

// YAML allows a lone CR as a line break (old Mac files); yaml-cpp does not.
// Rewrites each lone CR to LF in place, byte for byte, so every offset and
// line number stays the same. True when something changed.
bool normalise_line_breaks(std::string& text);
bool has_lone_cr(std::string_view text);

// A line of nothing but blanks is an empty line to YAML wherever it stands
// (tabs included: YAML 1.2's l-empty and l-comment), but yaml-cpp refuses a
// tab on it in block context, except right after a flow collection. So a
// stray tab made a file read or not depending on what came before it, and
// an edit above it could make a file that read stop reading. A copy of the
// text with those tabs made spaces, byte for byte (offsets and line numbers
// stay), outside quoted scalars and flow collections (where yaml-cpp takes
// them), block scalars (where they are content) and the line that ends a
// block scalar. `max_depth` as for prescan, which must have found nothing
// (and said there is such a line).
std::string blank_lines_without_tabs(std::string_view text, int max_depth);

// The text as one strict JSON object starting at offset `first` (the first
// byte that is not a blank or line break), decoded in one streaming pass
// (json_fast.cpp); nullopt when it is anything else, which the YAML reader
// then reads (and names the error of) as before. yaml-cpp tokenises a whole
// flow document before its first event: ~8x the text.
//
// Nesting deeper than `max_depth` is not read here (nullopt): the prescan
// that bounds it may have stopped before the end (at a flow collection too
// long, which only this parser may then read).
//
// With `items`, each item of the object's top-level `items` array goes to
// items->sink as soon as it is read (with the offset where it starts), not
// into the value; the sink returns false to stop (then nullopt, `stopped`).
struct JsonItems {
  std::function<bool(Json&&, std::size_t)> sink;
  std::size_t handed_out = 0;
  bool stopped = false;
};
std::optional<Json> read_json_object(std::string_view text, std::size_t first, int max_depth,
                                     JsonItems* items = nullptr);

}  // namespace gracekeeper::manifest::detail
