# shellcheck shell=bash
# Checks and figures shared by the node, install and proof tests (sourced).
# Each test ends with "$PASSED passed, $FAILED failed".

PASSED=0
FAILED=0
pass() { PASSED=$((PASSED + 1)); echo "PASS: $*"; }
fail() { FAILED=$((FAILED + 1)); echo "FAIL: $*"; }
# check DESCRIPTION CMD...: PASS when CMD exits 0.
check() {
  local desc="$1"; shift
  if "$@"; then pass "$desc"; else fail "$desc"; fi
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
# eventually SECONDS CMD...: retries CMD every 0.25 s until it succeeds.
eventually() {
  local deadline=$(( $(date +%s) + $1 )); shift
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 0.25
  done
}
