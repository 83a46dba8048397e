#!/usr/bin/env bash
# The ShutdownPolicy CRD has one source of truth, crds/. kustomize refuses
# files outside its root (symlinks included) and a Helm chart carries its CRDs
# inside itself, so config/crd/ and charts/gracekeeper/crds/ hold copies: they
# must stay byte-identical. Fix with:
#   cp crds/shutdownpolicies.gracekeeper.dev.yaml config/crd/
#   cp crds/shutdownpolicies.gracekeeper.dev.yaml charts/gracekeeper/crds/
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
. "$ROOT/test/integration/ship/lib.sh"

SRC="$ROOT/crds/shutdownpolicies.gracekeeper.dev.yaml"
for copy in config/crd/shutdownpolicies.gracekeeper.dev.yaml charts/gracekeeper/crds/shutdownpolicies.gracekeeper.dev.yaml; do
  if [ -L "$ROOT/$copy" ]; then not_ok "$copy is a symlink (kustomize and helm package want a file)"
  elif cmp -s "$SRC" "$ROOT/$copy"; then ok "$copy is byte-identical to crds/"
  else not_ok "$copy differs from crds/ (cp $SRC $ROOT/$copy)"; diff "$SRC" "$ROOT/$copy" | head -20 | note; fi
done
# Nothing else in those directories: one CRD, one place.
expect "config/crd holds the CRD and its kustomization only" "$(cd "$ROOT/config/crd" && ls | tr '\n' ' ')" "kustomization.yaml shutdownpolicies.gracekeeper.dev.yaml "
expect "charts/gracekeeper/crds holds the CRD only" "$(cd "$ROOT/charts/gracekeeper/crds" && ls | tr '\n' ' ')" "shutdownpolicies.gracekeeper.dev.yaml "
finish
