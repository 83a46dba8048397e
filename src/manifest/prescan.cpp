#include "prescan.h"

#include <cstdint>

namespace gracekeeper::manifest::detail {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t';
}

bool is_break(char c) {
  return c == '\n' || c == '\r';
}

// One pass over the text, line by line, with the little state YAML needs to
// tell structure from content: inside a quoted scalar (which may span lines),
// inside a block scalar (`|`, `>`: skipped while lines are indented deeper
// than the line that started it), and the current flow depth.
//
// It also stops at a line at column 0 of block context that
// opens a plain scalar and has no `:` within the 1024 characters a key may
// have (YAML 1.2's limit on implicit keys, which go-yaml enforces): that line
// can be neither a key nor (at column 0) the rest of a value. yaml-cpp would
// scan the whole line first, at about 4 MB/s.
class DepthScanner {
 public:
  // With `blank_tabs`, the tabs of blank lines (see normalise_blank_lines)
  // are rewritten there, a copy of `text`, at the same offsets.
  // `max_flow_bytes`: the longest outermost flow collection allowed.
  DepthScanner(std::string_view text, int max_depth, std::size_t max_flow_bytes,
               std::string* blank_tabs = nullptr)
      : text_(text),
        max_depth_(max_depth),
        max_flow_bytes_(max_flow_bytes),
        blank_tabs_(blank_tabs) {}

  bool saw_blank_tabs() const { return saw_blank_tabs_; }

  std::optional<Prescan> run() {
    auto deep = run_lines();
    if (!deep) return std::nullopt;
    return Prescan{*deep, problem_};
  }

 private:
  std::optional<std::size_t> run_lines() {
    while (i_ < text_.size()) {
      std::size_t indent = 0;
      line_start_ = i_;
      while (i_ < text_.size() && text_[i_] == ' ') {
        ++i_;
        ++indent;
      }
      bool scalar_ended = false;
      if (block_scalar_indent_ >= 0) {
        if (at_line_end() || static_cast<long>(indent) > block_scalar_indent_) {
          skip_line();
          continue;
        }
        block_scalar_indent_ = -1;
        scalar_ended = true;
      }
      if (depth_ == 0 && quote_ == 0 && !scalar_ended && blank_with_tab()) {
        saw_blank_tabs_ = true;
        if (blank_tabs_ != nullptr) {
          for (std::size_t j = i_; j < text_.size() && !is_break(text_[j]); ++j) {
            (*blank_tabs_)[j] = ' ';
          }
        }
        skip_line();
        continue;
      }
      if (quote_ != 0) {
        if (!scan_quoted()) return too_deep_;
      }
      if (depth_ > 0) {
        if (!scan_flow()) return too_deep_;
      }
      if (depth_ == 0 && quote_ == 0 && !scan_block(indent)) return too_deep_;
      skip_line();
    }
    return std::nullopt;
  }

  bool at_line_end() const { return i_ >= text_.size() || is_break(text_[i_]); }

  // The rest of the line is blanks, and one of them a tab.
  bool blank_with_tab() const {
    bool tab = false;
    for (std::size_t j = i_; j < text_.size() && !is_break(text_[j]); ++j) {
      if (!is_space(text_[j])) return false;
      tab = tab || text_[j] == '\t';
    }
    return tab;
  }

  void skip_line() {
    while (i_ < text_.size() && !is_break(text_[i_])) ++i_;
    while (i_ < text_.size() && is_break(text_[i_])) {
      ++i_;
      if (text_[i_ - 1] == '\n') break;
    }
  }

  // Continues a quoted scalar up to its closing quote or the end of the line.
  bool scan_quoted() {
    while (!at_line_end()) {
      const char c = text_[i_++];
      if (quote_ == '"' && c == '\\') {
        if (!at_line_end()) ++i_;
      } else if (c == quote_) {
        if (quote_ == '\'' && i_ < text_.size() && text_[i_] == '\'') {
          ++i_;
          continue;
        }
        quote_ = 0;
        return true;
      }
    }
    return true;
  }

  bool open() {
    if (depth_ == 0) flow_start_ = i_ - 1;
    if (++depth_ > max_depth_) {
      too_deep_ = i_ - 1;
      return false;
    }
    return true;
  }

  // The outermost flow collection open now has run past max_flow_bytes_
  // (counted from its `[` or `{` up to and including what was read last).
  bool too_long() {
    if (i_ - flow_start_ <= max_flow_bytes_) return false;
    problem_ = Prescan::Problem::FlowTooLong;
    too_deep_ = flow_start_;
    return true;
  }

  // Inside flow collections: every bracket outside quotes and comments counts.
  bool scan_flow() {
    while (depth_ > 0 && !at_line_end()) {
      if (too_long()) return false;
      if (quote_ != 0) {
        scan_quoted();
        continue;
      }
      const char c = text_[i_++];
      if (c == '"' || c == '\'') {
        quote_ = c;
      } else if (c == '#' && (i_ == 1 || is_space(text_[i_ - 2]))) {
        while (!at_line_end()) ++i_;
      } else if (c == '[' || c == '{') {
        if (!open()) return false;
      } else if (c == ']' || c == '}') {
        --depth_;
      }
    }
    return !too_long();  // the `]` or `}` that closed it counts
  }

