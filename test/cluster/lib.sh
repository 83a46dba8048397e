# shellcheck shell=bash
# Shared helpers for test/cluster/* (sourced, not executed).
#
# Pinned versions of the real control plane used by the integration tests.
# Override with GK_K8S_VERSION / GK_ETCD_VERSION only to experiment; the cache
# directory is keyed by both, so different pins never clobber each other.

GK_K8S_VERSION="${GK_K8S_VERSION:-v1.37.2}"
GK_ETCD_VERSION="${GK_ETCD_VERSION:-v3.7.3}"

# shellcheck disable=SC2034
GK_CLUSTER_SCRIPTS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

gk_cache_root() {
  echo "${XDG_CACHE_HOME:-$HOME/.cache}/gracekeeper/control-plane/${GK_K8S_VERSION}-etcd${GK_ETCD_VERSION#v}"
}

gk_bin_dir() {
  echo "$(gk_cache_root)/bin"
}

gk_log() {
  echo "[$(date +%H:%M:%S)] $*" >&2
}

gk_die() {
  echo "error: $*" >&2
  exit 1
}

# gk_free_port VAR: sets VAR to a TCP port on 127.0.0.1 that nothing uses right
# now. Ports already handed out by this shell (GK_USED_PORTS) are skipped so one
# `up` never gets the same port twice (call it directly, not in $(...)).
GK_USED_PORTS=" "
gk_free_port() {
  local var="$1" p
  for _ in $(seq 1 200); do
    # below the kernel's ephemeral range (32768+), so no outgoing connection takes it
    p=$(( 12000 + (RANDOM * 32768 + RANDOM) % 20000 ))
    case "$GK_USED_PORTS" in *" $p "*) continue ;; esac
    # bash's /dev/tcp connect fails when nothing listens there.
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      if ! gk_port_bound "$p"; then
        GK_USED_PORTS="$GK_USED_PORTS$p "
        printf -v "$var" '%s' "$p"
        return 0
      fi
    fi
  done
  gk_die "could not find a free loopback port"
}

# gk_port_bound PORT: true when some socket is bound to PORT (listening or not).
gk_port_bound() {
  local hex
  hex=$(printf '%04X' "$1")
  grep -qiE "^ *[0-9]+: [0-9A-F]+:${hex} " /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# gk_pid_alive PID: true while PID exists and is not a zombie (kill -0 alone
# also succeeds for an exited process that nobody has reaped yet).
gk_pid_alive() {
  local st
  [ -n "$1" ] || return 1
  read -r st 2>/dev/null <"/proc/$1/stat" || return 1
  st="${st##*) }"
  [ "${st%% *}" != Z ]
}

# gk_pgid_members PGID: prints the pids (not zombies) of process group PGID.
gk_pgid_members() {
  local pgid="$1" f st rest
  for f in /proc/[0-9]*/stat; do
    read -r st 2>/dev/null <"$f" || continue
    rest="${st##*) }"
    # rest = "STATE PPID PGRP ..."
    # shellcheck disable=SC2086
    set -- $rest
    if [ "$3" = "$pgid" ] && [ "$1" != Z ]; then
      f="${f#/proc/}"; echo "${f%/stat}"
    fi
  done
}

# gk_pgid_alive PGID: true while any (non-zombie) process of that group exists.
gk_pgid_alive() {
  local pgid="$1"
  [ -n "$pgid" ] || return 1
  kill -0 -- "-$pgid" 2>/dev/null || return 1
  [ -n "$(gk_pgid_members "$pgid")" ]
}

# gk_stop_pgid NAME PGID [GRACE_SECONDS]: SIGTERM the process group, SIGKILL it
# after GRACE seconds (default 5), then wait until it is gone.
gk_stop_pgid() {
  local name="$1" pgid="$2" grace="${3:-5}"
  gk_pgid_alive "$pgid" || return 0
  kill -TERM -- "-$pgid" 2>/dev/null || true
  for _ in $(seq 1 $(( grace * 10 ))); do
    gk_pgid_alive "$pgid" || return 0
    sleep 0.1
  done
  gk_log "$name (pgid $pgid) did not stop after ${grace}s, sending SIGKILL"
  kill -KILL -- "-$pgid" 2>/dev/null || true
  for _ in $(seq 1 50); do
    gk_pgid_alive "$pgid" || return 0
    sleep 0.1
  done
  return 1
}

# gk_start NAME LOGFILE CMD...: starts CMD in its own session (setsid, so its
# pid is also its process-group id), stdout/stderr to LOGFILE, prints the pid.
gk_start() {
  local name="$1" log="$2"
  shift 2
  # setsid without --fork execs in place when the caller is not a group
  # leader (a background job of a non-interactive shell never is), so $! is
  # the pid of the new session leader == its pgid.
  setsid "$@" </dev/null >>"$log" 2>&1 &
  local pid=$!
  echo "$pid"
}

# gk_wait_ready URL CA CERT KEY TIMEOUT PID LOG NAME: polls URL (/readyz) with
# the admin client cert until it answers "ok"; fails early when PID died.
gk_wait_ready() {
  local url="$1" ca="$2" cert="$3" key="$4" timeout="$5" pid="$6" log="$7" name="$8"
  local deadline=$(( $(date +%s) + timeout )) out=""
  while :; do
    if ! gk_pid_alive "$pid"; then
      echo "error: $name exited before becoming ready; last 40 lines of $log:" >&2
      tail -n 40 "$log" >&2 || true
      return 1
    fi
    out=$(gk_lab curl -sS --max-time 3 --cacert "$ca" --cert "$cert" --key "$key" "$url" 2>&1) && [ "$out" = "ok" ] && return 0
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "error: $name not ready at $url after ${timeout}s (last answer: ${out:0:300}); last 40 lines of $log:" >&2
      tail -n 40 "$log" >&2 || true
      return 1
    fi
    sleep 0.25
  done
}

# GK_LAB_EXEC: the prefix that runs a command inside the lab's network
# namespace (up --with-node), or nothing. gk_lab CMD... runs CMD there.
GK_LAB_EXEC=()
gk_lab() {
  ${GK_LAB_EXEC[@]+"${GK_LAB_EXEC[@]}"} "$@"
}

# gk_load_env DIR: sources DIR/env (written by up) after checking it exists,
# and sets GK_LAB_EXEC from its LAB_NETNS.
gk_load_env() {
  local dir="$1"
  [ -f "$dir/env" ] || gk_die "$dir/env not found: was the cluster started with test/cluster/up $dir ?"
  # shellcheck disable=SC1091
  . "$dir/env"
  GK_LAB_EXEC=()
  if [ -n "${LAB_NETNS:-}" ]; then GK_LAB_EXEC=(nsenter --net="/run/netns/$LAB_NETNS" --); fi
}

# gk_set_kv FILE KEY VALUE: sets KEY=VALUE (shell-quoted) in a sourceable file.
gk_set_kv() {
  local file="$1" key="$2" val="$3" tmp
  tmp="$(mktemp "$file.XXXXXX")"
  if [ -f "$file" ]; then grep -v "^${key}=" "$file" >"$tmp" || true; fi
  printf '%s=%q\n' "$key" "$val" >>"$tmp"
  mv -f "$tmp" "$file"
}
