# shellcheck shell=bash
# The lab's real node, for `test/cluster/up DIR --with-node` and `down`
# (sourced after lib.sh, not executed). docs/development.md, "A real node", says
# how to use it; the comments here say why each setting is what it is.
#
# Layout under DIR/node/: containerd/ (config, root, state, socket), runc/,
# cni/ (net.d, ipam), kubelet/ (config, root dir, pod logs), kube-proxy/,
# kube-scheduler/, host-state (what the node changes on the host, for down).

# The lab's addresses, all from the benchmarking range 198.18.0.0/15.
GK_NODE_NAME=gk-lab-node
GK_NODE_IP=198.18.0.1
GK_POD_CIDR=198.18.0.0/16
GK_SERVICE_CIDR=198.19.0.0/16
GK_SERVICE_IP=198.19.0.1          # the `kubernetes` Service
GK_BRIDGE=gk0
GK_CNI_NETWORK=gk-lab
# Ports inside the lab's own network namespace: nothing else listens there.
GK_LAB_ETCD_PORT=2379
GK_LAB_ETCD_PEER_PORT=2380
GK_LAB_APISERVER_PORT=6443
GK_LAB_KCM_PORT=10257
GK_LAB_SCHEDULER_PORT=10259
GK_LAB_KUBELET_PORT=10250
GK_LAB_KUBELET_HEALTHZ_PORT=10248
GK_LAB_PROXY_METRICS_PORT=10249
GK_LAB_PROXY_HEALTHZ_PORT=10256

# One node lab per machine: the kubelet's cgroups (kubepods in every
# hierarchy), /var/lib/kubelet/device-plugins and the kernel sysctls it sets
# are machine-wide.
GK_NODE_LOCK=/run/gracekeeper/node-lab

# Packages the node needs, and a command or file that proves each.
GK_NODE_PACKAGES=(containerd:containerd runc:runc containernetworking-plugins:/usr/lib/cni/bridge
  iptables:iptables conntrack:conntrack util-linux:nsenter iproute2:ip)

# The host sysctls the kubelet sets (kubelet/cm/container_manager_linux.go
# setupKernelTunables); saved before start, restored by down.
GK_NODE_SYSCTLS=(vm/overcommit_memory kernel/panic kernel/panic_on_oops)

# gk_node_netns DIR: the network namespace's name for this lab directory.
gk_node_netns() {
  echo "gk-lab-$(printf '%s' "$1" | sha256sum | cut -c1-8)"
}

