#include "gracekeeper/budget/shell.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <limits>
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

// One token of a command string: a word, an operator (";", "&&", "||", "|",
// "&", "\n", "(", ")", or "<<" for a here-document), or a redirection, whose
// text is the operator as written with its file descriptor ("2>&", ">>", "<").
struct Token {
  bool word = false;
  bool redirect = false;
  std::string text;
};

bool is_meta(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == ';' || c == '&' || c == '|' || c == '<' ||
         c == '>' || c == '(' || c == ')';
}

// Splits a command string into tokens the way a POSIX shell does at the top
// level; quotes, `$(...)`, `${...}` and backquotes stay inside their word.
// nullopt when the string is not understood (an unterminated quote, or
// quotes and substitutions nested deeper than any script needs).
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
        out.push_back(operator_at(""));
      } else {
        auto word = word_at();
        if (!word) return std::nullopt;
        // "2>" : digits right before a redirection belong to it.
        if (i_ < s_.size() && (s_[i_] == '<' || s_[i_] == '>') &&
            std::all_of(word->begin(), word->end(),
                        [](char d) { return std::isdigit(static_cast<unsigned char>(d)); })) {
          out.push_back(operator_at(*word));
        } else {
          out.push_back({true, false, std::move(*word)});
        }
      }
    }
    return out;
  }

 private:
  // `fd`: the digits written right before a redirection ("2" of "2>&1").
  Token operator_at(const std::string& fd) {
    const char c = s_[i_];
    const char next = i_ + 1 < s_.size() ? s_[i_ + 1] : '\0';
    if ((c == '&' || c == '|' || c == ';') && next == c) {
      i_ += 2;
      return {false, false, std::string(2, c)};  // ";;" only appears inside case: it stops
    }
    if (c == '<' && next == '<') {
      i_ += 2;
      return {false, false, "<<"};
    }
    if (c == '<' || c == '>') {
      const std::size_t start = i_++;
      if (i_ < s_.size() && (s_[i_] == '>' || s_[i_] == '&' || s_[i_] == '|')) ++i_;
      return {false, true, fd + std::string(s_.substr(start, i_ - start))};
    }
    ++i_;
    return {false, false, std::string(1, c)};
  }

  // Nesting of quotes and substitutions: a bound on the recursion below.
  static constexpr int kMaxDepth = 64;
  struct Nested {
    explicit Nested(int& depth) : depth_(depth) { ++depth_; }
    ~Nested() { --depth_; }
    Nested(const Nested&) = delete;
    Nested& operator=(const Nested&) = delete;
    bool too_deep() const { return depth_ > kMaxDepth; }
    int& depth_;
  };

  // Skips a quoted or nested part starting at i_; false when it never ends.
  bool skip_nested() {
    const Nested nested(depth_);
    if (nested.too_deep()) return false;
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
    const Nested nested(depth_);
    if (nested.too_deep()) return false;
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
  int depth_ = 0;
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
    for (; i < tokens.size() && (tokens[i].word || tokens[i].redirect); ++i) {
      const Token& t = tokens[i];
      if (t.redirect) {
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

// A duration in milliseconds, rounded down and up.
struct Millis {
  std::int64_t floor = 0;
  std::int64_t ceil = 0;
};

std::int64_t add_saturating(std::int64_t a, std::int64_t b) {
  std::int64_t sum = 0;
  return __builtin_add_overflow(a, b, &sum) ? std::numeric_limits<std::int64_t>::max() : sum;
}

bool all_digits(std::string_view text) {
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

// One argument of coreutils `sleep`: NUMBER[SUFFIX], NUMBER a decimal with an
// optional fraction (`5`, `0.5`, `.5`, `2.`), SUFFIX `s`, `m`, `h` or `d`.
// Everything else sleep may accept (`inf`, hex, exponents) is not read.
std::optional<Millis> sleep_argument(std::string_view arg) {
  std::int64_t unit = 1000;
  if (!arg.empty() && !std::isdigit(static_cast<unsigned char>(arg.back())) && arg.back() != '.') {
    switch (arg.back()) {
      case 's':
        break;
      case 'm':
        unit = 60'000;
        break;
      case 'h':
        unit = 3'600'000;
        break;
      case 'd':
        unit = 86'400'000;
        break;
      default:
        return std::nullopt;
    }
    arg.remove_suffix(1);
  }
  const auto dot = arg.find('.');
  const std::string_view whole = arg.substr(0, dot);
  const std::string_view fraction =
      dot == std::string_view::npos ? std::string_view() : arg.substr(dot + 1);
  if ((whole.empty() && fraction.empty()) || !all_digits(whole) || !all_digits(fraction)) {
    return std::nullopt;
  }
  // Whole units, saturating far above any budget (10^9 days fit in int64 ms).
  std::int64_t units = 0;
  for (char c : whole) units = std::min<std::int64_t>(units * 10 + (c - '0'), 1'000'000'000);
  Millis out;
  out.floor = units * unit;
  // The fraction of a unit: its first 9 digits are exact enough for
  // milliseconds of a day; any later non-zero digit only rounds up.
  std::int64_t numerator = 0, denominator = 1;
  bool rest = false;
  for (std::size_t i = 0; i < fraction.size(); ++i) {
    if (i < 9) {
      numerator = numerator * 10 + (fraction[i] - '0');
      denominator *= 10;
    } else if (fraction[i] != '0') {
      rest = true;
    }
  }
  const std::int64_t part = numerator * unit / denominator;
  const bool exact = !rest && part * denominator == numerator * unit;
  out.floor += part;
  out.ceil = out.floor + (exact ? 0 : 1);
  return out;
}

// `sleep ARG...`: the arguments added up, as coreutils sleep does.
std::optional<Millis> sleep_arguments(const std::vector<std::string>& args, std::size_t first) {
  if (first >= args.size()) return std::nullopt;
  Millis total;
  for (std::size_t i = first; i < args.size(); ++i) {
    auto one = sleep_argument(args[i]);
    if (!one) return std::nullopt;
    total.floor = add_saturating(total.floor, one->floor);
    total.ceil = add_saturating(total.ceil, one->ceil);
  }
  return total;
}

// The index of the program after `/usr/bin/env [-i] [NAME=value...]` and
// `busybox`, the applets' launchers.
std::size_t program_index(const std::vector<std::string>& argv) {
  std::size_t i = 0;
  if (i < argv.size() && basename(argv[i]) == "env") {
    for (++i; i < argv.size() && (argv[i] == "-i" || argv[i] == "-" || is_assignment(argv[i]));) {
      ++i;
    }
  }
  if (i < argv.size() && basename(argv[i]) == "busybox") ++i;
  return i;
}

// Whether `printf FORMAT` certainly succeeds and prints only: no option
// (bash's `-v` assigns), no conversion (`%d` of a word and a lone `%` fail)
// and only the escapes every shell prints alike. Its status matters after
// `&&` or with -e.
bool plain_printf_format(std::string_view format) {
  if (format.empty() || format.front() == '-' || format.find('%') != std::string_view::npos) {
    return false;
  }
  for (std::size_t i = format.find('\\'); i != std::string_view::npos;
       i = format.find('\\', i + 2)) {
    if (i + 1 >= format.size() ||
        std::string_view("abcfnrtv\\").find(format[i + 1]) == std::string_view::npos) {
      return false;
    }
  }
  return true;
}

// Commands that take no time worth counting, cannot fail, and tell the app
// nothing: they neither end the wait nor add to it. `set` only with flags
// that change no command's effect (-e, -u, -x, -v): a bad option makes a
// POSIX shell exit, and -n runs nothing after it.
bool does_nothing(const std::vector<std::string>& argv) {
  const std::string_view program = argv.front();
  if (program == ":" || program == "true" || program == "echo") return true;
  if (program == "printf") return argv.size() >= 2 && plain_printf_format(argv[1]);
  if (program != "set" || argv.size() < 2) return false;
  return std::all_of(argv.begin() + 1, argv.end(), [](const std::string& arg) {
    return arg.size() >= 2 && (arg[0] == '-' || arg[0] == '+') &&
           arg.find_first_not_of("euxv", 1) == std::string::npos;
  });
}

// A word of the script without its quotes; nullopt when it expands
// something (a variable, a substitution) or escapes a character.
std::optional<std::string> plain_word(std::string_view word) {
  std::string out;
  char quote = 0;
  for (char c : word) {
    if (quote == 0 && (c == '\'' || c == '"')) {
      quote = c;
    } else if (quote != 0 && c == quote) {
      quote = 0;
    } else if (quote != '\'' && (c == '$' || c == '`' || c == '\\')) {
      return std::nullopt;
    } else {
      out += c;
    }
  }
  return out;
}

// A redirection that can tell nothing to anyone: to or from /dev/null, or a
// copy or close of the standard descriptors (`2>&1`, `>&2`, `2>&-`). Any
// other target may be the app's control socket or FIFO (`> /run/app.ctl`,
// bash's `> /dev/tcp/HOST/PORT`), or a substitution that runs a command.
bool harmless_redirect(const std::string& op, const std::string& target) {
  const auto file = plain_word(target);
  if (!file) return false;
  if (*file == "/dev/null") return true;
  if (op.find('&') == std::string::npos) return false;
  return *file == "0" || *file == "1" || *file == "2" || *file == "-";
}

// `env NAME=value... PROGRAM`: the program runs with a changed environment
// (`PATH` may find another `sleep`, `LD_PRELOAD` loads code into it).
bool env_assigns(const std::vector<std::string>& argv) {
  if (argv.empty() || basename(argv.front()) != "env") return false;
  std::size_t i = 1;
  while (i < argv.size() && (argv[i] == "-i" || argv[i] == "-")) ++i;
  return i < argv.size() && is_assignment(argv[i]);
}

// One simple command of a script, from tokens[i] on: its words (after any
// leading assignments), and whether an assignment or a redirection that is
// not harmless may act before it runs. `i` moves past the command and its
// separator; nullopt when the script is not read (another operator, a
// redirection without a target).
struct SimpleCommand {
  std::vector<std::string> words;
  bool before = false;
};

std::optional<SimpleCommand> next_command(const std::vector<Token>& tokens, std::size_t& i) {
  SimpleCommand out;
  for (; i < tokens.size() && (tokens[i].word || tokens[i].redirect); ++i) {
    const Token& t = tokens[i];
    if (t.redirect) {
      ++i;  // the redirection's target
      if (i >= tokens.size() || !tokens[i].word) return std::nullopt;
      if (!harmless_redirect(t.text, tokens[i].text)) out.before = true;
      continue;
    }
    if (out.words.empty() && is_assignment(t.text)) {
      out.before = true;
      continue;
    }
    out.words.push_back(t.text);
  }
  if (i < tokens.size()) {
    const std::string& separator = tokens[i].text;
    if (separator != ";" && separator != "\n" && separator != "&&") return std::nullopt;
    ++i;
  }
  return out;
}

// The words without their quotes; a word that expands something reads as
// "$" (no program, no duration). `plain`: none did.
std::vector<std::string> unquoted(const std::vector<std::string>& words, bool& plain) {
  std::vector<std::string> argv;
  plain = true;
  for (const auto& word : words) {
    auto text = plain_word(word);
    plain = plain && text.has_value();
    argv.push_back(text ? std::move(*text) : std::string("$"));
  }
  return argv;
}

// The sleeps of a -c script: simple commands joined by `;`, `&&` or
// newlines. The first command that is not a sleep (and does not do nothing)
// ends the wait: it may tell the app to stop (`nginx -s quit`); the sleeps
// after it still add to the hook's length. So does anything on a command
// that runs before it: an assignment (`X=$(nginx -s quit) sleep 30`, or
// `PATH=...` that changes which sleep runs) and a redirection that is not
// harmless (`echo quit > /dev/tcp/127.0.0.1/9000`, `sleep 20 >$(...)`).
std::optional<HookLength> script_length(std::string_view script) {
  const auto tokens = Lexer(script).run();
  if (!tokens) return std::nullopt;
  HookLength out;
  out.wait_ms = 0;
  bool waiting = true;
  // A command that may tell the app to stop: the wait is over. One before any
  // sleep may stop the app at once, or not: the wait is unknown.
  const auto acts = [&] {
    if (waiting && out.wait_ms == 0 && out.length_ms == 0) out.wait_ms = std::nullopt;
    waiting = false;
    out.only_sleeps = false;
  };
  std::size_t i = 0;
  while (i < tokens->size()) {
    auto command = next_command(*tokens, i);
    if (!command) return std::nullopt;
    std::vector<std::string>& words = command->words;
    if (!words.empty() && reserved(words.front())) return std::nullopt;
    // `exec` with a program ends the script; with only redirections
    // (`exec >/proc/1/fd/1 2>&1`) it changes the shell's own and goes on.
    const bool exec = !words.empty() && words.front() == "exec";
    if (exec) words.erase(words.begin());
    if (words.empty()) {
      if (command->before) acts();  // `X=$(nginx -s quit)`, `> /run/app.ctl`
      continue;
    }
    const bool last = exec || words.front() == "exit";
    bool plain = true;
    const std::vector<std::string> argv = unquoted(words, plain);
    if (command->before || env_assigns(argv)) acts();
    const std::size_t program = program_index(argv);
    if (program < argv.size() && basename(argv[program]) == "sleep") {
      auto sleep = sleep_arguments(argv, program + 1);
      if (!sleep) return std::nullopt;
      out.length_ms = add_saturating(out.length_ms, sleep->ceil);
      if (waiting && out.wait_ms) out.wait_ms = add_saturating(*out.wait_ms, sleep->floor);
    } else if (!(plain && does_nothing(argv)) && !(plain && argv.front() == "exit")) {
      acts();  // `exit $(nginx -s quit)` runs its substitution first
    }
    if (last) break;
  }
  return out;
}

// The flags of `sh -c` whose effect on the script is known: -c itself, and
// -e, -u, -x, -v (set -eu stops the script early, never adds to the wait).
// Any other may run nothing (-n, noexec), refuse commands (-r, restricted),
// read profiles that run code (-l, -i), or change what a word means.
bool known_shell_flags(std::string_view arg) {
  const std::string_view flags = arg.substr(1);
  return arg[0] == '-' ? flags.find_first_not_of("ceuxv") == std::string_view::npos
                       : flags.find_first_not_of("euxv") == std::string_view::npos;
}

}  // namespace

ShellForm classify_entrypoint(const std::vector<std::string>& argv) {
  // `/usr/bin/env [-i] [NAME=value...] sh -c ...` and `busybox sh -c ...`.
  std::size_t i = program_index(argv);
  if (i >= argv.size()) return ShellForm::NotShell;
  const bool busybox = i > 0 && basename(argv[i - 1]) == "busybox";
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

std::optional<HookLength> exec_hook_length(const std::vector<std::string>& command) {
  std::size_t i = program_index(command);
  if (i >= command.size()) return std::nullopt;
  // `env NAME=value... PROGRAM` acts before the program runs (see env_assigns).
  const bool env = env_assigns(command);
  const std::string_view program = basename(command[i]);
  if (program == "sleep") {
    auto sleep = sleep_arguments(command, i + 1);
    if (!sleep) return std::nullopt;
    if (env) return HookLength{std::nullopt, sleep->ceil, false};
    return HookLength{sleep->floor, sleep->ceil, true};
  }
  if (program != "sh" && program != "bash" && program != "ash" && program != "dash") {
    return std::nullopt;
  }
  // Flags: clusters of known letters (`-c`, `-ec`, `-e -c`); one of them is -c.
  bool command_string = false;
  for (++i; i < command.size() && command[i].size() >= 2 &&
            (command[i][0] == '-' || command[i][0] == '+');
       ++i) {
    if (!known_shell_flags(command[i])) return std::nullopt;
    if (command[i][0] == '-' && command[i].find('c') != std::string::npos) command_string = true;
  }
  if (!command_string || i >= command.size()) return std::nullopt;
  auto length = script_length(command[i]);
  if (length && env) {
    length->wait_ms = std::nullopt;
    length->only_sleeps = false;
  }
  return length;
}

}  // namespace gracekeeper::budget
