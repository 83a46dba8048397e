#include "gracekeeper/budget/shell.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <optional>
#include <string_view>

namespace gracekeeper::budget {
namespace {

enum class Shell { Bash, Ash, Other };

std::string_view basename(std::string_view path) {
  const auto slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::optional<Shell> shell_named(std::string_view program) {
  const std::string_view name = basename(program);
  if (name == "bash") return Shell::Bash;
  if (name == "ash") return Shell::Ash;
  // `sh` is dash, busybox ash or bash depending on the image; dash execs the
  // last command of -c only since 0.5.11 (Ubuntu 20.04 ships 0.5.10).
  constexpr std::array<std::string_view, 5> others{"sh", "dash", "zsh", "ksh", "mksh"};
  if (std::find(others.begin(), others.end(), name) != others.end()) return Shell::Other;
  return std::nullopt;
}

bool is_assignment(std::string_view word) {
  const auto equals = word.find('=');
  if (equals == 0 || equals == std::string_view::npos) return false;
  return std::all_of(word.begin(), word.begin() + static_cast<std::ptrdiff_t>(equals), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

// One token of a command string: a word, or an operator (";", "&&", "||",
// "|", "&", "\n", "(", ")", a redirection ">", or "<<" for a here-document).
struct Token {
  bool word = false;
  std::string text;
};

bool is_meta(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == ';' || c == '&' || c == '|' || c == '<' ||
         c == '>' || c == '(' || c == ')';
}

// Splits a command string into tokens the way a POSIX shell does at the top
// level; quotes, `$(...)`, `${...}` and backquotes stay inside their word.
// nullopt when the string is not understood (an unterminated quote).
class Lexer {
 public:
  explicit Lexer(std::string_view text) : s_(text) {}

  std::optional<std::vector<Token>> run() {
    std::vector<Token> out;
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == ' ' || c == '\t' || (c == '\\' && i_ + 1 < s_.size() && s_[i_ + 1] == '\n')) {
        i_ += c == '\\' ? 2 : 1;
      } else if (c == '#') {
        while (i_ < s_.size() && s_[i_] != '\n') ++i_;  // a comment
      } else if (is_meta(c)) {
        out.push_back({false, operator_at()});
      } else {
        auto word = word_at();
        if (!word) return std::nullopt;
        // "2>" : digits right before a redirection belong to it.
        if (i_ < s_.size() && (s_[i_] == '<' || s_[i_] == '>') &&
            std::all_of(word->begin(), word->end(),
                        [](char d) { return std::isdigit(static_cast<unsigned char>(d)); })) {
          out.push_back({false, operator_at()});
        } else {
          out.push_back({true, std::move(*word)});
        }
      }
    }
    return out;
  }

 private:
  std::string operator_at() {
    const char c = s_[i_];
    const char next = i_ + 1 < s_.size() ? s_[i_ + 1] : '\0';
    if ((c == '&' || c == '|' || c == ';') && next == c) {
      i_ += 2;
      return std::string(2, c);  // ";;" only appears inside case: it stops the analysis
    }
    if (c == '<' && next == '<') {
      i_ += 2;
      return "<<";
    }
    if (c == '<' || c == '>') {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '>' || s_[i_] == '&' || s_[i_] == '|')) ++i_;
      return ">";
    }
    ++i_;
    return std::string(1, c);
  }

  // Skips a quoted or nested part starting at i_; false when it never ends.
  bool skip_nested() {
    const char c = s_[i_];
    if (c == '\\') {
      i_ += 2;
      return i_ <= s_.size();
    }
    if (c == '\'') {
      const auto end = s_.find('\'', i_ + 1);
      if (end == std::string_view::npos) return false;
      i_ = end + 1;
      return true;
    }
    if (c == '`') {
      for (++i_; i_ < s_.size() && s_[i_] != '`'; ++i_) {
        if (s_[i_] == '\\') ++i_;
      }
      if (i_ >= s_.size()) return false;
      ++i_;
      return true;
    }
    if (c == '"') {
      for (++i_; i_ < s_.size() && s_[i_] != '"';) {
        if (s_[i_] == '\\') {
          i_ += 2;
        } else if (s_[i_] == '$' || s_[i_] == '`') {
          if (!skip_dollar_or_backquote()) return false;
        } else {
          ++i_;
        }
      }
      if (i_ >= s_.size()) return false;
      ++i_;
      return true;
    }
    return skip_dollar_or_backquote();
  }

  // `$(...)`, `$((...))`, `${...}`, a backquoted command, or a plain `$`.
  bool skip_dollar_or_backquote() {
    if (s_[i_] == '`') return skip_nested();
    const char next = i_ + 1 < s_.size() ? s_[i_ + 1] : '\0';
    if (next != '(' && next != '{') {
      ++i_;
      return true;
    }
    const char open = next;
    const char close = open == '(' ? ')' : '}';
    int depth = 1;
    for (i_ += 2; i_ < s_.size() && depth > 0;) {
      const char c = s_[i_];
      if (c == '\\' || c == '\'' || c == '"' || c == '`') {
        if (!skip_nested()) return false;
        continue;
      }
      if (c == open) ++depth;
      if (c == close) --depth;
      ++i_;
    }
    return depth == 0;
  }

  std::optional<std::string> word_at() {
    const std::size_t start = i_;
    while (i_ < s_.size() && !is_meta(s_[i_])) {
      const char c = s_[i_];
      if (c == '\\' || c == '\'' || c == '"' || c == '`' || c == '$') {
        if (!skip_nested()) return std::nullopt;
      } else {
        ++i_;
      }
    }
    return std::string(s_.substr(start, i_ - start));
  }

