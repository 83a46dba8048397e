#!/usr/bin/env bash
# gracekeeper under control-plane faults (issue 46, items 3 and 4), against a
# control plane of its own (test/cluster/up), seen through the audit log, the
# operator's logs and a TCP proxy in front of the API server
# (hold_proxy.py: it logs how long each client waited in silence before it
# gave up, which is how long a timeout took).
#
#   throttle  gracekeeper's user gets an API Priority and Fairness level of
#             one seat and no queue (reject); a burst of 200 opted-in
#             Deployments: 429s in the audit log, no retry before its
#             Retry-After, every Deployment tuned, one Event each
#   hold      the proxy accepts and never answers for a while: every TLS
#             handshake times out, nothing crashes, all converges after
#   hang      two `gracekeeper run --leader-elect`; kube-apiserver SIGSTOPped
#             90 s, then etcd 30 s: the leader steps down at its renew
#             deadline, a request never waits past its timeout, the standby
#             takes over once, and every Deployment converges with one Event
#   blackhole the leader's connections to the API server (through the proxy)
#             go silent both ways while a standby (direct) stays connected:
#             the leader exits within its renew deadline, the standby takes
#             over, and once the network heals the audit log holds no write
#             of the old leader's user after the new leader's acquireTime
#
# usage: faults_test.sh GRACEKEEPER_BINARY [SECTION...]   (default: all four)
# env:   FAULTS_APISERVER_STOP (default 90), FAULTS_ETCD_STOP (30) in seconds;
#        FAULTS_KEEP=1 keeps the work directory (logs, audit, proxy log)
# Output: `ok - ...` / `not ok - ...`, `figure: ...` lines, `N passed, M failed`.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
HERE="$ROOT/test/integration/faults"
GK="${1:?usage: faults_test.sh GRACEKEEPER_BINARY [SECTION...]}"
shift
SECTIONS="${*:-throttle hold hang blackhole}"
APISERVER_STOP=${FAULTS_APISERVER_STOP:-90}
ETCD_STOP=${FAULTS_ETCD_STOP:-30}
USER_NAME=gracekeeper-faults
. "$ROOT/test/integration/operator/lib.sh"
[ -z "${FAULTS_KEEP:-}" ] || KEEP=1
work_dir
show_logs_on_failure 15

OPS=()         # operator pids
STOPPED=()     # process groups under SIGSTOP
PROXY_PID=""
cleanup() {
  local pgid pid
  for pgid in ${STOPPED[@]+"${STOPPED[@]}"}; do kill -CONT -- "-$pgid" 2>/dev/null; done
  for pid in ${OPS[@]+"${OPS[@]}"}; do kill -KILL "$pid" 2>/dev/null; done
  [ -n "$PROXY_PID" ] && kill -TERM "$PROXY_PID" 2>/dev/null
  for pid in ${OPS[@]+"${OPS[@]}"} $PROXY_PID; do wait "$pid" 2>/dev/null; done
}
section() { case " $SECTIONS " in *" $1 "*) return 0 ;; esac; return 1; }

# --------------------------------------------------------------- the lab
# Fewer seats in all (150 instead of 600), so that a priority level of one
# share gets exactly one: ceil(150 * 1 / 246) = 1. kubectl is admin
# (system:masters: the exempt level) and never throttled.
start_cluster "$WORK/cluster"
on_exit cleanup  # before down: it wakes what a section stopped
printf -- '--max-requests-inflight=100\n--max-mutating-requests-inflight=50\n' >>"$CLUSTER/apiserver.args"
"$ROOT/test/cluster/restart-apiserver" "$CLUSTER" >"$WORK/restart.log" 2>&1 ||
  die "restart-apiserver failed" "$WORK/restart.log"
# shellcheck disable=SC1091
set -a; . "$CLUSTER/env"; set +a
export KUBECONFIG="$CLUSTER/kubeconfig"
k apply --server-side -f "$ROOT/crds/shutdownpolicies.gracekeeper.dev.yaml" >/dev/null
k wait --for condition=established crd/shutdownpolicies.gracekeeper.dev >/dev/null