# gk_node_have COMMAND|/PATH: true when it is an executable file (bash's
# `command -v` also names a file that exists but cannot be executed).
gk_node_have() {
  local p="$1"
  [[ $p == /* ]] || p=$(command -v "$p") || return 1
  [ -f "$p" ] && [ -x "$p" ]
}

# gk_node_missing: sets the caller's arrays `missing` (what is absent, and its
# package) and `pkgs` (the packages to install) from GK_NODE_PACKAGES.
gk_node_missing() {
  local entry pkg probe
  missing=() pkgs=()
  for entry in "${GK_NODE_PACKAGES[@]}"; do
    pkg="${entry%%:*}"; probe="${entry#*:}"
    gk_node_have "$probe" && continue
    missing+=("$probe (Debian package $pkg)"); pkgs+=("$pkg")
  done
}

# gk_node_preflight: fails within seconds, naming what is missing, when the
# machine cannot run a node. Installs missing Debian packages first unless
# GK_NODE_INSTALL=0.
gk_node_preflight() {
  [ "$(id -u)" = 0 ] || gk_die "--with-node must run as root (it creates a network namespace, cgroups and mounts)"
  local missing=() pkgs=()
  gk_node_missing
  if [ ${#pkgs[@]} -gt 0 ] && [ "${GK_NODE_INSTALL:-1}" != 0 ] && command -v apt-get >/dev/null; then
    gk_log "installing ${pkgs[*]}"
    if ! { apt-get -q -o DPkg::Lock::Timeout=600 update &&
      DEBIAN_FRONTEND=noninteractive apt-get -y -q -o DPkg::Lock::Timeout=600 install \
        --no-install-recommends "${pkgs[@]}"; } >"${TMPDIR:-/tmp}/gk-node-apt.log" 2>&1; then
      tail -n 20 "${TMPDIR:-/tmp}/gk-node-apt.log" >&2
      gk_die "--with-node: could not install ${pkgs[*]} with apt-get (log above)"
    fi
    gk_node_missing
  fi
  [ ${#missing[@]} -eq 0 ] || gk_die "--with-node: missing $(IFS=,; echo "${missing[*]}" | sed 's/,/, /g')"
  local plugin
  for plugin in bridge host-local loopback; do
    [ -x "/usr/lib/cni/$plugin" ] || gk_die "--with-node: missing the CNI plugin /usr/lib/cni/$plugin (Debian package containernetworking-plugins)"
  done

  # Kernel features, each named when absent.
  grep -qw overlay /proc/filesystems || gk_die "--with-node: the kernel has no overlay file system (containerd's snapshotter needs it)"
  [ -d /sys/fs/cgroup/memory ] || [ -f /sys/fs/cgroup/cgroup.controllers ] ||
    gk_die "--with-node: no cgroup hierarchy is mounted under /sys/fs/cgroup (neither v1 memory nor v2)"
  [ -e /proc/self/ns/net ] || gk_die "--with-node: the kernel has no network namespaces"
  [ -d /proc/sys/net/bridge ] || modprobe br_netfilter 2>/dev/null || true
  [ -d /proc/sys/net/bridge ] || gk_die "--with-node: the kernel has no br_netfilter (/proc/sys/net/bridge is absent): Services would not work on a bridge"
}

# gk_node_claim DIR: takes the machine's one node-lab slot, or fails at once.
gk_node_claim() {
  local dir="$1" other h
  mkdir -p "$(dirname "$GK_NODE_LOCK")"
  exec 8>"$GK_NODE_LOCK.lock"
  flock 8
  if [ -f "$GK_NODE_LOCK" ]; then
    other="$(cat "$GK_NODE_LOCK")"
    if [ "$other" != "$dir" ] && gk_node_running "$other"; then
      exec 8>&-
      gk_die "a node lab is already running in $other (one per machine: the kubelet's cgroups and sysctls are machine-wide); stop it with test/cluster/down $other"
    fi
  fi
  for h in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
    if [ -d "$h" ]; then
      exec 8>&-
      gk_die "$h exists: another kubelet runs on this machine, or a node lab was not torn down (test/cluster/down DIR)"
    fi
  done
  echo "$dir" >"$GK_NODE_LOCK"
  exec 8>&-
}

# gk_node_running DIR: true when a process listed in DIR/pids still runs.
gk_node_running() {
  local name pid
  [ -f "$1/pids" ] || return 1
  while read -r name pid; do
    gk_pgid_alive "$pid" && return 0
  done <"$1/pids"
  return 1
}

# gk_node_netns_up DIR NETNS: the namespace with loopback and the pods' bridge
# (198.18.0.1/16, the node IP). No other interface, no default route: a packet
# for any address outside 198.18.0.0/15 and 127/8 has no route.
gk_node_netns_up() {
  local dir="$1" ns="$2" f
  ip netns add "$ns" 2>/dev/null || gk_die "could not create the network namespace $ns (ip netns add)"
  echo "netns $ns" >>"$dir/node/host-state"
  local in=(nsenter --net="/run/netns/$ns" --)
  "${in[@]}" ip link set lo up
  "${in[@]}" ip link add "$GK_BRIDGE" type bridge 2>/dev/null ||
    gk_die "--with-node: the kernel cannot create a bridge (ip link add type bridge)"
  "${in[@]}" ip link add gk-probe0 type veth peer name gk-probe1 2>/dev/null ||
    gk_die "--with-node: the kernel cannot create veth pairs (ip link add type veth)"
  "${in[@]}" ip link del gk-probe0
  "${in[@]}" ip addr add "$GK_NODE_IP/16" dev "$GK_BRIDGE"
  "${in[@]}" ip link set "$GK_BRIDGE" up
  # ClusterIPs are DNATed by kube-proxy in OUTPUT/PREROUTING; the packet first
  # needs a route, and the namespace has no default one.
  "${in[@]}" ip route add "$GK_SERVICE_CIDR" dev "$GK_BRIDGE" src "$GK_NODE_IP"
  for f in net/ipv4/ip_forward net/bridge/bridge-nf-call-iptables net/bridge/bridge-nf-call-ip6tables; do
    "${in[@]}" sh -c "echo 1 >/proc/sys/$f" 2>/dev/null || gk_die "could not set $f inside $ns"
  done
  "${in[@]}" iptables -t nat -L -n >/dev/null 2>&1 ||
    gk_die "--with-node: iptables does not work inside the namespace (kernel netfilter/nat missing?)"
}

# gk_node_save_host DIR: records what the kubelet and containerd may change
# outside DIR, so that down can put it back.
gk_node_save_host() {
  local dir="$1" s p
  for s in "${GK_NODE_SYSCTLS[@]}"; do
    echo "sysctl $s $(cat "/proc/sys/$s")" >>"$dir/node/host-state"
  done
  for p in /var/lib/kubelet /var/log/containers /var/log/pods /run/mount /var/lib/cni /run/containerd; do
    [ -e "$p" ] || echo "created $p" >>"$dir/node/host-state"
  done
  if [ -d /run/containerd/s ]; then
    find /run/containerd/s -mindepth 1 -maxdepth 1 -printf 'shim-socket-before %p\n' >>"$dir/node/host-state"
  fi
}

# gk_node_certs PKI: client and serving certificates of the node's components
# (called inside up's pki subshell, which defines `issue`).
gk_node_certs() {
  local client="basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n"
  issue kubelet "/O=system:nodes/CN=system:node:$GK_NODE_NAME" "$client"
  issue kubelet-serving "/CN=$GK_NODE_NAME" \
    "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:$GK_NODE_IP,DNS:$GK_NODE_NAME\n"
  issue kube-scheduler "/CN=system:kube-scheduler" "$client"
  issue kube-proxy "/CN=system:kube-proxy" "$client"
  # The API server's client certificate towards the kubelet (exec, logs).
  issue apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$client"
  chmod 644 kubelet.crt kubelet-serving.crt kube-scheduler.crt kube-proxy.crt apiserver-kubelet-client.crt
}

# gk_node_containerd_config DIR: containerd's config, every path under DIR/node.
gk_node_containerd_config() {
  local n="$1/node"
  mkdir -p "$n/containerd" "$n/runc" "$n/cni/net.d" "$n/cni/ipam"
  cat >"$n/containerd/config.toml" <<EOF
version = 2
root = "$n/containerd/root"
state = "$n/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$n/containerd/containerd.sock"

[plugins."io.containerd.internal.v1.opt"]
  path = "$n/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "gracekeeper.test/pause:lab"
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  # The VM lacks CAP_SYS_RESOURCE: a negative oom_score_adj is refused and every
  # sandbox would fail in runc ("can't get final child's PID from pipe").
  restrict_oom_score_adj = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$n/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$n/cni/net.d"
    max_conf_num = 1
EOF
  cat >"$n/cni/net.d/10-$GK_CNI_NETWORK.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "$GK_CNI_NETWORK",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$GK_BRIDGE",
      "isGateway": true,
      "hairpinMode": true,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$GK_POD_CIDR", "rangeStart": "198.18.1.0", "gateway": "$GK_NODE_IP"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$n/cni/ipam"
      }
    },
    {"type": "loopback"}
  ]
}
EOF
}

# gk_node_configs DIR PROXY_MIN_SYNC: kubelet and kube-proxy configuration files.
gk_node_configs() {
  local dir="$1" min_sync="$2" n="$1/node" pki="$1/pki"
  mkdir -p "$n/kubelet/root" "$n/kubelet/pod-logs" "$n/kube-proxy" "$n/kube-scheduler"
  cat >"$n/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# The host has cgroup v1 hierarchies (with a cgroup2 mount beside them).
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
containerRuntimeEndpoint: unix://$n/containerd/containerd.sock
address: $GK_NODE_IP
port: $GK_LAB_KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $GK_LAB_KUBELET_HEALTHZ_PORT
tlsCertFile: $pki/kubelet-serving.crt
tlsPrivateKeyFile: $pki/kubelet-serving.key
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $pki/ca.crt
authorization:
  mode: Webhook
# No DNS in the lab: pods get no resolv.conf from the host's resolvers.
resolvConf: ""
clusterDomain: cluster.local
podLogsDir: $n/kubelet/pod-logs
volumePluginDir: $n/kubelet/volume-plugins
evictionHard: {}
systemReserved:
  cpu: 100m
  memory: 256Mi
kubeReserved:
  cpu: 100m
  memory: 256Mi
maxPods: 60
serializeImagePulls: false
registerNode: true
EOF
  cat >"$n/kube-proxy/config.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $dir/kube-proxy.kubeconfig
hostnameOverride: $GK_NODE_NAME
mode: iptables
clusterCIDR: $GK_POD_CIDR
bindAddress: $GK_NODE_IP
nodePortAddresses: ["$GK_NODE_IP/32"]
healthzBindAddress: 127.0.0.1:$GK_LAB_PROXY_HEALTHZ_PORT
metricsBindAddress: 0.0.0.0:$GK_LAB_PROXY_METRICS_PORT
# Leave the host-wide conntrack sysctls alone.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
iptables:
  # A big cluster's endpoint propagation: kube-proxy rewrites its rules at most
  # once per minSyncPeriod (up --proxy-min-sync).
  minSyncPeriod: ${min_sync}s
  syncPeriod: 30s
EOF
}

# gk_node_stop DIR: stops the node: kubelet, kube-proxy, kube-scheduler, every
# container, containerd and its shims; then removes the mounts and cgroups.
# Prints what failed; returns non-zero if anything is left.
gk_node_stop() {
  local dir="$1" n="$1/node" failed=0
  [ -d "$n" ] || return 0

  # 1. the kubelet first, so nothing restarts what goes next.
  local name pid
  if [ -f "$dir/pids" ]; then
    while read -r name pid; do
      [ "$name" = kubelet ] || [ "$name" = kube-proxy ] || [ "$name" = kube-scheduler ] || continue
      gk_stop_pgid "$name" "$pid" 5 || { echo "error: $name (pgid $pid) survived SIGKILL" >&2; failed=1; }
    done <"$dir/pids"
  fi

  # 2. every container: SIGKILL whatever runs in the kubelet's cgroups.
  gk_node_kill_pods
  # 3. containerd, then its shims (they outlive it: they are re-parented to init).
  if [ -f "$dir/pids" ]; then
    while read -r name pid; do
      [ "$name" = containerd ] || continue
      gk_stop_pgid containerd "$pid" 5 || { echo "error: containerd (pgid $pid) survived SIGKILL" >&2; failed=1; }
    done <"$dir/pids"
  fi
  local shims
  shims=$(gk_node_processes "$dir")
  if [ -n "$shims" ]; then
    # shellcheck disable=SC2086
    kill -KILL $shims 2>/dev/null || true
    sleep 0.5
  fi
  gk_node_kill_pods

  # 4. mounts under DIR, deepest first (kubelet's rshared root, pod volumes,
  #    rootfs overlays, sandbox netns and shm).
  gk_node_unmount "$dir" || failed=1

  # 5. cgroups, depth-first, in every hierarchy.
  gk_node_rm_cgroups || failed=1
  return $failed
}

# gk_node_restore_host DIR: after every lab process has stopped, removes the
# network namespace (its iptables rules and veths go with it) and puts back
# what the node changed on the host. Then checks that nothing is left.
gk_node_restore_host() {
  local dir="$1" n="$1/node" failed=0
  if [ -f "$n/host-state" ]; then
    local kind a b
    while read -r kind a b; do
      case "$kind" in
        netns) ip netns del "$a" 2>/dev/null || true ;;
        sysctl) echo "$b" >"/proc/sys/$a" 2>/dev/null || { echo "error: could not restore $a to $b" >&2; failed=1; } ;;
        created) rm -rf "$a" ;;
      esac
    done <"$n/host-state"
    # Sockets of our shims (the ones that were not there before up).
    if [ -d /run/containerd/s ]; then
      local s
      for s in /run/containerd/s/*; do
        [ -e "$s" ] || continue
        grep -qxF "shim-socket-before $s" "$n/host-state" || rm -f "$s"
      done
    fi
  fi
  rm -f /var/lib/kubelet/device-plugins/kubelet.sock
  rm -f /var/lib/cni/results/"$GK_CNI_NETWORK"-* 2>/dev/null || true
  if [ -f "$GK_NODE_LOCK" ] && [ "$(cat "$GK_NODE_LOCK")" = "$dir" ]; then rm -f "$GK_NODE_LOCK"; fi

  local left
  left=$(gk_node_processes "$dir")
  [ -z "$left" ] || { echo "error: node processes left: $left" >&2; failed=1; }
  [ -z "$(gk_node_mounts "$dir")" ] || { echo "error: mounts left under $n" >&2; failed=1; }
  left=$(gk_node_cgroup_dirs)
  [ -z "$left" ] || { echo "error: cgroups left: $left" >&2; failed=1; }
  if [ -n "${LAB_NETNS:-}" ] && [ -e "/run/netns/$LAB_NETNS" ]; then
    echo "error: the network namespace $LAB_NETNS is still there" >&2
    failed=1
  fi
  return $failed
}

# gk_node_cgroup_dirs: the kubelet's top cgroup in every hierarchy that has one.
gk_node_cgroup_dirs() {
  local h
  for h in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
    [ -d "$h" ] && echo "$h"
  done
}

# gk_node_kill_pods: SIGKILL every process in the kubelet's cgroups (all of
# them are containers this lab's kubelet started: claim refused to start when
# kubepods already existed).
gk_node_kill_pods() {
  local top pids
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    pids=""
    for top in $(gk_node_cgroup_dirs); do
      pids+=" $(find "$top" -name cgroup.procs -exec cat {} + 2>/dev/null | tr '\n' ' ')"
    done
    [ -n "${pids// /}" ] || return 0
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.2
  done
  echo "warning: processes still in kubepods after 10 rounds of SIGKILL: $pids" >&2
}

# gk_node_processes DIR: pids of node processes that name DIR on their command
# line (containerd, its shims, kubelet, kube-proxy, kube-scheduler).
gk_node_processes() {
  local dir="$1" f pid comm
  for f in /proc/[0-9]*/cmdline; do
    pid="${f#/proc/}"; pid="${pid%/cmdline}"
    read -r comm 2>/dev/null <"/proc/$pid/comm" || continue
    case "$comm" in
      containerd|containerd-shim*|kubelet|kube-proxy|kube-scheduler) ;;
      *) continue ;;
    esac
    gk_pid_alive "$pid" || continue
    if tr '\0' '\n' 2>/dev/null <"$f" | grep -qF -- "$dir/"; then echo "$pid"; fi
  done
}

