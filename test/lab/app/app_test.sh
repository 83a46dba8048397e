#!/usr/bin/env bash
# gk-lab-app: its endpoints, its flags and, above all, its shutdown: after
# SIGTERM the port refuses at once, in-flight requests finish with
# Connection: close, the process exits 0 when none is left (or at the drain
# deadline), and each step is one JSON line on stdout.
#
# Usage: app_test.sh PATH/TO/gk-lab-app [--allow-dynamic]
#   --allow-dynamic: do not insist on a static binary (sanitized builds)
# Output: `ok - ...` per group of assertions; the first failed assertion
# prints `not ok - ...` and ends the test (die). Last line `N passed, M failed`.
set -euo pipefail
export LC_ALL=C
unset APP_LISTEN APP_WORK_MS APP_DRAIN_SECONDS APP_NAME POD_NAME
trap '' PIPE # a write to a connection the app closed fails instead of killing the test

APP=${1:?usage: app_test.sh PATH/TO/gk-lab-app [--allow-dynamic]}
ALLOW_DYNAMIC=${2:-}
WORK=$(mktemp -d)
PIDS=()

cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  exec 3>&- 4>&- 5>&- 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 143' TERM # ctest's timeout, or a user: run the EXIT trap too
trap 'exit 130' INT

# shellcheck source=SCRIPTDIR/../../integration/checks.sh
. "$(dirname "${BASH_SOURCE[0]}")/../../integration/checks.sh"   # ok, not_ok, within, summary

# die MESSAGE: a failed assertion ends the test at once (what follows builds
# on it): `not ok`, the current app log on stderr, the count line, exit 1.
CURRENT_LOG=
die() {
  not_ok "$*"
  if [[ -n $CURRENT_LOG && -f $CURRENT_LOG ]]; then
    echo "--- $CURRENT_LOG" >&2
    cat "$CURRENT_LOG" >&2
    [[ -f $CURRENT_LOG.err ]] && { echo "--- stderr" >&2; cat "$CURRENT_LOG.err" >&2; }
  fi
  summary || true
  exit 1
}

# Elapsed seconds since a $EPOCHREALTIME reading, as a float.
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }'; }

# start NAME ARGS...: runs the app in the background on a free port (port 0;
# the port is read from its `listening` line). Sets APP_PID and PORT.
start() {
  local name=$1
  shift
  CURRENT_LOG=$WORK/$name.log
  "$APP" "$@" >"$CURRENT_LOG" 2>"$CURRENT_LOG.err" &
  APP_PID=$!
  PIDS+=("$APP_PID")
  PORT=
  local i
  for i in $(seq 100); do
    PORT=$(grep '"event":"listening"' "$CURRENT_LOG" 2>/dev/null | jq -r .port 2>/dev/null || true)
    [[ $PORT =~ ^[0-9]+$ ]] && return 0
    kill -0 "$APP_PID" 2>/dev/null || die "$name: the app exited before listening"
    sleep 0.05
  done
  die "$name: no listening line after 5 s"
}

# wait_exit PID SECONDS: waits for the app to exit; sets RC.
wait_exit() {
  local pid=$1 i
  for i in $(seq $((${2} * 20))); do
    if ! kill -0 "$pid" 2>/dev/null; then
      RC=0
      wait "$pid" || RC=$?
      return 0
    fi
    sleep 0.05
  done
  die "the app (pid $pid) did not exit within $2 s"
}