  // Block context: a flow collection, a quoted scalar or a block scalar can
  // only start where a node starts, after the indentation, an indicator
  // (`- `, `? `, `: `), an anchor or a tag.
  bool scan_block(std::size_t indent) {
    while (!at_line_end()) {
      const char c = text_[i_];
      const bool indicator =
          (c == '-' || c == '?' || c == ':') &&
          (i_ + 1 >= text_.size() || is_space(text_[i_ + 1]) || is_break(text_[i_ + 1]));
      if (is_space(c) || indicator) {
        ++i_;
      } else if (c == '#') {
        return true;
      } else if (c == '&' || c == '!') {
        while (!at_line_end() && !is_space(text_[i_])) ++i_;
      } else if (c == '[' || c == '{') {
        ++i_;
        if (!open() || !scan_flow()) return false;
      } else if (c == '"' || c == '\'') {
        quote_ = c;
        ++i_;
        scan_quoted();
        if (quote_ != 0) return true;  // continues on the next line
      } else if (c == '|' || c == '>') {
        block_scalar_indent_ = static_cast<long>(indent);
        return true;
      } else if (i_ == line_start_ && !is_marker() && !skip_key()) {
        return false;
      } else if (!skip_plain()) {
        break;  // the line ends in a plain scalar or a comment
      }
    }
    return true;
  }

  // `---` or `...` at the start of a line: a document marker.
  bool is_marker() const {
    const std::string_view rest = text_.substr(i_);
    return (rest.starts_with("---") || rest.starts_with("...")) &&
           (rest.size() == 3 || is_space(rest[3]) || is_break(rest[3]));
  }

  // A plain scalar at column 0 (`,`, `]`, `}`, `%`, `@` and a backquote
  // cannot start one; yaml-cpp names those): a key whose `:` must come
  // within 1024 characters. False, with the line's start, when it does not.
  bool skip_key() {
    const char c = text_[i_];
    if (c == ',' || c == ']' || c == '}' || c == '%' || c == '@' || c == '`') return true;
    constexpr std::size_t max_key_characters = 1024;
    std::size_t characters = 0;
    for (std::size_t j = i_; j < text_.size() && !is_break(text_[j]); ++j) {
      const char k = text_[j];
      if (k == ':' && (j + 1 == text_.size() || is_space(text_[j + 1]) || is_break(text_[j + 1]))) {
        return true;
      }
      if (k == '#' && j > i_ && is_space(text_[j - 1])) return true;  // a comment: ends the line
      if ((static_cast<unsigned char>(k) & 0xC0) != 0x80 && ++characters > max_key_characters) {
        problem_ = Prescan::Problem::NoColonAfterKey;
        too_deep_ = line_start_;
        return false;
      }
    }
    return true;  // a short line without `:`: the reader names it
  }

  // A plain scalar in block context; true when it was a key (`: ` follows)
  // and the scan continues with its value on this line.
  bool skip_plain() {
    while (!at_line_end()) {
      const char c = text_[i_++];
      if (c == ':' && (at_line_end() || is_space(text_[i_]))) return true;
      if (c == '#' && i_ >= 2 && is_space(text_[i_ - 2])) {
        while (!at_line_end()) ++i_;
        return false;
      }
    }
    return false;
  }

  std::string_view text_;
  int max_depth_;
  std::size_t max_flow_bytes_;
  std::string* blank_tabs_;
  bool saw_blank_tabs_ = false;
  Prescan::Problem problem_ = Prescan::Problem::TooDeep;
  std::size_t flow_start_ = 0;  // the outermost flow collection's `[` or `{`
  std::size_t line_start_ = 0;
  std::size_t i_ = 0;
  int depth_ = 0;
  char quote_ = 0;
  long block_scalar_indent_ = -1;
  std::optional<std::size_t> too_deep_;
};

}  // namespace

std::optional<Prescan> prescan(std::string_view text, int max_depth, std::size_t max_flow_bytes,
                               bool* blank_tabs) {
  DepthScanner scanner(text, max_depth, max_flow_bytes);
  auto found = scanner.run();
  if (blank_tabs != nullptr) *blank_tabs = scanner.saw_blank_tabs();
  return found;
}

std::string blank_lines_without_tabs(std::string_view text, int max_depth) {
  std::string copy(text);
  DepthScanner(text, max_depth, SIZE_MAX, &copy).run();
  return copy;
}

bool has_lone_cr(std::string_view text) {
  for (std::size_t i = text.find('\r'); i != std::string_view::npos; i = text.find('\r', i + 1)) {
    if (i + 1 == text.size() || text[i + 1] != '\n') return true;
  }
  return false;
}

bool normalise_line_breaks(std::string& text) {
  if (!has_lone_cr(text)) return false;
  bool changed = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\r' && (i + 1 == text.size() || text[i + 1] != '\n')) {
      text[i] = '\n';
      changed = true;
    }
  }
  return changed;
}

}  // namespace gracekeeper::manifest::detail