# gk_node_mounts DIR: mount points at or under DIR/node, deepest first.
gk_node_mounts() {
  awk -v d="$1/node" '{ p = $5; gsub(/\\040/, " ", p); if (p == d || index(p, d "/") == 1) print length(p), p }' \
    /proc/self/mountinfo | sort -rn | cut -d' ' -f2- | uniq
}

gk_node_unmount() {
  local dir="$1" m
  for _ in 1 2 3; do
    while read -r m; do
      [ -n "$m" ] || continue
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done < <(gk_node_mounts "$dir")
    [ -z "$(gk_node_mounts "$dir")" ] && return 0
  done
  echo "error: mounts left under $dir/node:" >&2
  gk_node_mounts "$dir" >&2
  return 1
}

gk_node_rm_cgroups() {
  local top failed=0
  for top in $(gk_node_cgroup_dirs); do
    find "$top" -depth -type d -exec rmdir {} + 2>/dev/null || true
    if [ -d "$top" ]; then
      sleep 0.5
      find "$top" -depth -type d -exec rmdir {} + 2>/dev/null || true
    fi
    [ -d "$top" ] && { echo "error: could not remove the cgroup $top" >&2; failed=1; }
  done
  return $failed
}

# gk_node_start DIR PROXY_MIN_SYNC [ARCHIVE...]: starts containerd, imports
# the images, starts kubelet, kube-proxy and kube-scheduler inside the lab's
# namespace, writes DIR/exec, and waits until the node is Ready. Runs inside
# up (uses its gk_start, record_pid, write_kubeconfig, TIMEOUT, BIN, PKI, ENV).
gk_node_start() {
  local dir="$1" min_sync="$2" n="$1/node"
  shift 2
  local images=("$@") ctr_sock="$dir/node/containerd/containerd.sock"
  gk_node_containerd_config "$dir"
  gk_node_configs "$dir" "$min_sync"

  cat >"$dir/exec" <<EOS
#!/bin/sh
# Runs a command inside the lab's network namespace ($LAB_NETNS), with
# KUBECONFIG set to the lab's admin kubeconfig: $dir/exec kubectl get pods -A
export KUBECONFIG='$dir/kubeconfig'
exec nsenter --net=/run/netns/$LAB_NETNS -- "\$@"
EOS
  chmod 755 "$dir/exec"

  # containerd
  local pid
  pid=$(gk_start containerd "$dir/logs/containerd.log" "${GK_LAB_EXEC[@]}" \
    containerd --config "$n/containerd/config.toml")
  record_pid containerd "$pid"
  local deadline=$(( $(date +%s) + TIMEOUT ))
  until [ -S "$ctr_sock" ] && ctr --address "$ctr_sock" version >/dev/null 2>&1; do
    if ! gk_pid_alive "$pid" || [ "$(date +%s)" -ge "$deadline" ]; then
      echo "error: containerd did not come up on $ctr_sock; last 40 lines of its log:" >&2
      tail -n 40 "$dir/logs/containerd.log" >&2 || true
      exit 1
    fi
    sleep 0.1
  done

  # images: pause (the sandbox), the test app when it is built, and --image
  local archive lab_app="${GK_LAB_APP:-${BUILD_DIR:-$GK_CLUSTER_SCRIPTS/../../build}/gk-lab-app}"
  archive=$("$GK_CLUSTER_SCRIPTS/../images/build" pause) || gk_die "building the pause image failed"
  images=("$archive" ${images[@]+"${images[@]}"})
  if [ -x "$lab_app" ]; then
    archive=$("$GK_CLUSTER_SCRIPTS/../images/build" lab-app --binary "$lab_app") || gk_die "building the lab-app image failed"
    images+=("$archive")
  else
    gk_log "no test app image: $lab_app is not built (cmake --build build --target gk-lab-app)"
  fi
  for archive in "${images[@]}"; do
    ctr --address "$ctr_sock" -n k8s.io images import "$archive" >>"$dir/logs/images.log" 2>&1 ||
      { tail -n 20 "$dir/logs/images.log" >&2; gk_die "could not import $archive into containerd"; }
  done

  # kubelet, kube-proxy, kube-scheduler
  write_kubeconfig "$dir/kubelet.kubeconfig" "system:node:$GK_NODE_NAME" "$PKI/kubelet.crt" "$PKI/kubelet.key"
  write_kubeconfig "$dir/kube-proxy.kubeconfig" system:kube-proxy "$PKI/kube-proxy.crt" "$PKI/kube-proxy.key"
  write_kubeconfig "$dir/kube-scheduler.kubeconfig" system:kube-scheduler "$PKI/kube-scheduler.crt" "$PKI/kube-scheduler.key"
  local kubelet_pid proxy_pid scheduler_pid
  kubelet_pid=$(gk_start kubelet "$dir/logs/kubelet.log" "${GK_LAB_EXEC[@]}" "$BIN/kubelet" \
    --config="$n/kubelet/config.yaml" \
    --kubeconfig="$dir/kubelet.kubeconfig" \
    --root-dir="$n/kubelet/root" \
    --cert-dir="$n/kubelet/pki" \
    --hostname-override="$GK_NODE_NAME" \
    --node-ip="$GK_NODE_IP" \
    --v=2)
  record_pid kubelet "$kubelet_pid"
  proxy_pid=$(gk_start kube-proxy "$dir/logs/kube-proxy.log" "${GK_LAB_EXEC[@]}" "$BIN/kube-proxy" \
    --config="$n/kube-proxy/config.yaml")
  record_pid kube-proxy "$proxy_pid"
  scheduler_pid=$(gk_start kube-scheduler "$dir/logs/kube-scheduler.log" "${GK_LAB_EXEC[@]}" "$BIN/kube-scheduler" \
    --kubeconfig="$dir/kube-scheduler.kubeconfig" \
    --authentication-kubeconfig="$dir/kube-scheduler.kubeconfig" \
    --authorization-kubeconfig="$dir/kube-scheduler.kubeconfig" \
    --bind-address=127.0.0.1 \
    --secure-port="$GK_LAB_SCHEDULER_PORT" \
    --cert-dir="$n/kube-scheduler/pki" \
    --leader-elect=false)
  record_pid kube-scheduler "$scheduler_pid"

  printf '%s=%q\n' \
    NODE_NAME "$GK_NODE_NAME" \
    NODE_IP "$GK_NODE_IP" \
    POD_CIDR "$GK_POD_CIDR" \
    SERVICE_CIDR "$GK_SERVICE_CIDR" \
    LAB_EXEC "$dir/exec" \
    CONTAINERD_ADDRESS "$ctr_sock" \
    CONTAINERD_PID "$pid" \
    KUBELET_PID "$kubelet_pid" \
    KUBE_PROXY_PID "$proxy_pid" \
    KUBE_SCHEDULER_PID "$scheduler_pid" \
    PROXY_MIN_SYNC "$min_sync" \
    PROXY_METRICS_URL "http://127.0.0.1:$GK_LAB_PROXY_METRICS_PORT/metrics" \
    LAB_APP_IMAGE "gracekeeper.test/lab-app:lab" >>"$ENV"

  # Ready: the node reports Ready, kube-proxy has synced its rules once, and
  # the default ServiceAccount exists (pods need it).
  local what
  deadline=$(( $(date +%s) + TIMEOUT ))
  for what in node proxy serviceaccount; do
    until gk_node_ready_check "$dir" "$what"; do
      local name p
      for name in containerd:$pid kubelet:$kubelet_pid kube-proxy:$proxy_pid kube-scheduler:$scheduler_pid; do
        p="${name#*:}"
        if ! gk_pid_alive "$p"; then
          echo "error: ${name%%:*} exited; last 40 lines of its log:" >&2
          tail -n 40 "$dir/logs/${name%%:*}.log" >&2 || true
          exit 1
        fi
      done
      if [ "$(date +%s)" -ge "$deadline" ]; then
        echo "error: the node is not ready after ${TIMEOUT}s (waiting for: $what); last 30 lines of the kubelet's log:" >&2
        tail -n 30 "$dir/logs/kubelet.log" >&2 || true
        exit 1
      fi
      sleep 0.25
    done
  done
}

# gk_node_proxy_has_service DIR IP: kube-proxy (iptables mode) in the lab in
# DIR has the rule that translates the Service address IP to an endpoint.
gk_node_proxy_has_service() {
  "$1/exec" iptables -w -t nat -S KUBE-SERVICES 2>/dev/null | grep -F -- "-d $2/32" |
    grep -qF -- "-j KUBE-SVC-"
}

# gk_node_ready_check DIR node|proxy|serviceaccount
gk_node_ready_check() {
  local dir="$1"
  case "$2" in
    node)
      [ "$(gk_lab kubectl --kubeconfig "$dir/kubeconfig" get node "$GK_NODE_NAME" \
        -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ] ;;
    proxy)
      gk_lab curl -fsS --max-time 2 "http://127.0.0.1:$GK_LAB_PROXY_HEALTHZ_PORT/healthz" >/dev/null 2>&1 ;;
    serviceaccount)
      gk_lab kubectl --kubeconfig "$dir/kubeconfig" get serviceaccount default -n default >/dev/null 2>&1 ;;
  esac
}
