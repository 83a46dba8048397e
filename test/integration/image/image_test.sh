#!/usr/bin/env bash
# test/integration/image/image_test.sh: the container image, end to end.
#
# Runs hack/image (builds the Dockerfile with buildah, exports the OCI archive),
# then imports the archive into a throw-away containerd started here (its root,
# state and socket under a temporary directory; CRI disabled) and checks:
#   - the archive exists and hack/image printed its path last on stdout
#   - containerd names the image gracekeeper.test/gracekeeper:VERSION (and :dev)
#   - the image config: User 65532:65532, Entrypoint ["/gracekeeper","run"]
#   - hack/image --load DIR imports it into the containerd DIR/env names
#   - `gracekeeper version` runs in the image under containerd + runc, as 65532
#   - the SBOM (CACHE/gracekeeper.spdx.json) is valid SPDX 2.3 (pyspdxtools,
#     spdx-tools 0.8.3 from PyPI in a cached venv), names the image's manifest
#     and the binary in it by their sha256, the runtime and build packages,
#     and the base images by digest
#   - the image's time stamp is SOURCE_DATE_EPOCH (the time of the last
#     commit of what it is built from)
# containerd is stopped by its pid, mounts under the temporary directory are
# unmounted and the directory removed on any exit. Prints "N passed, M failed"
# last; exit 0 only when nothing failed, 77 (skipped) when not root.
#
# Slow on a fresh machine (the image's build stage compiles the project:
# 4-7 minutes on 2 cores); seconds when hack/image's caches are warm.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
readonly HERE ROOT

if ((EUID != 0)); then
  echo "image_test: needs root (hack/image and containerd); skipped"
  exit 77
fi
for tool in containerd ctr runc jq; do
  command -v "$tool" >/dev/null || { echo "image_test: '$tool' not found (Debian packages containerd, runc, jq)"; exit 1; }
done

. "$ROOT/test/integration/harness.sh"   # ok, not_ok, expect, finish, on_exit

TMP=$(mktemp -d /tmp/gk-image-test.XXXXXX)
readonly TMP
CONTAINERD_PID=
RUN_CONTAINERD_EXISTED=false
[[ -e /run/containerd ]] && RUN_CONTAINERD_EXISTED=true
cleanup() {
  if [[ -n $CONTAINERD_PID ]] && kill -0 "$CONTAINERD_PID" 2>/dev/null; then
    # A container left by an interrupted `ctr run` (its shim would outlive
    # containerd): killed and deleted through this containerd first.
    local id
    for id in $(ctr --address "$TMP/containerd.sock" -n k8s.io tasks ls -q 2>/dev/null); do
      ctr --address "$TMP/containerd.sock" -n k8s.io tasks kill -s KILL "$id" >/dev/null 2>&1
      ctr --address "$TMP/containerd.sock" -n k8s.io tasks rm -f "$id" >/dev/null 2>&1
    done
    for id in $(ctr --address "$TMP/containerd.sock" -n k8s.io containers ls -q 2>/dev/null); do
      ctr --address "$TMP/containerd.sock" -n k8s.io containers rm "$id" >/dev/null 2>&1
    done
    kill -TERM "$CONTAINERD_PID" 2>/dev/null
    eventually 10 gone "$CONTAINERD_PID"
    kill -KILL "$CONTAINERD_PID" 2>/dev/null || true
    wait "$CONTAINERD_PID" 2>/dev/null || true
  fi
  # Snapshot and task mounts left under TMP: deepest first.
  local m
  while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done < <(awk -v t="$TMP/" 'index($2, t) == 1 { print $2 }' /proc/self/mounts | sort -r)
  rm -rf "$TMP"
  # The shim socket directory, when this test created it (empty ones only).
  if ! $RUN_CONTAINERD_EXISTED; then
    rmdir /run/containerd/s /run/containerd/fifo /run/containerd 2>/dev/null || true
  fi
}
on_exit cleanup

VERSION=$(sed -n 's/^project(gracekeeper VERSION \([0-9][0-9.]*\).*/\1/p' "$ROOT/CMakeLists.txt" | head -n1)
IMAGE=gracekeeper.test/gracekeeper:$VERSION

# ---------------------------------------------------------------- hack/image
echo "# hack/image (log: $TMP/hack-image.err while running)"
start=$SECONDS
if "$ROOT/hack/image" >"$TMP/hack-image.out" 2>"$TMP/hack-image.err"; then
  ok "hack/image succeeded in $((SECONDS - start)) s"
else
  not_ok "hack/image failed (exit $?); last lines of its stderr:"
  tail -n 30 "$TMP/hack-image.err" | sed 's/^/    /'
  finish
