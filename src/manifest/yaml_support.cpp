#include "yaml_support.h"

#include <fmt/format.h>
#include <yaml-cpp/depthguard.h>

#include <array>
#include <utility>

namespace gracekeeper::manifest::detail {
namespace {

struct Rewrite {
  std::string_view yaml_cpp;  // yaml-cpp's message, or its prefix for those that carry data
  std::string_view ours;
};

const std::array<Rewrite, 22> kRewrites{{
    {YAML::ErrorMsg::END_OF_MAP,
     "expected a `key: value` entry or the end of the mapping (check the indentation)"},
    {YAML::ErrorMsg::END_OF_MAP_FLOW, "expected `,` or `}` in a flow mapping"},
    {YAML::ErrorMsg::END_OF_SEQ,
     "expected a `- ` entry or the end of the sequence (check the indentation)"},
    {YAML::ErrorMsg::END_OF_SEQ_FLOW, "expected `,` or `]` in a flow sequence"},
    {YAML::ErrorMsg::MAP_VALUE,
     "unexpected `:`; expected a single value (quote values that contain `: `)"},
    {YAML::ErrorMsg::MAP_KEY, "unexpected `?`; expected a value"},
    {YAML::ErrorMsg::BLOCK_ENTRY,
     "unexpected `- `; expected a value here, not a sequence entry (check the indentation)"},
    {YAML::ErrorMsg::FLOW_END, "unexpected `]` or `}` without a matching opening bracket"},
    {YAML::ErrorMsg::TAB_IN_INDENTATION, "expected spaces for indentation, found a tab"},
    {YAML::ErrorMsg::EOF_IN_SCALAR, "expected the closing quote before the end of the input"},
    {YAML::ErrorMsg::DOC_IN_SCALAR, "expected the closing quote before the document marker"},
    {YAML::ErrorMsg::CHAR_IN_SCALAR, "unexpected character in a quoted string"},
    {YAML::ErrorMsg::UNKNOWN_ANCHOR,
     "an alias refers to an anchor that is not defined (expected `&NAME` before `*NAME`)"},
    {YAML::ErrorMsg::UNKNOWN_TOKEN, "unexpected character; expected YAML"},
    {YAML::ErrorMsg::CHAR_IN_BLOCK,
     "expected only a comment after the block scalar indicator (`|` or `>`)"},
    {YAML::ErrorMsg::ZERO_INDENT_IN_BLOCK, "expected an indentation indicator from 1 to 9"},
    {YAML::ErrorMsg::MULTIPLE_TAGS, "a node has more than one tag"},
    {YAML::ErrorMsg::MULTIPLE_ANCHORS, "a node has more than one anchor"},
    {YAML::ErrorMsg::ALIAS_CONTENT, "an alias cannot have content, a tag or an anchor"},
    {YAML::ErrorMsg::INVALID_ESCAPE, "unknown escape sequence in a double-quoted string: "},
    {YAML::ErrorMsg::INVALID_UNICODE, "invalid Unicode escape in a double-quoted string: "},
    {YAML::ErrorMsg::INVALID_HEX, "expected hexadecimal digits in an escape sequence"},
}};

}  // namespace

std::string describe_yaml_error(const YAML::Exception& e, int max_depth) {
  if (dynamic_cast<const YAML::DeepRecursion*>(&e) != nullptr) {
    return fmt::format("nesting is too deep for the YAML parser (the limit is {} levels)",
                       max_depth);
  }
  std::string_view message = e.msg;
  for (const Rewrite& rewrite : kRewrites) {
    if (message.starts_with(rewrite.yaml_cpp)) {
      std::string_view detail = message.substr(rewrite.yaml_cpp.size());
      return fmt::format("invalid YAML: {}{}", rewrite.ours, detail);
    }
  }
  return fmt::format("invalid YAML: {}", message);
}

}  // namespace gracekeeper::manifest::detail
