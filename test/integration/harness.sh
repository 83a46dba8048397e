# shellcheck shell=bash
# The harness of the shell integration suites (sourced, after ROOT is set or
# not: it finds the repository itself). It sources checks.sh (ok, not_ok,
# check, summary, ..., and `eventually SECONDS [INTERVAL] CMD...`, which
# retries CMD every INTERVAL seconds, default 0.1, until it succeeds or
# SECONDS pass) and adds:
#
#   k ARGS...          kubectl against the lab: KUBECONFIG (start_cluster
#                      exports the lab's), each request bounded by
#                      K_REQUEST_TIMEOUT (default 20s; empty: no bound), through
#                      K_EXEC when set (a real node's DIR/exec: its network
#                      namespace), with K_CACHE_DIR as its cache when set.
#   die MSG [LOG]      the suite cannot go on: `not ok - MSG` (the last 40
#                      lines of LOG as notes), `Bail out! MSG`, exit 1.
#   on_exit CMD        a cleanup step: the string CMD, evaluated at exit (so it
#                      sees the variables' values then). The steps run in
#                      reverse order of registration, their failures ignored,
#                      by one EXIT trap that then prints the count line
#                      (summary) and exits non-zero when a check failed or the
#                      suite exited non-zero. SIGINT and SIGTERM exit through
#                      it too.
#   gone PID           true when PID no longer runs (for eventually).
#   table_column NAME  reads a `kubectl get -o wide` table on stdin: the
#                      first row's cell under header NAME, read where the
#                      header starts (an empty cell is blank: CONSUMER under
#                      Static); "" when there is no such header.
#   mesh_config NS NAME
#                      Deployment NAME's template annotation
#                      proxy.istio.io/config (gracekeeper's hand-over to an
#                      Istio proxy); has_mesh_config NS NAME: it is set.
#   rollout_over NS NAME
#                      Deployment NAME's status as its controller writes it
#                      once the rollout of its current generation is over (a
#                      control plane without a kube-controller-manager):
#                      observedGeneration, and every replica updated.
#   finish             exits; the trap prints the count line after the steps.
#   work_dir [TEMPLATE]
#                      WORK: a new temporary directory (mktemp -d [TEMPLATE]),
#                      removed at exit unless KEEP=1 (then its path is
#                      printed). Call it first: the last step removes it.
#   show_logs_on_failure N [FILE...]
#                      a cleanup step: when a check failed, the last N lines of
#                      each $WORK/*.log and each FILE that exists, as notes.
#   start_cluster DIR [UP_ARGS...]
#                      test/cluster/up DIR --owner-pid $$ UP_ARGS (its output in
#                      $WORK/up.log: die with it when up fails), a step that
#                      runs test/cluster/down DIR; CLUSTER=DIR, KUBECONFIG
#                      exported.
#
# A suite's skeleton:
#   ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
#   . "$ROOT/test/integration/harness.sh"
#   work_dir
#   start_cluster "$WORK/cluster" --with-controllers
#   on_exit 'kill "$OP_PID" 2>/dev/null'
#   check "..." eventually 20 1 some_condition
#   finish

# Sourced once: a second source (a suite, then its lib) changes nothing.
[ -z "${HARNESS_ROOT:-}" ] || return 0
# shellcheck source=SCRIPTDIR/checks.sh
. "$(dirname "${BASH_SOURCE[0]}")/checks.sh"

HARNESS_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

k() {
  local t=${K_REQUEST_TIMEOUT-20s}
  ${K_EXEC:+"$K_EXEC"} kubectl ${t:+--request-timeout="$t"} ${K_CACHE_DIR:+--cache-dir "$K_CACHE_DIR"} "$@"
}

die() {
  not_ok "$1"
  [ -z "${2:-}" ] || tail -40 "$2" | note
  echo "Bail out! $1"
  exit 1
}

HARNESS_STEPS=()
on_exit() { HARNESS_STEPS+=("$1"); }
harness_exit() {
  local rc=$? i
  trap - EXIT
  set +e
  for ((i = ${#HARNESS_STEPS[@]} - 1; i >= 0; i--)); do eval "${HARNESS_STEPS[i]}"; done
  summary || [ "$rc" -ne 0 ] || rc=1
  exit "$rc"
}
trap harness_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

finish() { exit 0; }

gone() { ! kill -0 "$1" 2>/dev/null; }

table_column() {
  awk -v name="$1" 'NR == 1 { c = index($0, name) } NR == 2 && c { split(substr($0, c), a, " "); print a[1] }'
}

mesh_config() { k get deploy "$2" -n "$1" -o jsonpath='{.spec.template.metadata.annotations.proxy\.istio\.io/config}'; }
has_mesh_config() { [ -n "$(mesh_config "$@")" ]; }

rollout_over() {
  local gen n
  gen=$(k get deployment "$2" -n "$1" -o jsonpath='{.metadata.generation}')
  n=$(k get deployment "$2" -n "$1" -o jsonpath='{.spec.replicas}')
  k patch deployment "$2" -n "$1" --subresource=status --type=merge -p "{\"status\":{\"observedGeneration\":$gen,
    \"replicas\":${n:-1},\"updatedReplicas\":${n:-1},\"readyReplicas\":${n:-1},\"availableReplicas\":${n:-1}}}" >/dev/null
}

work_dir() {
  WORK="$(mktemp -d ${1:+"$1"})"
  on_exit 'if [ "${KEEP:-0}" = 1 ]; then echo "# kept $WORK"; else rm -rf "$WORK"; fi'
}

show_logs_on_failure() {
  on_exit "harness_logs $(printf '%q ' "$@")"
}
harness_logs() {
  local n=$1 f
  shift
  [ "$FAILED" -gt 0 ] || return 0
  for f in "$WORK"/*.log "$@"; do
    [ -f "$f" ] || continue
    echo "# --- $f (last $n lines)"
    tail -"$n" "$f" | note
  done
}

start_cluster() {
  local dir=$1
  shift
  on_exit "[ ! -f $(printf %q "$dir/pids") ] || \"\$HARNESS_ROOT/test/cluster/down\" $(printf %q "$dir") >/dev/null 2>&1"
  "$HARNESS_ROOT/test/cluster/up" "$dir" --owner-pid $$ "$@" >"$WORK/up.log" 2>&1 ||
    die "test/cluster/up failed" "$WORK/up.log"
  CLUSTER=$dir
  export KUBECONFIG="$dir/kubeconfig"
}