# gracekeeper's own user (not system:masters, so APF applies to it): a client
# certificate from the lab's CA, bound to cluster-admin.
(
  cd "$CLUSTER/pki" && umask 077
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out faults.key 2>/dev/null
  openssl req -new -key faults.key -subj "/CN=$USER_NAME" -out faults.csr 2>/dev/null
  printf 'extendedKeyUsage=clientAuth\n' >faults.ext
  openssl x509 -req -in faults.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 \
    -extfile faults.ext -out faults.crt 2>/dev/null
)
k create clusterrolebinding gk-faults --clusterrole=cluster-admin --user="$USER_NAME" >/dev/null
# op_kubeconfig FILE PORT: gracekeeper's user, server 127.0.0.1:PORT.
op_kubeconfig() {
  cat >"$1" <<YAML
apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster: {server: "https://127.0.0.1:$2", certificate-authority-data: $(base64 -w0 <"$CA_FILE")}
users:
- name: $USER_NAME
  user:
    client-certificate-data: $(base64 -w0 <"$CLUSTER/pki/faults.crt")
    client-key-data: $(base64 -w0 <"$CLUSTER/pki/faults.key")
contexts:
- name: lab
  context: {cluster: lab, user: $USER_NAME}
current-context: lab
YAML
  chmod 600 "$1"
}
op_kubeconfig "$WORK/direct.kubeconfig" "$APISERVER_PORT"
expect "gracekeeper's user is not an admin" \
  "$(kubectl --kubeconfig "$WORK/direct.kubeconfig" auth whoami -o jsonpath='{.status.userInfo.username}')" \
  "$USER_NAME"

# The proxy (hold_proxy.py) in front of the API server.
python3 "$HERE/hold_proxy.py" "$APISERVER_PORT" "$WORK/proxy.port" "$WORK/proxy.jsonl" \
  2>"$WORK/proxy.log" &
PROXY_PID=$!
eventually 10 test -s "$WORK/proxy.port" || not_ok "the proxy started"
op_kubeconfig "$WORK/proxy.kubeconfig" "$(cat "$WORK/proxy.port")"

# A namespace with a Static policy (4 s) and a Service selecting the pods.
setup_ns() {
  k create namespace "$1" >/dev/null && serve "$1"
  k apply -f - >/dev/null <<YAML
apiVersion: gracekeeper.dev/v1alpha1
kind: ShutdownPolicy
metadata: {name: default, namespace: $1}
spec:
  propagation: {source: Static, staticSeconds: 4}
  changes: {maxConcurrentRollouts: "100%"}
YAML
}
# burst NS PREFIX N: N opted-in Deployments in one kubectl call.
burst() {
  local ns=$1 prefix=$2 n=$3 i
  for i in $(seq 1 "$n"); do
    cat <<JSON
{"apiVersion":"apps/v1","kind":"Deployment",
 "metadata":{"name":"$prefix-$i","namespace":"$ns","labels":{"app":"$prefix-$i"},"annotations":$OPTED},
 "spec":{"replicas":3,"selector":{"matchLabels":{"app":"$prefix-$i"}},
  "template":{"metadata":{"labels":{"app":"$prefix-$i","served":"yes"}},
   "spec":{"terminationGracePeriodSeconds":30,
    "containers":[{"name":"app","image":"app:1","ports":[{"containerPort":8080}]}]}}}}
JSON
  done | jq -s '{"apiVersion":"v1","kind":"List","items":.}' | k create -f - >/dev/null
}
# untuned NS: how many opted-in Deployments of NS still lack the preStop wait.
untuned() {
  k get deployments -n "$1" -o json |
    jq '[.items[] | select(.spec.template.spec.containers[0].lifecycle.preStop.sleep.seconds == null)] | length'
}
all_tuned() { [ "$(untuned "$1")" = 0 ]; }
# events_per_workload NS: "COUNT:DEPLOYMENTS" pairs, e.g. "1:200" (every
# Deployment has one Event object) or "1:198 2:2".
events_per_workload() {
  k get deployments -n "$1" -o json >"$WORK/epw.deployments"
  k get events.events.k8s.io -n "$1" -o json >"$WORK/epw.events"
  jq -rn --slurpfile d "$WORK/epw.deployments" --slurpfile e "$WORK/epw.events" '
    ($e[0].items | map(select(.regarding.kind == "Deployment")) | group_by(.regarding.name)
      | map({key: .[0].regarding.name, value: length}) | from_entries) as $count
    | [$d[0].items[].metadata.name | $count[.] // 0] | group_by(.) | map("\(.[0]):\(length)") | join(" ")'
}
# The event reasons of NS, "Reason=count" sorted.
event_reasons() {
  k get events.events.k8s.io -n "$1" -o json |
    jq -r '[.items[].reason] | group_by(.) | map("\(.[0])=\(length)") | join(" ")'
}
op_alive() { kill -0 "$1" 2>/dev/null; }
# ms_between T1 T2 (RFC 3339 or epoch seconds): (T2 - T1) in milliseconds.
to_epoch() { if [[ $1 =~ ^[0-9.]+$ ]]; then echo "$1"; else epoch "$1"; fi; }
ms_between() { awk -v a="$(to_epoch "$1")" -v b="$(to_epoch "$2")" 'BEGIN { printf "%d", (b - a) * 1000 }'; }

# --------------------------------------------------------------- throttle
if section throttle; then
  echo "# throttle: one APF seat, no queue; 200 opted-in Deployments at once"
  k apply -f - >/dev/null <<YAML
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: gk-faults-one-seat}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 1
    lendablePercent: 0
    borrowingLimitPercent: 0
    limitResponse: {type: Reject}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: gk-faults}
