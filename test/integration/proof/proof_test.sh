#!/usr/bin/env bash
# The proof, short: `hack/proof --rollouts 1 --scenarios baseline,gracekeeper,observed`
# on the real node must show the articles' result: without gracekeeper a
# rollout loses POSTs, with it none is lost; the Observed source measures a
# figure of its own, set beside kube-proxy's p99 and the pods' last requests. Also: bad usage exits 2, and an
# interrupted run tears its lab down.
# Last line "N passed, M failed".
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
. "$REPO/test/cluster/lib.sh"
. "$REPO/test/cluster/node.sh"

. "$REPO/test/integration/harness.sh"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/gk-proof-test.XXXXXX")"
on_exit 'if [ "$FAILED" -eq 0 ] && [ "${KEEP:-0}" != 1 ]; then rm -rf "$TMP"; else echo "kept $TMP"; fi'

# ------------------------------------------------------------------ the analysis, without a lab
check "analyze.py --self-test: Clopper-Pearson against known values" \
  python3 "$REPO/hack/proof-lib/analyze.py" --self-test
# A rollout whose hey left no summary, and one with too few requests: the
# analysis must refuse them (exit 3), not count them as 0 failed.
for case in nosummary small; do
  for mode in no-keepalive keepalive; do
    d="$TMP/vacuous-$case/run-1/baseline/$mode/rollout-1"
    mkdir -p "$d"
    if [ "$case" = small ]; then
      printf 'Summary:\n  Total:\t2.0 secs\n\nStatus code distribution:\n  [201]\t10 responses\n' >"$d/load.txt"
    else
      printf 'hey: killed\n' >"$d/load.txt"
    fi
  done
  python3 "$REPO/hack/proof-lib/analyze.py" --out "$TMP/vacuous-$case" --proxy-min-sync 5 \
    --scenarios baseline --rollouts 1 --min-requests 1000 >/dev/null 2>&1; rc=$?
  check "analyze.py refuses a rollout with $case client output (exit $rc, want 3)" test "$rc" = 3
done

# ------------------------------------------------------------------ bad usage
for args in "--rollouts 0" "--scenarios baseline,nonsense" "--proxy-min-sync abc" "--frobnicate" \
  "--runs 0" "--rate abc" "--window 1" "--concurrency 20"; do
  # shellcheck disable=SC2086
  out=$("$REPO/hack/proof" $args --out "$TMP/bad" 2>&1); rc=$?
  check "hack/proof $args exits 2 with a message (rc $rc: ${out:0:90})" test "$rc" = 2 -a -n "$out"
done

# ------------------------------------------------------------------ the short proof
# The same load in every scenario: 200 requests/s from 2 s before each restart
# to 30 s after it (hack/proof fails a rollout below 1,000 requests).
if "$REPO/hack/proof" --rollouts 1 --window 30 --scenarios baseline,gracekeeper,observed --json "$TMP/result.json" \
  --out "$TMP/run" >"$TMP/proof.log" 2>&1; then
  ok "hack/proof --rollouts 1 --window 30 --scenarios baseline,gracekeeper,observed completed"
else
  not_ok "hack/proof (exit $?)"; tail -n 40 "$TMP/proof.log"
fi
cat "$TMP/run/results.md" 2>/dev/null
failed() { jq -r --arg s "$1" --arg m "$2" '.scenarios[$s].modes[$m].summary.failed // "missing"' "$TMP/result.json" 2>/dev/null || echo missing; }
requests() { jq -r --arg s "$1" --arg m "$2" '.scenarios[$s].modes[$m].summary.requests // 0' "$TMP/result.json" 2>/dev/null || echo 0; }
# The smallest rollout's requests; 0 when the summary is missing.
least() { jq -r --arg s "$1" --arg m "$2" '.scenarios[$s].modes[$m].summary.min_requests_per_rollout // 0' "$TMP/result.json" 2>/dev/null || echo 0; }
# No check may pass on a missing summary: every scenario and mode has one,
# with at least 1,000 requests in each rollout.
for s in baseline gracekeeper observed; do
  for mode in no-keepalive keepalive; do
    check "$s, $mode: a summary ($(failed "$s" "$mode") failed)" test "$(failed "$s" "$mode")" != missing
    check "$s, $mode: the load really ran (at least $(least "$s" "$mode") requests per rollout, want >= 1000)" \
      test "$(least "$s" "$mode")" -ge 1000
  done