fi
grep -E 'unpacked|archive' "$TMP/hack-image.err" | tail -n 1 | sed 's/^/# /'
ARCHIVE=$(tail -n 1 "$TMP/hack-image.out")
if [[ -s $ARCHIVE ]]; then
  ok "archive exists: $ARCHIVE ($(stat -c %s "$ARCHIVE") bytes)"
else
  not_ok "archive '$ARCHIVE' (last line of hack/image's stdout) does not exist or is empty"
  finish
fi

# ---------------------------------------------------------------- containerd
SOCK=$TMP/containerd.sock
cat >"$TMP/config.toml" <<EOF
version = 2
root = "$TMP/root"
state = "$TMP/state"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$SOCK"

[ttrpc]
  address = "$SOCK.ttrpc"

[debug]
  address = "$TMP/debug.sock"

[plugins."io.containerd.internal.v1.opt"]
  path = "$TMP/opt"
EOF
containerd --config "$TMP/config.toml" >"$TMP/containerd.log" 2>&1 &
CONTAINERD_PID=$!
CTR=(ctr --address "$SOCK" -n k8s.io)
# runc's state and the stdio fifos under TMP too; no cgroup of its own (runc
# removes it with the container). containerd 1.6 puts shim sockets in
# /run/containerd/s whatever its state directory: see cleanup.
RUN=("${CTR[@]}" run --rm --runc-root "$TMP/runc" --fifo-dir "$TMP/fifo" --cgroup "")
for ((i = 0; i < 300; i++)); do
  [[ -S $SOCK ]] && "${CTR[@]}" version >/dev/null 2>&1 && break
  kill -0 "$CONTAINERD_PID" 2>/dev/null || break
  sleep 0.1
done
if "${CTR[@]}" version >/dev/null 2>&1; then
  ok "throw-away containerd $(containerd --version | awk '{ print $3 }') up (pid $CONTAINERD_PID)"
else
  not_ok "containerd did not start; last lines of its log:"
  tail -n 20 "$TMP/containerd.log" | sed 's/^/    /'
  finish
fi

if "${CTR[@]}" images import "$ARCHIVE" >"$TMP/import.log" 2>&1; then
  ok "ctr images import"
else
  not_ok "ctr images import failed: $(tr '\n' ' ' <"$TMP/import.log")"
  finish
fi
names=$("${CTR[@]}" images ls -q | sort | tr '\n' ' ')
for name in "$IMAGE" gracekeeper.test/gracekeeper:dev; do
  if grep -qw -- "$name" <<<"$names"; then ok "image named $name"; else not_ok "no image named $name (have: $names)"; fi
done

# The config, from containerd's content store: manifest -> config blob.
manifest_digest=$("${CTR[@]}" images ls | awk -v n="$IMAGE" '$1 == n { print $3 }')
manifest=$("${CTR[@]}" content get "$manifest_digest" 2>/dev/null)
config_digest=$(jq -r '.config.digest // empty' <<<"$manifest" 2>/dev/null)
config=$("${CTR[@]}" content get "$config_digest" 2>/dev/null)
if [[ -n $config ]]; then
  expect "config User" "$(jq -r '.config.User' <<<"$config")" "65532:65532"
  expect "config Entrypoint" "$(jq -c '.config.Entrypoint' <<<"$config")" '["/gracekeeper","run"]'
  expect "config os/architecture" "$(jq -r '"\(.os)/\(.architecture)"' <<<"$config")" "linux/$(dpkg --print-architecture)"
else
  not_ok "could not read the image config (manifest '$manifest_digest', config '$config_digest')"
fi

# hack/image --load DIR: the same archive into "a lab's" containerd, the one
# DIR/env names (here the throw-away one, its images removed first).
"${CTR[@]}" images rm "$IMAGE" gracekeeper.test/gracekeeper:dev >/dev/null 2>&1
printf 'CONTAINERD_ADDRESS=%s\n' "$SOCK" >"$TMP/env"
if "$ROOT/hack/image" --load "$TMP" >"$TMP/load.out" 2>"$TMP/load.err"; then
  names=$("${CTR[@]}" images ls -q | tr '\n' ' ')
  if grep -qw -- "$IMAGE" <<<"$names"; then ok "hack/image --load imported $IMAGE"; else not_ok "after hack/image --load: no $IMAGE (have: $names)"; fi
else
  not_ok "hack/image --load failed; last lines: $(tail -n 5 "$TMP/load.err" | tr '\n' ' ')"
fi
if "$ROOT/hack/image" --no-such-option >/dev/null 2>&1; then rc=0; else rc=$?; fi
expect "hack/image with an unknown option exits" "$rc" 2

