#!/usr/bin/env bash
# Third-party tools the benchmarks compare gracekeeper against.
#
# Source this file and call the ensure_* functions; each is idempotent and
# prints the path of the tool on stdout (progress goes to stderr).
# Run directly, `tools.sh kube-score` builds kube-score and prints its path.
#
# Tools are cached per version under
#   ${XDG_CACHE_HOME:-$HOME/.cache}/gracekeeper/tools/<tool>-<version>/
# so a version bump builds a fresh copy and never reuses a stale one.

# Pinned versions. kube-score is built from its Go module with the machine's
# Go toolchain through the normal `go install` path (module proxy, checksum
# database), so nothing prebuilt is downloaded.
KUBE_SCORE_VERSION="${KUBE_SCORE_VERSION:-v1.20.0}"

GK_TOOLS_DIR="${GK_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gracekeeper/tools}"

gk_go() {
  if command -v go >/dev/null 2>&1; then
    command -v go
  elif [[ -x /usr/local/go/bin/go ]]; then
    echo /usr/local/go/bin/go
  else
    return 1
  fi
}

# ensure_kube_score: builds kube-score ${KUBE_SCORE_VERSION} if it is not in the
# cache yet and prints the binary's path.
ensure_kube_score() {
  local dir="${GK_TOOLS_DIR}/kube-score-${KUBE_SCORE_VERSION}"
  local bin="${dir}/bin/kube-score"
  if [[ -x "${bin}" ]]; then
    echo "${bin}"
    return 0
  fi
  local go
  if ! go="$(gk_go)"; then
    echo "tools.sh: no Go toolchain found (need go >= 1.21 to build kube-score)" >&2
    return 1
  fi
  mkdir -p "${dir}"
  echo "tools.sh: building kube-score ${KUBE_SCORE_VERSION} with $(${go} version | cut -d' ' -f3) (one-time, cached in ${dir})" >&2
  local start end
  start=$(date +%s)
  # Build into a temporary GOBIN and move into place only on success, so an
  # interrupted build never leaves a half-written binary that looks cached.
  local tmp="${dir}/bin.tmp.$$"
  rm -rf "${tmp}"
  mkdir -p "${tmp}"
  # nice: the build shares two cores with everything else on the machine.
  if ! GOBIN="${tmp}" CGO_ENABLED=0 \
      nice -n 19 "${go}" install -trimpath -ldflags='-s -w' \
      "github.com/zegl/kube-score/cmd/kube-score@${KUBE_SCORE_VERSION}" >&2; then
    rm -rf "${tmp}"
    rmdir "${dir}" 2>/dev/null || true
    echo "tools.sh: building kube-score ${KUBE_SCORE_VERSION} failed" >&2
    return 1
  fi
  end=$(date +%s)
  mkdir -p "${dir}/bin"
  mv -f "${tmp}/kube-score" "${bin}"
  rm -rf "${tmp}"
  echo "${KUBE_SCORE_VERSION} built in $((end - start))s with $(${go} version | cut -d' ' -f3)" > "${dir}/BUILD-INFO"
  echo "tools.sh: kube-score ${KUBE_SCORE_VERSION} built in $((end - start))s" >&2
  echo "${bin}"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  set -euo pipefail
  case "${1:-kube-score}" in
    kube-score) ensure_kube_score ;;
    *) echo "usage: $0 [kube-score]" >&2; exit 2 ;;
  esac
fi