done
b1=$(failed baseline no-keepalive) b2=$(failed baseline keepalive)
check "baseline: the rollout lost requests ($b1 + $b2 failed)" \
  test "$b1" != missing -a "$b2" != missing -a $(( ${b1//missing/0} + ${b2//missing/0} )) -ge 1
# Each of baseline's requests that failed without an answer is traced: one record each, with the
# client's local port, and conntrack's entry found for some of them.
traced=$(jq '[.scenarios.baseline.modes[].rollouts[].failures_traced // [] | .[]] | length' "$TMP/result.json" 2>/dev/null || echo 0)
ported=$(jq '[.scenarios.baseline.modes[].rollouts[].failures_traced // [] | .[] | select(.port != null)] | length' "$TMP/result.json" 2>/dev/null || echo 0)
found=$(jq '[.scenarios.baseline.modes[].rollouts[].failures_traced // [] | .[] | select(.to != null)] | length' "$TMP/result.json" 2>/dev/null || echo 0)
errors=$(jq '[.scenarios.baseline.modes[].summary | .failed - .non_2xx] | add // 0' "$TMP/result.json" 2>/dev/null || echo 0)
check "baseline: every request failed without an answer traced ($traced of $errors)" \
  test "$traced" = "$errors" -a "$errors" -ge 1
check "... with the client's local port ($ported) and conntrack's entry for some ($found)" \
  test "$ported" -ge 1 -a "$found" -ge 1
# The one loss a wait cannot prevent (docs/proof.md, "Lost with a long
# wait"): a POST sent on a kept-alive connection just as the old pod, after
# its SIGTERM, closes it, an EOF. Every other failure fails the check.
keepalive_eofs() {
  jq -r --arg s "$1" '[.scenarios[$s].modes.keepalive.rollouts[].failures_traced // [] | .[] |
      select(.entry == "kept-alive" and (.error | startswith("EOF")) and
             (.where == "after_sigterm" or .where == "after_exit"))] | length' "$TMP/result.json" 2>/dev/null || echo 0
}
budgeted_loses_nothing() {  # SCENARIO
  local f e
  f=$(failed "$1" no-keepalive)
  check "$1, no-keepalive: no request lost ($f failed of $(requests "$1" no-keepalive))" test "$f" = 0
  f=$(failed "$1" keepalive)
  e=$(keepalive_eofs "$1")
  check "$1, keepalive: none lost but EOFs on kept-alive connections at the old pod's shutdown ($f failed of $(requests "$1" keepalive), $e such EOFs)" \
    test "$f" = "$e"
}
budgeted_loses_nothing gracekeeper
pre=$(jq -r '.scenarios.gracekeeper.budget.preStop // 0' "$TMP/result.json" 2>/dev/null)
check "gracekeeper set a preStop wait ($pre s)" test "${pre:-0}" -ge 5
budgeted_loses_nothing observed
src() { jq -r --arg s "$1" ".scenarios[\$s].sources.$2 // \"missing\"" "$TMP/result.json" 2>/dev/null; }
check "observed: the policy's figure comes from its own samples ($(src observed source))" test "$(src observed source)" = Observed
# Its figure is the samples' quantile plus consumerSyncSeconds (5 s here).
check "observed: the figure covers the declared kube-proxy sync ($(src observed figure) s >= 5)" \
  python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) >= 5 else 1)' "$(src observed figure)"
check "observed: terminations were audited ($(src observed terminations.observed))" test "$(src observed terminations.observed)" -ge 1
check "the truth was measured: deletion -> the pod's last request ($(src gracekeeper deletion_to_last_request.median) s)" \
  test "$(src gracekeeper deletion_to_last_request.n)" -ge 1
check "kube-proxy's p99 was read from Prometheus ($(src gracekeeper kube_proxy_p99))" \
  python3 -c 'import sys; float(sys.argv[1])' "$(src gracekeeper kube_proxy_p99)"
check "results.md sets the sources side by side" grep -q "^| observed | Observed |" "$TMP/run/results.md"
check "the timeline pictures were drawn" test -s "$TMP/run/baseline.svg" -a -s "$TMP/run/gracekeeper.svg"
check "the lab is gone after the run" test ! -e "/run/netns/$(gk_node_netns "$TMP/run/lab")"

# ------------------------------------------------------------------ Ctrl-C
# A background job of a script starts with SIGINT ignored (and bash may not
# trap a signal ignored on entry): restore it, as a terminal's Ctrl-C finds it.
setsid python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])' \
  "$REPO/hack/proof" --rollouts 3 --scenarios baseline --out "$TMP/int" >"$TMP/int.log" 2>&1 &
PROOF=$!
eventually 120 0.5 grep -q 'no-keepalive rollout 1' "$TMP/int.log"
kill -INT -- "-$PROOF" 2>/dev/null
eventually 60 0.5 gone "$PROOF"
wait "$PROOF"; rc=$?
check "Ctrl-C stops hack/proof in the middle of its run (exit $rc, want 130)" test "$rc" = 130
check "... and tears its lab down: no node process" test -z "$(gk_node_processes "$TMP/int/lab")"
check "... no namespace" test ! -e "/run/netns/$(gk_node_netns "$TMP/int/lab")"
check "... no kubepods cgroup" test -z "$(gk_node_cgroup_dirs)"
left=""
none_left() { left=$(pgrep -af -- "$TMP/int/" || true); [ -z "$left" ]; }
eventually 10 0.5 none_left
check "... and no process of the run left (recorder, captures, load): ${left:-none}" test -z "$left"
