# shellcheck shell=bash
# The checks of every shell test suite (sourced; test/integration/*,
# test/lab/app/app_test.sh). TAP-style output: one `ok - ...` or
# `not ok - ...` line per check, `#   ` notes under it, and last the count
# line `N passed, M failed` (summary or finish); ctest decides by the exit
# status, non-zero when a check failed. Works under `set -euo pipefail`.

PASSED=0
FAILED=0
ok() { PASSED=$((PASSED + 1)); echo "ok - $*"; }
not_ok() { FAILED=$((FAILED + 1)); echo "not ok - $*"; }
# note: indents stdin as diagnostic lines under a check.
note() { sed 's/^/#   /'; }
# expect DESCRIPTION ACTUAL WANTED: ok when ACTUAL is exactly WANTED.
expect() {
  if [ "$2" = "$3" ]; then ok "$1 ($2)"; else not_ok "$1: got '$2', want '$3'"; fi
}
# check DESCRIPTION CMD...: ok when CMD exits 0.
check() {
  local desc="$1"; shift
  if "$@"; then ok "$desc"; else not_ok "$desc"; fi
}
# summary: the count line; returns non-zero when a check failed. Suites with
# a teardown of their own call it last in it.
summary() {
  echo "$PASSED passed, $FAILED failed"
  [ "$FAILED" -eq 0 ]
}
# finish: summary, then exit with its status.
finish() {
  summary
  exit $?
}

# figure NAME VALUE...: a measured figure, one line, for the README and notes.
figure() { echo "figure: $*"; }
now() { date +%s.%N; }
# sub A B: A - B with two decimals.
sub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a - b }'; }
# within VALUE LOW HIGH: LOW <= VALUE <= HIGH (decimals).
within() { awk -v v="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(v >= lo && v <= hi) }'; }
# epoch TIMESTAMP: RFC 3339 -> seconds since the epoch, with fractions.
epoch() { date -d "$1" +%s.%N; }
# eventually SECONDS [INTERVAL] CMD...: retries CMD (its output discarded)
# every INTERVAL seconds (a number, decimals allowed; default 0.1) until it
# succeeds; non-zero when SECONDS (whole seconds) pass first. A try started
# before the deadline runs to its end: bound CMD itself (k bounds requests).
eventually() {
  local deadline=$(($(date +%s%N) + $1 * 1000000000)) interval=0.1
  shift
  if [[ "$1" =~ ^[0-9]+(\.[0-9]+)?$ ]]; then interval=$1; shift; fi
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s%N)" -lt "$deadline" ] || return 1
    sleep "$interval"
  done
}
