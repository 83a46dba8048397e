# shellcheck shell=bash
# Shared by the ship tests (sourced): the harness (../harness.sh) and reading
# YAML. Expects ROOT (the repository).

# shellcheck source=SCRIPTDIR/../harness.sh
. "$(dirname "${BASH_SOURCE[0]}")/../harness.sh"

# The pinned Helm, built once and cached (test/tools/build-helm).
helm_binary() {
  HELM=$("$ROOT/test/tools/build-helm") || die "test/tools/build-helm failed"
}

# yaml2json: multi-document YAML on stdin -> a JSON array of the documents
# (empty documents dropped) on stdout.
yaml2json() {
  python3 -c 'import json, sys, yaml
print(json.dumps([d for d in yaml.safe_load_all(sys.stdin) if d]))'
}

CHART="$ROOT/charts/gracekeeper"
# render [helm template flags...]: the chart as release "gracekeeper" in
# namespace gracekeeper-system, as a JSON array.
render() {
  "$HELM" template gracekeeper "$CHART" --namespace gracekeeper-system "$@" | yaml2json
}
# kinds JSON: "Kind/name" of every document, sorted, one line.
kinds() { jq -r '[.[] | "\(.kind)/\(.metadata.name)"] | sort | join(" ")' <<<"$1"; }