# read_response FD: one HTTP response from a raw connection; sets STATUS,
# HEADERS (lower case, one per line) and BODY.
read_response() {
  local fd=$1 line len=0
  STATUS= HEADERS= BODY=
  IFS= read -r -t 5 -u "$fd" line || return 1
  line=${line#* }
  STATUS=${line%% *}
  while IFS= read -r -t 5 -u "$fd" line; do
    line=${line%$'\r'}
    [[ -z $line ]] && break
    HEADERS+="${line,,}"$'\n'
    if [[ ${line,,} == content-length:* ]]; then
      len=${line#*:}
      len=${len// /}
    fi
  done
  if ((len > 0)); then IFS= read -r -N "$len" -t 5 -u "$fd" BODY || return 1; fi
}

# expect_closed FD: the server closes the connection (EOF, not a timeout).
expect_closed() {
  local extra rc=0
  IFS= read -r -t 3 -u "$1" extra || rc=$?
  ((rc == 1)) || die "connection on fd $1 not closed (read rc=$rc, data '$extra')"
}

# check_log LOG NAME PID: every line is a JSON object with the common fields,
# in time order, and stderr is empty.
check_log() {
  local log=$1 name=$2 pid=$3
  jq -e . "$log" >/dev/null || die "$log: not JSON lines"
  [[ ! -s $log.err ]] || die "$log: the app wrote to stderr"
  # Every line carries event, name, pid, mono (a float with 6 decimals) and wall (RFC 3339 UTC, ms).
  local bad
  bad=$(jq -c --arg name "$name" --argjson pid "$pid" 'select(
      (.event | type) != "string" or .name != $name or .pid != $pid or (.mono | type) != "number"
      or (.wall | test("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z$") | not))' "$log")
  [[ -z $bad ]] || die "$log: lines without the common fields: $bad"
  [[ $(grep -c . "$log") == $(grep -cE '"mono":[0-9]+\.[0-9]{6},' "$log") ]] ||
    die "$log: mono is not printed with microseconds"
  jq -s -e '[.[].mono] as $m | $m == ($m | sort)' "$log" >/dev/null || die "$log: mono goes back"
}
# events LOG: the events of a log, comma separated; field LOG EVENT FILTER.
events() { jq -r .event "$1" | paste -sd, -; }
field() { jq -r --arg e "$2" "select(.event == \$e) | $3" "$1"; }

URL() { echo "http://127.0.0.1:$PORT$1"; }

# ---------------------------------------------------------------- static binary

if [[ $ALLOW_DYNAMIC != --allow-dynamic ]]; then
  ldd_out=$(ldd "$APP" 2>&1 || true)
  [[ $ldd_out == *"not a dynamic executable"* ]] || die "not a static binary: ldd says: $ldd_out"
  ok "static binary"
fi

# ---------------------------------------------------------------- flags

expect_usage_error() { # WHAT ARGS...: exits 2 naming the flag/variable and the value
  local what=$1 value=$2 out rc=0
  shift 2
  out=$(timeout 5 "$@" 2>&1 >/dev/null) || rc=$?
  ((rc == 2)) || die "$*: exit $rc, want 2 (stderr: $out)"
  [[ $out == *"$what"* && $out == *"$value"* ]] || die "$*: message does not name $what and '$value': $out"
}
expect_usage_error --work-ms abc "$APP" --work-ms abc
expect_usage_error --work-ms -5 "$APP" --work-ms -5
expect_usage_error --drain-seconds -1 "$APP" --drain-seconds -1
expect_usage_error --drain-seconds 1.5 "$APP" --drain-seconds=1.5
expect_usage_error --listen localhost:80 "$APP" --listen localhost:80
expect_usage_error --listen 127.0.0.1:99999 "$APP" --listen 127.0.0.1:99999
expect_usage_error --listen ::1:80 "$APP" --listen ::1:80
expect_usage_error --bogus --bogus "$APP" --bogus
expect_usage_error --listen "missing value" "$APP" --listen
expect_usage_error APP_WORK_MS ten env APP_WORK_MS=ten "$APP"
expect_usage_error APP_LISTEN 1.2.3:80 env APP_LISTEN=1.2.3:80 "$APP"
help=$(timeout 5 "$APP" --help) || die "--help failed"
[[ $help == *--drain-seconds* && $help == *APP_DRAIN_SECONDS* ]] || die "--help: $help"
ok "bad flags exit 2 naming the flag and the value; --help"

# ---------------------------------------------------------------- endpoints

# The flag wins over the environment; the environment over the default.
APP_WORK_MS=7 APP_DRAIN_SECONDS=abc APP_NAME=from-env POD_NAME=pod \
  start main --listen 127.0.0.1:0 --name lab-test --drain-seconds 20
MAIN_PID=$APP_PID
[[ $(field "$CURRENT_LOG" started '[.work_ms, .drain_seconds, .listen] | @csv') == '7,20,"127.0.0.1:0"' ]] ||
  die "started: $(field "$CURRENT_LOG" started .)"
[[ $(field "$CURRENT_LOG" listening '.address') == 127.0.0.1 ]] || die "listening address"

code=$(curl -sS -o "$WORK/body" -w '%{http_code}' -X POST "$(URL /orders)")
[[ $code == 201 ]] || die "POST /orders: $code"
jq -e '.pod == "lab-test" and .order == 1 and (keys == ["order", "pod"])' "$WORK/body" >/dev/null ||
  die "POST /orders body: $(cat "$WORK/body")"
code=$(curl -sS -o "$WORK/body" -w '%{http_code}' -X POST --data '{"item":1}' \
  -H 'Content-Type: application/json' "$(URL /orders)")
[[ $code == 201 ]] && jq -e '.order == 2' "$WORK/body" >/dev/null || die "second order: $code $(cat "$WORK/body")"
t=$(curl -sS -o /dev/null -w '%{http_code} %{time_total}' -X POST "$(URL '/orders?ms=400')")
[[ ${t% *} == 201 ]] && within "${t#* }" 0.39 3 || die "POST /orders?ms=400: $t"
[[ $(curl -sS -o /dev/null -w '%{http_code}' -X POST "$(URL '/orders?ms=x')") == 400 ]] || die "?ms=x"
[[ $(curl -sS -w ' %{http_code}' "$(URL /ready)") == "ok 200" ]] || die "/ready"
[[ $(curl -sS -o /dev/null -w '%{http_code}' "$(URL /live)") == 200 ]] || die "/live"
[[ $(curl -sS -o /dev/null -w '%{http_code}' "$(URL /nope)") == 404 ]] || die "/nope"
[[ $(curl -sS -o /dev/null -w '%{http_code}' "$(URL /orders)") == 405 ]] || die "GET /orders"
[[ $(curl -sS -o /dev/null -w '%{http_code}' -X POST "$(URL /ready)") == 405 ]] || die "POST /ready"
# Keep-alive: curl's second transfer reuses the first connection.
[[ $(curl -sS -o /dev/null -o /dev/null -w '%{num_connects}' "$(URL /live)" "$(URL /ready)") == 10 ]] ||
  die "keep-alive: the connection was not reused"
ok "endpoints, keep-alive, flags over environment"

# ---------------------------------------------------------------- graceful shutdown

# Two keep-alive connections (fd 3 and 5), each used once before SIGTERM and
# once after.
exec 3<>"/dev/tcp/127.0.0.1/$PORT" 5<>"/dev/tcp/127.0.0.1/$PORT"
for fd in 3 5; do
  printf 'GET /live HTTP/1.1\r\nHost: lab\r\n\r\n' >&"$fd"
  read_response "$fd" || die "fd $fd: no answer"
  [[ $STATUS == 200 && $HEADERS != *"connection: close"* ]] || die "fd $fd before SIGTERM: $STATUS $HEADERS"
done

curl -sS -D "$WORK/slow.headers" -o "$WORK/slow.body" -w '%{http_code}' --max-time 20 \
  -X POST "$(URL '/orders?ms=1500')" >"$WORK/slow.code" 2>"$WORK/slow.err" &
SLOW_PID=$!
PIDS+=("$SLOW_PID")
sleep 0.3
# The slow order does not hold up others (a timer, not a blocked thread).
t=$(curl -sS -o /dev/null -w '%{http_code} %{time_total}' "$(URL /ready)")
[[ ${t% *} == 200 ]] && within "${t#* }" 0 0.5 || die "/ready during a slow order: $t"

T0=$EPOCHREALTIME
kill -TERM "$MAIN_PID"
refused_after=
for i in $(seq 40); do
  rc=0
  curl -sS -o /dev/null --max-time 1 "$(URL /ready)" 2>/dev/null || rc=$?
  if ((rc == 7)); then
    refused_after=$(since "$T0")
    break
  fi
  sleep 0.01
done
[[ -n $refused_after ]] || die "the port still accepts connections after SIGTERM"
within "$refused_after" 0 0.2 || die "the port refused only ${refused_after}s after SIGTERM"
rc=0
curl -sS -o /dev/null --max-time 1 "$(URL /ready)" 2>/dev/null || rc=$?
((rc == 7)) || die "/ready after SIGTERM: curl exit $rc, want 7 (connection refused)"
kill -0 "$MAIN_PID" 2>/dev/null || die "the app exited with a request in flight"
ok "the port refuses ${refused_after}s after SIGTERM"

# A second SIGTERM changes nothing.
kill -TERM "$MAIN_PID"

# The open keep-alive connection is still served, with Connection: close.
printf 'POST /orders?ms=0 HTTP/1.1\r\nHost: lab\r\nContent-Length: 0\r\n\r\n' >&3 ||
  die "fd 3: the connection open at SIGTERM was closed before a request came"
read_response 3 || die "fd 3 after SIGTERM: no answer"
[[ $STATUS == 201 && $HEADERS == *"connection: close"* ]] || die "fd 3 after SIGTERM: $STATUS $HEADERS"
jq -e '.pod == "lab-test"' <<<"$BODY" >/dev/null || die "fd 3 after SIGTERM: body $BODY"
expect_closed 3
exec 3>&-
printf 'GET /ready HTTP/1.1\r\nHost: lab\r\n\r\n' >&5 ||
  die "fd 5: the connection open at SIGTERM was closed before a request came"
read_response 5 || die "fd 5 after SIGTERM: no answer"
[[ $STATUS == 503 && $HEADERS == *"connection: close"* ]] || die "fd 5: /ready after SIGTERM: $STATUS $HEADERS"
expect_closed 5
exec 5>&-
ok "requests on open connections after SIGTERM are served with Connection: close; /ready 503"

wait "$SLOW_PID" || die "the slow request failed: $(cat "$WORK/slow.err")"
slow_done=$EPOCHREALTIME
[[ $(cat "$WORK/slow.code") == 201 ]] || die "slow request: $(cat "$WORK/slow.code")"
grep -qi '^connection: close' "$WORK/slow.headers" || die "slow request: no Connection: close"
jq -e '.pod == "lab-test"' "$WORK/slow.body" >/dev/null || die "slow body: $(cat "$WORK/slow.body")"
wait_exit "$MAIN_PID" 5
((RC == 0)) || die "exit code $RC after a graceful shutdown"
exited_after=$(since "$slow_done")
within "$exited_after" 0 1 || die "exited ${exited_after}s after the last answer"
ok "the slow request completes with 201 and Connection: close; exit 0"

LOG=$CURRENT_LOG
check_log "$LOG" lab-test "$MAIN_PID"
[[ $(events "$LOG") == started,listening,sigterm,last_request,exit ]] || die "events: $(events "$LOG")"
[[ $(field "$LOG" sigterm '[.in_flight, .signal] | @csv') == '1,"SIGTERM"' ]] ||
  die "sigterm: $(field "$LOG" sigterm .)"
jq -s -e 'map({(.event): .}) | add as $e
  | $e.last_request.served_after_sigterm >= 3 and $e.last_request.served >= 15
  and $e.last_request.in_flight == 0
  and $e.last_request.last_response_mono >= $e.sigterm.mono
  and $e.last_request.last_order_mono >= $e.sigterm.mono
  and $e.last_request.last_order_mono <= $e.last_request.last_response_mono
  and $e.exit.mono - $e.last_request.last_response_mono < 0.1
  and ($e.last_request.last_response_wall | test("Z$")) and $e.exit.code == 0' "$LOG" >/dev/null ||
  die "shutdown lines: $(jq -c 'select(.event == "last_request" or .event == "exit")' "$LOG")"
ok "lifecycle log: started, listening, sigterm (in_flight 1), last_request, exit"

# ---------------------------------------------------------------- idle: closed, then exit

# SIGINT with nothing in flight and a keep-alive connection idle: the app
# waits --idle-close-ms for a request on it, then closes it and exits (exiting
# at once would race the client's next request: it would get EOF).
POD_NAME=idle-pod start idle --listen 127.0.0.1:0 --idle-close-ms 300
exec 4<>"/dev/tcp/127.0.0.1/$PORT"
printf 'GET /ready HTTP/1.1\r\nHost: lab\r\n\r\n' >&4
read_response 4 && [[ $STATUS == 200 ]] || die "idle: /ready $STATUS"
T0=$EPOCHREALTIME
kill -INT "$APP_PID"
wait_exit "$APP_PID" 5
((RC == 0)) || die "idle: exit code $RC"
within "$(since "$T0")" 0.25 0.8 || die "idle: exited $(since "$T0")s after SIGINT (idle close 0.3 s)"
expect_closed 4
exec 4>&-
check_log "$CURRENT_LOG" idle-pod "$APP_PID"
[[ $(events "$CURRENT_LOG") == started,listening,sigterm,last_request,exit ]] ||
  die "idle events: $(events "$CURRENT_LOG")"
jq -s -e 'map({(.event): .}) | add as $e | $e.sigterm.signal == "SIGINT" and $e.sigterm.in_flight == 0
  and $e.sigterm.connections == 1
  and $e.last_request.served == 1 and $e.last_request.served_after_sigterm == 0' "$CURRENT_LOG" \
  >/dev/null || die "idle: $(cat "$CURRENT_LOG")"
ok "SIGINT with an idle keep-alive connection: closed after --idle-close-ms, then exit 0"

# Nothing open at all: exit at once.
POD_NAME=idle-pod start idle2 --listen 127.0.0.1:0
T0=$EPOCHREALTIME
kill -TERM "$APP_PID"
wait_exit "$APP_PID" 5
((RC == 0)) || die "idle2: exit code $RC"
within "$(since "$T0")" 0 0.2 || die "idle2: exited $(since "$T0")s after SIGTERM"
ok "SIGTERM with no connection open: immediate exit 0"

# ---------------------------------------------------------------- drain deadline

POD_NAME=drain-pod start drain --listen 127.0.0.1:0 --drain-seconds 1
DRAIN_PID=$APP_PID
curl -sS -o /dev/null --max-time 20 -X POST "$(URL '/orders?ms=5000')" 2>/dev/null &
LONG_PID=$!
PIDS+=("$LONG_PID")
sleep 0.3
T0=$EPOCHREALTIME
kill -TERM "$DRAIN_PID"
sleep 0.2
kill -TERM "$DRAIN_PID" # changes nothing: still the deadline of the first
wait_exit "$DRAIN_PID" 10
took=$(since "$T0")
((RC == 0)) || die "drain: exit code $RC"
within "$took" 0.9 1.6 || die "drain: exited ${took}s after SIGTERM, want about 1 s"
rc=0
wait "$LONG_PID" || rc=$?
((rc != 0)) || die "drain: the 5 s request was answered although the drain deadline passed"
check_log "$CURRENT_LOG" drain-pod "$DRAIN_PID"
[[ $(events "$CURRENT_LOG") == started,listening,sigterm,drain_timeout,last_request,exit ]] ||
  die "drain events: $(events "$CURRENT_LOG")"
jq -s -e 'map({(.event): .}) | add as $e | $e.sigterm.in_flight == 1
  and $e.drain_timeout.in_flight == 1
  and ($e.drain_timeout.mono - $e.sigterm.mono) >= 0.99 and ($e.drain_timeout.mono - $e.sigterm.mono) < 1.3
  and $e.last_request.served == 0 and $e.last_request.last_response_mono == null
  and $e.exit.code == 0' "$CURRENT_LOG" >/dev/null || die "drain: $(cat "$CURRENT_LOG")"
ok "drain deadline: exit 0 after ${took}s with drain_timeout (in_flight 1)"

# ---------------------------------------------------------------- port in use

start holder --listen 127.0.0.1:0
HOLDER_PORT=$PORT
rc=0
timeout 5 "$APP" --listen "127.0.0.1:$HOLDER_PORT" >"$WORK/busy.log" 2>"$WORK/busy.err" || rc=$?
((rc == 1)) || die "listening on a busy port: exit $rc, want 1"
jq -e 'select(.event == "exit") | .code == 1' "$WORK/busy.log" >/dev/null || die "busy: $(cat "$WORK/busy.log")"
kill -TERM "$APP_PID"
wait_exit "$APP_PID" 5
ok "a busy port: exit 1 with the reason"

summary