spec:
  priorityLevelConfiguration: {name: gk-faults-one-seat}
  matchingPrecedence: 500
  distinguisherMethod: {type: ByUser}
  rules:
  - subjects: [{kind: User, user: {name: $USER_NAME}}]
    resourceRules: [{verbs: ["*"], apiGroups: ["*"], resources: ["*"], namespaces: ["*"], clusterScope: true}]
    nonResourceRules: [{verbs: ["*"], nonResourceURLs: ["*"]}]
YAML
  seats() {
    k get --raw /metrics | awk '/^apiserver_flowcontrol_nominal_limit_seats\{priority_level="gk-faults-one-seat"\}/ {print $2}'
  }
  eventually 20 bash -c "[ -n \"\$(kubectl get --raw /metrics | grep '^apiserver_flowcontrol_nominal_limit_seats{priority_level=\"gk-faults-one-seat\"}')\" ]"
  expect "gracekeeper's priority level has one seat" "$(seats)" 1
  schema=$(kubectl --kubeconfig "$WORK/direct.kubeconfig" get --raw /version -v=8 2>&1 |
    grep -io 'X-Kubernetes-Pf-Flowschema-Uid: .*' | head -1)
  [ -n "$schema" ] && ok "gracekeeper's requests are classified by the FlowSchema (${schema})" \
    || not_ok "no APF headers on gracekeeper's requests"

  setup_ns faults-burst
  since=$(now_rfc3339)
  GK_OPERATOR_KUBECONFIG="$WORK/direct.kubeconfig" start_operator throttle --workers "${FAULTS_WORKERS:-16}" \
    || not_ok "operator ready (throttle)"
  OPS+=("$OP_PID")
  t0=$(now)
  burst faults-burst burst 200
  if eventually 240 all_tuned faults-burst; then
    ok "all 200 Deployments tuned under throttling in $(sub "$(now)" "$t0") s"
  else
    not_ok "Deployments left untuned after 240 s: $(untuned faults-burst)"
  fi
  figure "throttle.converge_seconds $(sub "$(now)" "$t0")"
  sleep 5  # the last Events (the recorder runs behind busy workers)
  eventually 60 bash -c "[ \"\$(kubectl get events.events.k8s.io -n faults-burst -o name | wc -l)\" -ge 200 ]"
  per=$(events_per_workload faults-burst)
  expect "one Event per Deployment, no storm (events:deployments)" "$per" "1:200"
  figure "throttle.events_per_deployment $per ($(event_reasons faults-burst))"
  op_alive "$OP_PID" && ok "the operator is still running" || not_ok "the operator died under throttling"
  stop_operator
  OPS=()

  # The audit: gracekeeper's requests since the start, in order.
  jq -c --arg since "$since" --arg user "$USER_NAME" 'select(.stage == "ResponseComplete" and
      .user.username == $user and .requestReceivedTimestamp > $since) |
      {verb, uri: (.requestURI | sub("\\?.*"; "")), name: (.objectRef.name // ""),
       code: .responseStatus.code,
       rx: .requestReceivedTimestamp,
       done: .stageTimestamp}' "$AUDIT_LOG" >"$WORK/throttle-audit.jsonl"
  total=$(wc -l <"$WORK/throttle-audit.jsonl")
  n429=$(jq -s '[.[] | select(.code == 429)] | length' "$WORK/throttle-audit.jsonl")
  [ "$n429" -gt 0 ] && ok "429s in the audit log: $n429 of $total requests" \
    || not_ok "no 429 in the audit log ($total requests): the seat was never short"
  by_verb=$(jq -rs '[.[] | select(.code == 429) | .verb] | group_by(.) | map("\(.[0])=\(length)") | join(" ")' \
    "$WORK/throttle-audit.jsonl")
  figure "throttle.requests $total throttle.429s $n429 ($by_verb)"
  # Retry-After as the server sends it now (it grows with the drops, 1-32 s):
  # a few requests at once with gracekeeper's certificate.
  curls=()
  for i in $(seq 1 12); do
    curl -s -o /dev/null -D "$WORK/hdr.$i" --cacert "$CA_FILE" --cert "$CLUSTER/pki/faults.crt" \
      --key "$CLUSTER/pki/faults.key" "$APISERVER_URL/api/v1/namespaces/faults-burst/pods?limit=1" &
    curls+=($!)
  done
  wait "${curls[@]}"
  retry_after=$(cat "$WORK"/hdr.* | tr -d '\r' | awk -F': ' 'tolower($1) == "retry-after" {print $2}' | sort -n | uniq -c | tr '\n' ' ')
  figure "throttle.retry_after_header (count value) ${retry_after:-none seen}"
  # Each 429 and the next request with the same verb, path (the query
  # aside: a watch's timeoutSeconds is new every time) and object name
  # that arrived
  # after it was answered (one that arrived before is a concurrent request,
  # not its retry): the gap from the 429's answer to the retry's arrival,
  # against Retry-After. Creates are left out: a refused create names no
  # object in the audit, so its retry cannot be told from another create. The audit
  # does not carry the header; the server's Retry-After is at least 1 s
  # (dropped_requests_tracker: 1, doubled while drops continue, at most 32),
  # so a gap under 1 s is always a retry too soon.
  jq -rs '
    def t: sub("\\.(?<f>[0-9]+)Z$"; "Z") as $s | ($s | fromdateiso8601) +
      ((capture("\\.(?<f>[0-9]+)Z$").f // "0") | ("0." + .) | tonumber);
    [to_entries[] | .value + {i: .key}] as $all
    | [$all[] | select(.code == 429 and .verb != "create") as $r
        | first($all[] | select(.i > $r.i and .verb == $r.verb and .uri == $r.uri and .name == $r.name
                                and (.rx | t) > ($r.done | t))) as $next
        | (($next.rx | t) - ($r.done | t))]
    | sort | if length == 0 then "none 0 0" else "\(.[0]) \(.[length/2|floor]) \(length)" end' \
    "$WORK/throttle-audit.jsonl" >"$WORK/gaps" 2>"$WORK/gaps.err"
  read -r gap_min gap_median gap_n <"$WORK/gaps"
  figure "throttle.retry_gap_seconds min $gap_min median $gap_median over $gap_n retried 429s"
  if [ "$gap_min" = none ]; then
    not_ok "no 429 was retried (or the audit could not be read: $(head -c 200 "$WORK/gaps.err"))"
  elif within "$gap_min" 1 100000; then
    ok "no retry sooner than Retry-After: the shortest gap from a 429 to its retry is ${gap_min} s (>= 1 s)"
  else
    not_ok "a 429 was retried ${gap_min} s after it, sooner than its Retry-After (>= 1 s)"
  fi
  k delete flowschema gk-faults >/dev/null
  k delete prioritylevelconfiguration gk-faults-one-seat >/dev/null
fi

# --------------------------------------------------------------- hold
if section hold; then
  echo "# hold: a proxy that accepts and never answers"
  # Two operators through the proxy, one namespace each: `steady` synced
  # before the hold (its watches freeze, its pooled connections too) and
  # `cold`, started during it (every connection it opens is held).
  setup_ns faults-hold
  setup_ns faults-cold
  GK_OPERATOR_KUBECONFIG="$WORK/proxy.kubeconfig" start_operator hold-steady --namespace faults-hold \
    || not_ok "operator ready (hold-steady)"
  STEADY_PID=$OP_PID STEADY_PORT=$OP_PORT
  OPS+=("$STEADY_PID")
  hold_start=$(now)
  kill -USR1 "$PROXY_PID"
  cold_start=$(now)
  "$GK" run --kubeconfig "$WORK/proxy.kubeconfig" --namespace faults-cold --metrics-bind-address 127.0.0.1:0 \
    --health-probe-bind-address 127.0.0.1:0 --log-format json --shutdown-lame-duck-seconds 0 \
    >"$WORK/hold-cold.log" 2>&1 &
  COLD_PID=$!
  # Work arrives while the API server is unreachable.
  burst faults-hold held 20
  burst faults-cold cold 20
  sleep 35
  healthy=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$STEADY_PORT/healthz")
  op_alive "$STEADY_PID" && expect "held 35 s: steady is alive and /healthz answers" "$healthy" 200 \
    || not_ok "steady died while the API server did not answer"
  # cold cannot start without the API server: it gives up after its
  # attempts (4, each a 10 s handshake timeout) with the reason, status 1,
  # and its pod is restarted.
  if eventually 30 bash -c "! kill -0 $COLD_PID 2>/dev/null"; then
    wait "$COLD_PID"
    cold_exit=$?
    cold_ms=$(ms_between "$cold_start" "$(now)")
    expect "cold, started during the hold, gives up (status)" "$cold_exit" 1
    err=$(jq -r 'select(.msg == "startup failed") | .error' "$WORK/hold-cold.log" | head -1)
    [[ $err == *"timed out"* ]] && ok "... saying why ($err) after about ${cold_ms} ms" \
      || not_ok "cold's startup error: '$err'"
    figure "hold.cold_start_gave_up_ms ~$cold_ms"
  else
    not_ok "cold neither started nor gave up in 65 s"
    kill -KILL "$COLD_PID" 2>/dev/null
  fi
  kill -USR2 "$PROXY_PID"
  hold_end=$(now)
  held_closes() {
    jq -c --argjson a "$hold_start" --argjson b "$hold_end" \
      'select(.event == "close" and .held and .opened >= $a and .opened <= $b)' "$WORK/proxy.jsonl"
  }
  eventually 15 bash -c "[ \$(jq -c --argjson a $hold_start --argjson b $hold_end 'select(.event == \"close\" and .held and .opened >= \$a and .opened <= \$b)' '$WORK/proxy.jsonl' | wc -l) -ge 3 ]"
  held_closes >"$WORK/held.jsonl"
  held=$(wc -l <"$WORK/held.jsonl")
  read -r hmin hmax <<<"$(jq -rs 'map(.silent) | sort | "\(.[0]) \(.[-1])"' "$WORK/held.jsonl")"
  [ "$held" -ge 3 ] && ok "cold kept trying: $held connections accepted and never answered" \
    || not_ok "only $held held connections in 35 s"
  within "$hmin" 9.5 12 && within "$hmax" 9.5 12 \
    && ok "every unanswered TLS handshake was given up after ${hmin}-${hmax} s (timeout 10 s)" \
    || not_ok "held connections given up after ${hmin}-${hmax} s, want 9.5-12 (handshake timeout 10 s)"
  figure "hold.connections $held hold.handshake_timeout_seconds $hmin-$hmax"
  # The steady operator's frozen connections: none given up (no timeout is
  # shorter than 35 s of silence but the handshake's) and all flow again.
  cut=$(jq -c --argjson a "$hold_start" --argjson b "$hold_end" \
    'select(.event == "close" and (.held | not) and .t >= $a and .t <= $b + 1)' "$WORK/proxy.jsonl" | wc -l)
  expect "steady's frozen connections outlived the hold" "$cut" 0
  GK_OPERATOR_KUBECONFIG="$WORK/proxy.kubeconfig" start_operator hold-cold2 --namespace faults-cold \
    || not_ok "cold restarted after the hold"
  COLD_PID=$OP_PID
  OPS+=("$COLD_PID")
  t0=$(now)
  for ns in faults-hold faults-cold; do
    eventually 120 all_tuned $ns && ok "after the hold, the 20 Deployments of $ns are tuned ($(sub "$(now)" "$t0") s)" \
      || not_ok "after the hold: $(untuned $ns) Deployments of $ns untuned"
  done
  figure "hold.converge_after_seconds $(sub "$(now)" "$t0")"
  for ns in faults-hold faults-cold; do
    eventually 60 bash -c "[ \"\$(kubectl get events.events.k8s.io -n $ns -o name | wc -l)\" -ge 20 ]"
    expect "one Event per Deployment of $ns after the hold" "$(events_per_workload $ns)" "1:20"
  done
  for pid in "$STEADY_PID" "$COLD_PID"; do
    stop_operator "$pid"
    expect "stopped cleanly after the hold" "$OP_EXIT" 0
  done
  OPS=()
fi

# --------------------------------------------------------------- hang
# Candidates run as a Deployment's two replicas would: one that exits is
# started again (keep_two). Each runs through the proxy, which logs how long
# every connection it gave up had been silent.
CANDIDATES=()  # "name pid log"
next_candidate=0
start_candidate() {
  next_candidate=$((next_candidate + 1))
  local name="hang-$next_candidate"
  GK_OPERATOR_KUBECONFIG="$WORK/proxy.kubeconfig" start_operator "$name" \
    --leader-elect --leader-election-namespace default --leader-election-id gk-faults \
    || not_ok "candidate $name ready"
  CANDIDATES+=("$name $OP_PID $OP_LOG")
  OPS+=("$OP_PID")
}
# keep_two: reaps candidates that exited (EXITS gets "name status reason"
# lines) and starts new ones until two run.
EXITS="$WORK/exits"
: >"$EXITS"
keep_two() {
  local c name pid log alive=() status
  for c in ${CANDIDATES[@]+"${CANDIDATES[@]}"}; do
    read -r name pid log <<<"$c"
    if op_alive "$pid"; then alive+=("$c"); continue; fi
    wait "$pid" 2>/dev/null
    status=$?
    echo "$name $status $(jq -r 'select(.level == "error") | .msg' "$log" | head -1)" >>"$EXITS"
  done
  CANDIDATES=(${alive[@]+"${alive[@]}"})
  while [ "${#CANDIDATES[@]}" -lt 2 ]; do start_candidate; done
}
leader_log() {  # the log of the running candidate that leads, if any
  local c name pid log
  for c in ${CANDIDATES[@]+"${CANDIDATES[@]}"}; do
    read -r name pid log <<<"$c"
    if op_alive "$pid" && grep -q '"msg":"started leading"' "$log"; then echo "$log"; return 0; fi
  done
  return 1
}
led_at() { jq -r 'select(.msg == "started leading") | .ts' "$1" | head -1; }
# stable_leader WHAT: a leader emerges within 60 s and still leads 15 s
# later (no step-down right after taking over).
stable_leader() {
  local what=$1 log since
  since=$(now)
  if ! eventually 60 leader_log; then not_ok "$what: no leader within 60 s"; return; fi
  log=$(leader_log)
  figure "hang.$what.new_leader_after_seconds $(sub "$(now)" "$since") ($(basename "$log" .log))"
  sleep 15
  if grep -q '"msg":"lost leadership' "$log"; then
    not_ok "$what: the new leader $(basename "$log" .log) stepped down $(( $(date -d "$(jq -r 'select(.msg | startswith("lost leadership")) | .ts' "$log" | head -1)" +%s) - $(date -d "$(led_at "$log")" +%s) )) s after taking over, with the API server answering"
    keep_two
    eventually 60 leader_log && ok "$what: ... and a later candidate leads" || not_ok "$what: no leader after the flap"
  else
    ok "$what: the new leader $(basename "$log" .log) took over and keeps the Lease"
  fi
}
# given_up FROM TO: connections a client closed between FROM and TO (epoch)
# with what it sent unanswered for at least 1 s: how long it waited, a line
# each (a timeout firing, or the process ending).
given_up() {
  jq -r --argjson a "$1" --argjson b "$2" 'select(.event == "close" and (.held | not) and
      .by == "client" and .t >= $a and .t <= $b and .waited >= 1) | .waited' "$WORK/proxy.jsonl"
}
histogram() { awk '{ printf "%d\n", $1 }' | sort -n | uniq -c | awk '{ printf "%ss:%s ", $2, $1 }'; }

if section hang; then
  echo "# hang: kube-apiserver SIGSTOPped ${APISERVER_STOP} s, then etcd ${ETCD_STOP} s; two candidates"
  setup_ns faults-hang
  keep_two
  eventually 30 leader_log || not_ok "no first leader"
  first=$(leader_log)
  transitions0=$(jp lease default gk-faults '{.spec.leaseTransitions}')

  # Work in flight when the API server stops.
  burst faults-hang before 40
  eventually 30 bash -c "[ \$(kubectl get events.events.k8s.io -n faults-hang -o name | wc -l) -ge 1 ]"
  stop_at=$(now)
  kill -STOP -- "-$APISERVER_PID"
  STOPPED+=("$APISERVER_PID")
  sleep "$APISERVER_STOP"
  kill -CONT -- "-$APISERVER_PID"
  STOPPED=()
  cont_at=$(now)
  eventually 30 k get --raw /readyz || not_ok "the API server answers after SIGCONT"

  lost=$(jq -r 'select(.msg | startswith("lost leadership")) | .ts' "$first" | head -1)
  if [ -n "$lost" ]; then
    ms=$(ms_between "$stop_at" "$lost")  # the log's seconds are whole: +-1 s
    within "$ms" 7000 13000 && ok "the leader stepped down ${ms} ms into the stop (renew deadline 10 s; log time +-1 s)" \
      || not_ok "the leader stepped down ${ms} ms into the stop, want 8-12 s (renew deadline 10 s)"
    figure "hang.apiserver.step_down_ms $ms"
  else
    not_ok "the leader never stepped down during a ${APISERVER_STOP} s stop"
  fi
  # Every request given up while the API server said nothing: each timeout
  # fired, none waited past the longest (the response header's 60 s; the
  # renew deadline cuts the leader's Lease requests sooner). Watches send
  # nothing to wait on, and 150 s of silence outlives this stop.
  given_up "$stop_at" "$cont_at" >"$WORK/hang-given-up"
  figure "hang.apiserver.given_up (whole seconds waited:requests) $(histogram <"$WORK/hang-given-up")"
  max_waited=$(sort -n "$WORK/hang-given-up" | tail -1)
  within "${max_waited:-0}" 0 61.5 && ok "no request waited past its timeout during the stop (longest ${max_waited:-none} s <= 60 s)" \
    || not_ok "a request waited ${max_waited} s during the stop before it was given up (> 60 s)"
  if [ "$APISERVER_STOP" -ge 65 ]; then
    read -r n lo hi <<<"$(awk '$1 >= 50 { n++; if (!lo || $1 < lo) lo = $1; if ($1 > hi) hi = $1 }
      END { print n + 0, lo + 0, hi + 0 }' "$WORK/hang-given-up")"
    [ "$n" -ge 1 ] && within "$lo" 59.5 61.5 && within "$hi" 59.5 61.5 \
      && ok "the 60 s response timeout fired on $n requests sent into the stop (after ${lo}-${hi} s)" \
      || not_ok "requests given up after 50+ s: $n, after ${lo}-${hi} s, want 60"
    figure "hang.apiserver.response_timeout_seconds $lo-$hi"
  fi
  read -r n lo hi <<<"$(jq -r --argjson a "$stop_at" --argjson b "$cont_at" 'select(.event == "close" and
      .by == "client" and (.served | not) and .t >= $a and .t <= $b) | .waited' "$WORK/proxy.jsonl" |
    awk '{ n++; if (!lo || $1 < lo) lo = $1; if ($1 > hi) hi = $1 } END { print n + 0, lo + 0, hi + 0 }')"
  [ "$n" -ge 1 ] && within "$lo" 9.5 11 && within "$hi" 9.5 11 \
    && ok "the 10 s TLS handshake timeout fired on $n new connections (after ${lo}-${hi} s)" \
    || not_ok "new connections never answered: $n, given up after ${lo}-${hi} s, want 10"
  figure "hang.apiserver.handshake_timeout_seconds $lo-$hi"
  keep_two
  stable_leader apiserver
  keep_two

  # etcd stops: the API server is up but cannot read or write.
  burst faults-hang during 20
  estop_at=$(now)
  kill -STOP -- "-$ETCD_PID"
  STOPPED+=("$ETCD_PID")
  sleep "$ETCD_STOP"
  kill -CONT -- "-$ETCD_PID"
  STOPPED=()
  econt_at=$(now)
  eventually 60 k get --raw /readyz || not_ok "the API server is ready after etcd's SIGCONT"
  given_up "$estop_at" "$econt_at" >"$WORK/hang-given-up-etcd"
  figure "hang.etcd.given_up (whole seconds waited:requests) $(histogram <"$WORK/hang-given-up-etcd")"
  keep_two
  stable_leader etcd
  keep_two

  # Every exit was a step-down (status 1, "lost leadership"), none a crash.
  figure "hang.exits $(awk '{print $1 "=" $2}' "$EXITS" | tr '\n' ' ')"
  crashes=$(awk '$2 != 1 || $3 != "lost" {print}' "$EXITS")
  [ -z "$crashes" ] && ok "no crash: $(wc -l <"$EXITS") exits, each a step-down with status 1" \
    || not_ok "exits other than a step-down: $crashes"
  figure "hang.lease_transitions $(( $(jp lease default gk-faults '{.spec.leaseTransitions}') - transitions0 ))"

  # Afterwards: new work goes through, everything converges, one Event each.
  burst faults-hang after 10
  t0=$(now)
  eventually 120 all_tuned faults-hang && ok "all 70 Deployments converged ($(sub "$(now)" "$t0") s after the last burst)" \
    || not_ok "after both faults: $(untuned faults-hang) Deployments untuned"
  eventually 90 bash -c "[ \"\$(kubectl get events.events.k8s.io -n faults-hang -o name | wc -l)\" -ge 70 ]"
  per=$(events_per_workload faults-hang)
  expect "one Event per Deployment across the faults and the handovers" "$per" "1:70"
  figure "hang.events_per_deployment $per ($(event_reasons faults-hang))"
  # No stuck reconcile: the leader's queues drain.
  log=$(leader_log) || true
  if [ -n "$log" ]; then
    port=$(jq -r 'select(.msg == "serving HTTP") | .port' "$log" | head -1)
    eventually 30 bash -c "curl -sf http://127.0.0.1:$port/metrics | awk '/^gracekeeper_workqueue_depth/ {s += \$2} END {exit s != 0}'" \
      && ok "the leader's work queues are empty (no stuck reconcile)" || not_ok "the leader's work queues do not drain"
  fi
  for c in ${CANDIDATES[@]+"${CANDIDATES[@]}"}; do
    read -r name pid log <<<"$c"
    if op_alive "$pid"; then stop_operator "$pid"; fi
  done
  OPS=()