  std::string_view s_;
  std::size_t i_ = 0;
};

bool reserved(std::string_view word) {
  constexpr std::array<std::string_view, 22> words{
      "if",  "then", "else",   "elif",     "fi", "do", "done", "case", "esac", "while", "until",
      "for", "in",   "select", "function", "{",  "}",  "!",    "[[",   "]]",   "time",  "coproc"};
  return std::find(words.begin(), words.end(), word) != words.end();
}

// Whether the command string reaches `exec PROGRAM` for certain: every
// command before it is a simple command joined by `;`, `&&` or a newline
// (`cd /app && exec java`, `set -e; exec java`), and the exec is not part of
// a pipeline or run in the background. Anything else (if, loops, subshells,
// `||`, pipes, here-documents) is not followed, so it is not certain.
bool reaches_exec(const std::vector<Token>& tokens) {
  std::size_t i = 0;
  while (i < tokens.size()) {
    // One simple command: [assignments] [redirections] words...
    bool first = true, exec = false, program = false;
    for (; i < tokens.size() && (tokens[i].word || tokens[i].text == ">"); ++i) {
      const Token& t = tokens[i];
      if (!t.word) {
        ++i;  // the redirection's target
        if (i >= tokens.size() || !tokens[i].word) return false;
        continue;
      }
      if (first && is_assignment(t.text)) continue;
      if (first) {
        if (reserved(t.text)) return false;
        exec = t.text == "exec";
        first = false;
      } else if (exec) {
        program = true;
      }
    }
    const std::string separator = i < tokens.size() ? tokens[i].text : "";
    if (exec && program) return separator != "|" && separator != "&";
    if (first && separator == "(") return false;  // a subshell
    if (separator == ";" || separator == "\n" || separator == "&&") {
      ++i;
      continue;
    }
    return false;  // the end without an exec, or `||`, `|`, `&`, `(`, `<<`, ...
  }
  return false;
}

// Builtins that run in the shell itself: nothing is exec'd for them.
bool builtin(std::string_view word) {
  constexpr std::array<std::string_view, 18> words{
      "cd",   "set",   "export", "source", ".",     "eval",  "trap",   "wait",  "exit",
      "true", "false", ":",      "read",   "shift", "unset", "ulimit", "umask", "exec"};
  return std::find(words.begin(), words.end(), word) != words.end();
}

// One simple command with no operator at all, not a builtin: bash and busybox
// ash exec it in place of the shell (`bash -c 'java -jar app.jar'` leaves
// java as PID 1).
bool single_simple_command(const std::vector<Token>& tokens) {
  std::size_t end = tokens.size();
  while (end > 0 && !tokens[end - 1].word && tokens[end - 1].text == "\n") --end;
  if (end == 0) return false;
  std::size_t i = 0;
  while (i < end && tokens[i].word && is_assignment(tokens[i].text)) ++i;
  if (i >= end) return false;
  for (std::size_t k = i; k < end; ++k) {
    if (!tokens[k].word) return false;
    // Command substitution runs another process first: keep to the plain case.
    if (tokens[k].text.find("$(") != std::string::npos ||
        tokens[k].text.find('`') != std::string::npos) {
      return false;
    }
  }
  return !reserved(tokens[i].text) && !builtin(tokens[i].text);
}

}  // namespace

ShellForm classify_entrypoint(const std::vector<std::string>& argv) {
  std::size_t i = 0;
  // `/usr/bin/env [-i] [NAME=value...] sh -c ...` and `busybox sh -c ...`.
  bool busybox = false;
  if (i < argv.size() && basename(argv[i]) == "env") {
    for (++i; i < argv.size() && (argv[i] == "-i" || argv[i] == "-" || is_assignment(argv[i]));) {
      ++i;
    }
  }
  if (i < argv.size() && basename(argv[i]) == "busybox") {
    busybox = true;
    ++i;
  }
  if (i >= argv.size()) return ShellForm::NotShell;
  auto shell = shell_named(argv[i]);
  if (!shell) return ShellForm::NotShell;
  if (busybox && basename(argv[i]) == "sh") shell = Shell::Ash;

  bool command_string = false, login = false;
  for (++i; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.starts_with("--")) {
      if (arg == "--login") login = true;
      if (arg == "--rcfile" || arg == "--init-file") ++i;
      continue;
    }
    if (arg.size() < 2 || (arg[0] != '-' && arg[0] != '+')) break;
    // A cluster of one-letter flags: `-c`, `-ec`, `-lc`, `-e -c`, `+x`.
    bool takes_argument = false;
    for (char flag : std::string_view(arg).substr(1)) {
      if (flag == 'c' && arg[0] == '-') command_string = true;
      if (flag == 'l' || flag == 'i') login = true;  // profiles may set traps: not certain
      if (flag == 'o' || flag == 'O') takes_argument = true;
    }
    if (takes_argument) ++i;
  }
  if (!command_string || i >= argv.size()) return ShellForm::NotShell;

  const auto tokens = Lexer(argv[i]).run();
  if (!tokens) return ShellForm::ShellStays;
  if (reaches_exec(*tokens)) return ShellForm::Replaced;
  if (*shell != Shell::Other && !login && single_simple_command(*tokens)) {
    return ShellForm::Replaced;
  }
  return ShellForm::ShellStays;
}

}  // namespace gracekeeper::budget