# ---------------------------------------------------------------- SBOM
SBOM=$(dirname "$ARCHIVE")/gracekeeper.spdx.json
SPDX_VENV=${XDG_CACHE_HOME:-$HOME/.cache}/gracekeeper/tools/spdx-tools-0.8.3
if [[ ! -x $SPDX_VENV/bin/python ]]; then
  # Made aside, then moved: a venv's python finds its packages wherever it is.
  rm -rf "$SPDX_VENV.tmp"
  python3 -m venv "$SPDX_VENV.tmp" && "$SPDX_VENV.tmp/bin/pip" install -q spdx-tools==0.8.3 &&
    rm -rf "$SPDX_VENV" && mv "$SPDX_VENV.tmp" "$SPDX_VENV" || echo "# could not install spdx-tools"
fi
if [[ -s $SBOM ]]; then
  if "$SPDX_VENV/bin/python" -m spdx_tools.spdx.clitools.pyspdxtools -i "$SBOM" >"$TMP/spdx.out" 2>&1 &&
    ! grep -q . "$TMP/spdx.out"; then
    ok "the SBOM is valid SPDX (pyspdxtools): $(jq '.packages | length' "$SBOM") packages"
  else
    not_ok "pyspdxtools on the SBOM: $(head -n 5 "$TMP/spdx.out" | tr '\n' ' ')"
  fi
  archive_manifest=$(tar -xOf "$ARCHIVE" index.json | jq -r '.manifests[0].digest')
  expect "the SBOM's image is the archive's manifest" \
    "$(jq -r '.packages[] | select(.SPDXID == "SPDXRef-Image") | "sha256:" + .checksums[0].checksumValue' "$SBOM")" \
    "$archive_manifest"
  for p in libssl3t64 libmimalloc3 libyaml-cpp0.8; do
    jq -e --arg p "$p" '.packages[] | select(.SPDXID | startswith("SPDXRef-Runtime-")) | select(.name == $p)' "$SBOM" >/dev/null &&
      ok "the SBOM lists the runtime package $p" || not_ok "the SBOM has no runtime package $p"
  done
  for p in g++ cmake nlohmann-json3-dev libboost-dev; do
    jq -e --arg p "$p" '(.packages[] | select((.SPDXID | startswith("SPDXRef-Build-")) and .name == $p) | .SPDXID)
        as $id | .relationships | any(.spdxElementId == $id and .relationshipType == "BUILD_DEPENDENCY_OF"
        and .relatedSpdxElement == "SPDXRef-Binary")' "$SBOM" >/dev/null &&
      ok "the SBOM lists the build package $p, a build dependency of the binary" ||
      not_ok "the SBOM has no build package $p (a BUILD_DEPENDENCY_OF the binary)"
  done
  expect "the SBOM names the base images by digest" \
    "$(jq -r '[.packages[] | select(.SPDXID | endswith("Base")) | .name + "@" + .versionInfo | test("^debian:trixie(-slim)?@sha256:[0-9a-f]{64}$")] | map(tostring) | join(" ")' "$SBOM")" "true true"
else
  not_ok "no SBOM at $SBOM"
fi

# `gracekeeper version` in the image, as its user, under runc (its own network
# namespace, nothing else of the host's).
if out=$(timeout 120 "${RUN[@]}" "$IMAGE" "gk-image-test-$$" /gracekeeper version 2>&1); then
  if grep -q "$VERSION" <<<"$out"; then
    ok "gracekeeper version in the image: $(head -n 1 <<<"$out")"
  else
    not_ok "gracekeeper version in the image printed no '$VERSION': $out"
  fi
else
  not_ok "ctr run $IMAGE /gracekeeper version failed: $out"
fi
if out=$(timeout 120 "${RUN[@]}" "$IMAGE" "gk-image-test-id-$$" /bin/sh -c 'id -u; id -g' 2>&1); then
  expect "runs as uid/gid" "$(tr '\n' ' ' <<<"$out" | sed 's/ $//')" "65532 65532"
else
  not_ok "ctr run $IMAGE id failed: $out"
fi
if out=$(timeout 120 "${RUN[@]}" "$IMAGE" "gk-image-test-sha-$$" /usr/bin/sha256sum /gracekeeper 2>&1); then
  expect "the SBOM's binary is the image's /gracekeeper (sha256)" \
    "$(jq -r '.packages[] | select(.SPDXID == "SPDXRef-Binary") | .checksums[0].checksumValue' "$SBOM" 2>/dev/null)" \
    "$(awk '{ print $1 }' <<<"$out")"
else
  not_ok "ctr run $IMAGE sha256sum failed: $out"
fi
if [[ -n ${config:-} ]]; then
  expect "the image's time stamp is the last commit's (SOURCE_DATE_EPOCH)" \
    "$(date -u -d "$(jq -r '.created' <<<"$config")" +%s)" \
    "$(git -C "$ROOT" log -1 --format=%ct -- Dockerfile CMakeLists.txt include src)"
fi

finish