fi

# --------------------------------------------------------------- blackhole
# The old leader runs as gracekeeper's user through the proxy; the standby
# runs as the lab's admin, directly: the audit log tells their writes apart.
# The proxy freezes the leader's connections (what it sends is kept, not
# passed on) and holds new ones. The network heals 1 s after the standby
# took over: a leader still running then (one that drained its queue after
# the loss, as gracekeeper did before) would have its frozen writes arrive
# after the new leader's acquireTime.
if section blackhole; then
  echo "# blackhole: the leader's connections go silent; lease 6 s, renew deadline 4 s"
  setup_ns faults-bh
  le=(--leader-elect --leader-election-namespace default --leader-election-id gk-blackhole
    --lease-duration 6 --renew-deadline 4 --retry-period 1)
  GK_OPERATOR_KUBECONFIG="$WORK/proxy.kubeconfig" start_operator bh-old "${le[@]}" || not_ok "bh-old ready"
  OLD_PID=$OP_PID OLD_LOG=$OP_LOG
  OPS+=("$OLD_PID")
  eventually 20 grep -q '"msg":"started leading"' "$OLD_LOG" || not_ok "bh-old leads"
  start_operator bh-new "${le[@]}" || not_ok "bh-new ready"
  NEW_PID=$OP_PID NEW_LOG=$OP_LOG
  OPS+=("$NEW_PID")
  burst faults-bh before 20
  eventually 30 all_tuned faults-bh || not_ok "the old leader tuned the first 20"
  # Work the old leader holds when its network goes: 20 more Deployments
  # (its watch sees them before the freeze, or the new leader does after).
  burst faults-bh during 20
  sleep 0.3
  hole_at=$(now)
  kill -USR1 "$PROXY_PID"
  eventually 15 gone "$OLD_PID"
  gone_at=$(now)
  if op_alive "$OLD_PID"; then
    not_ok "the old leader still runs 15 s into the blackhole"
  else
    wait "$OLD_PID" 2>/dev/null
    status=$?
    ms=$(ms_between "$hole_at" "$gone_at")
    expect "blackhole: the old leader's exit status" "$status" 1
    within "$ms" 0 5500 && ok "blackhole: the old leader exited ${ms} ms in (renew deadline 4 s)" \
      || not_ok "blackhole: the old leader exited ${ms} ms in, want at most 5500 (renew deadline 4 s, retry 1 s)"
    figure "blackhole.old_leader_exit_ms $ms"
  fi
  eventually 20 grep -q '"msg":"started leading"' "$NEW_LOG" || not_ok "blackhole: the standby never led"
  acquired=$(jp lease default gk-blackhole '{.spec.acquireTime}')
  figure "blackhole.new_leader_after_seconds $(sub "$(now)" "$hole_at")"
  sleep 1
  kill -USR2 "$PROXY_PID"  # the network heals
  eventually 60 all_tuned faults-bh && ok "blackhole: the new leader tuned all 40" \
    || not_ok "blackhole: $(untuned faults-bh) Deployments untuned"
  sleep 3
  late=$(jq -r --arg since "$acquired" --arg user "$USER_NAME" 'select(.stage == "ResponseComplete" and
      .user.username == $user and .requestReceivedTimestamp > $since and
      (.verb | test("^(create|update|patch|delete)$"))) | "\(.verb) \(.objectRef.resource) \(.objectRef.name)"' \
    "$CLUSTER/audit.log")
  expect "blackhole: writes of the old leader's user after the new leader's acquireTime $acquired (audit log)" \
    "$(printf '%s' "$late" | grep -c . || true)" 0
  [ -n "$late" ] && printf '%s\n' "$late" | head | note
  # At most one Event each: the new leader reports nothing again (an Event
  # the old leader sent into the blackhole may be missing).
  per=$(events_per_workload faults-bh)
  expect "blackhole: no Deployment with two Events across the handover ($per)" \
    "$(tr ' ' '\n' <<<"$per" | awk -F: '$1 > 1' | tr '\n' ' ')" ""
  stop_operator "$NEW_PID"
  OPS=()
fi

finish
